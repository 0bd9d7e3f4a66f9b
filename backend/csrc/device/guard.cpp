// echo_npu device guard: the current device and current stream per thread (runtime), streams
// (default, pool, new with a priority) and events of the runtime (stream.h), synchronisation,
// and record_stream for the caching allocator. What torch.Stream, torch.Event and
// torch.accelerator call for PrivateUse1. Faults guard_no_switch and set_stream_ignored live here.
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "../aten/registry.h"
#include "../runtime/runtime.h"
#include "../runtime/stream.h"
#include "api.h"
#include "device.h"

namespace enpu {
namespace {

void check(enpuError_t e) {
  if (e == enpuErrorAsyncWork) TORCH_CHECK(false, "echo_npu: queued work failed: ", lastAsyncError());
  TORCH_CHECK(e == enpuSuccess, "echo_npu: ", enpuGetErrorString(e));
}

int index_of(c10::DeviceIndex i) { return i < 0 ? enpuGetDevice() : static_cast<int>(i); }

enpuEvent_t as_event(void* e) { return static_cast<enpuEvent_t>(e); }

struct EnpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;
  EnpuGuardImpl() = default;
  explicit EnpuGuardImpl(c10::DeviceType t) { TORCH_INTERNAL_ASSERT(t == kType); }
  c10::DeviceType type() const override { return kType; }
  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = getDevice();
    if (d.index() >= 0) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kType, enpuGetDevice()); }
  void setDevice(c10::Device d) const override {
    if (fault(Fault::GuardNoSwitch)) return;  // the guard "switches" and nothing happens
    TORCH_CHECK(enpuSetDevice(d.index()) == enpuSuccess, "echo_npu: invalid device index ",
                static_cast<int>(d.index()));
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (!fault(Fault::GuardNoSwitch)) enpuSetDevice(d.index());
  }

  // ---- streams: id 0 is a device's default stream -------------------------------------------
  static c10::Stream wrap(int device, enpuStream_t id) {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, static_cast<c10::DeviceIndex>(device)),
                       static_cast<c10::StreamId>(id));
  }
  c10::Stream getStream(c10::Device d) const noexcept override {
    const int i = index_of(d.index());
    return wrap(i, enpuGetStream(i));
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return wrap(index_of(d.index()), 0); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority = false) const override {
    enpuStream_t id = 0;
    int least = 0, greatest = 0;
    enpuStreamPriorityRange(&least, &greatest);
    check(enpuStreamFromPool(index_of(d.index()), high_priority ? greatest : least, &id));
    return wrap(index_of(d.index()), id);
  }
  // torch.Stream(): from the pool too (as CUDA's), so that creating streams never leaks them
  c10::Stream getNewStream(c10::Device d, int priority = 0) const override {
    enpuStream_t id = 0;
    check(enpuStreamFromPool(index_of(d.index()), priority, &id));
    return wrap(index_of(d.index()), id);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override {
    const int i = index_of(s.device_index());
    if (fault(Fault::SetStreamIgnored)) return wrap(i, enpuGetStream(i));  // nothing changes
    enpuStream_t prev = 0;
    if (enpuExchangeStream(i, s.id(), &prev) != enpuSuccess) return wrap(i, enpuGetStream(i));
    return wrap(i, prev);
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(enpuDeviceCount());
  }
  bool queryStream(const c10::Stream& s) const override {
    return enpuStreamQuery(index_of(s.device_index()), s.id()) != 0;
  }
  void synchronizeStream(const c10::Stream& s) const override {
    check(enpuStreamSynchronize(index_of(s.device_index()), s.id()));
  }
  void synchronizeDevice(const c10::DeviceIndex i) const ENPU_OVERRIDE_SINCE_2_6 {
    const int d = index_of(i);
    if (fault(Fault::SyncCurrentStreamOnly)) return check(enpuStreamSynchronize(d, enpuGetStream(d)));
    check(enpuDeviceSynchronize(d));
  }
  void recordDataPtrOnStream(const c10::DataPtr& p, const c10::Stream& s) const override {
    record_stream(p.get(), s.id());
  }

  // ---- events: created at their first record, timing when torch asks for the backend's default
  // (torch.Event(enable_timing=True)) -------------------------------------------------------------
  void record(void** event, const c10::Stream& s, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == s.device_index(), "Event device index ",
                static_cast<int>(device_index), " does not match recording stream's device index ",
                static_cast<int>(s.device_index()), ".");
    const int i = index_of(s.device_index());
    if (!*event) {
      enpuEvent_t e = nullptr;
      check(enpuEventCreate(&e, i, flag == c10::EventFlag::BACKEND_DEFAULT ? 1 : 0));
      *event = e;
    }
    check(enpuEventRecord(as_event(*event), i, s.id()));
  }
  void block(void* event, const c10::Stream& s) const override {
    if (event) check(enpuStreamWaitEvent(index_of(s.device_index()), s.id(), as_event(event)));
  }
  bool queryEvent(void* event) const override { return enpuEventQuery(as_event(event)) != 0; }
  void synchronizeEvent(void* event) const ENPU_OVERRIDE_CHECKED_2_9 {
    if (!event || fault(Fault::EventSyncEarly)) return;  // the fault: returns before the record
    check(enpuEventSynchronize(as_event(event)));
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const ENPU_OVERRIDE_CHECKED_2_9 {
    TORCH_CHECK(start && end, "Both events must be recorded before calculating elapsed time.");
    float ms = 0;
    enpuError_t e = enpuEventElapsedTime(&ms, as_event(start), as_event(end));
    TORCH_CHECK(e != enpuErrorInvalidValue,
                "Both events must be created with argument 'enable_timing=True'.");
    TORCH_CHECK(e != enpuErrorNotReady,
                "echo_npu: elapsed_time of an event not reached yet; synchronize it first");
    check(e);
    return ms;
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    enpuEventDestroy(as_event(event));
  }
};

EnpuGuardImpl* g_guard = nullptr;

}  // namespace

void register_guard() {
  g_guard = new EnpuGuardImpl();
  static c10::impl::DeviceGuardImplRegistrar registrar(c10::DeviceType::PrivateUse1, g_guard);
}

// ---- for the Python device module (api.h): the guard's own paths, so faults apply ----------
int64_t current_stream(int device) { return g_guard->getStream(c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device))).id(); }

int64_t exchange_stream(int device, int64_t stream) {
  auto s = c10::Stream(c10::Stream::UNSAFE,
                       c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)),
                       static_cast<c10::StreamId>(stream));
  return g_guard->exchangeStream(s).id();
}

void synchronize(int device) {
  if (device < 0 && fault(Fault::SyncCurrentStreamOnly)) device = enpuGetDevice();
  if (device < 0)
    check(enpuDeviceSynchronize(-1));
  else
    g_guard->synchronizeDevice(static_cast<c10::DeviceIndex>(device));
}

void sync_for_kernels(int device) {
  if (!enpuGetAsync()) return;
  const int i = device < 0 ? enpuGetDevice() : device;
  check(enpuStreamSynchronize(i, enpuGetStream(i)));
}

int stream_priority(int device, int64_t stream) {
  int p = 0;
  check(enpuStreamGetPriority(device, stream, &p));
  return p;
}

}  // namespace enpu

// echo_npu PrivateUse1 hooks: device count/current device, generators, pinned host memory,
// storage resize, and the registration of the device integration (hooks, guard, allocator).
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Storage.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <mutex>
#include <string>

#include "../aten/registry.h"
#include "../runtime/runtime.h"
#include "api.h"
#include "device.h"

namespace enpu {
namespace {

struct EnpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const ENPU_OVERRIDE_SINCE_2_7 { return true; }
  bool isAvailable() const ENPU_OVERRIDE_SINCE_2_7 { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(enpuDeviceCount());
  }
  void setCurrentDevice(c10::DeviceIndex d) const override { enpuSetDevice(d); }
  c10::DeviceIndex getCurrentDevice() const override {
    return static_cast<c10::DeviceIndex>(enpuGetDevice());
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    auto old = getCurrentDevice();
    if (d >= 0) enpuSetDevice(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override { return exchangeDevice(d); }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex idx) const override {
    return default_generator(idx);
  }
  at::Generator getNewGenerator(c10::DeviceIndex idx) const ENPU_OVERRIDE_SINCE_2_6 {
    return new_generator(idx);
  }
  at::Device getDeviceFromPtr(void*) const override {
    return at::Device(c10::DeviceType::PrivateUse1, enpuGetDevice());
  }
  bool isPinnedPtr(const void* p) const override { return is_pinned_ptr(p); }
  at::Allocator* getPinnedMemoryAllocator() const override {
    TORCH_CHECK(!fault(Fault::PinnedRefused), "echo_npu: pinned memory is not available");
    return pinned_allocator();
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
    c10::OptionalDeviceGuard guard;  // the copy is ordered on the storage's device's stream
    if (impl->device().has_index()) guard.reset_device(impl->device());
    c10::DataPtr fresh = device_allocator()->allocate(newsize);
    size_t keep = std::min(newsize, impl->nbytes());
    if (keep) {
      enpuError_t e = enpuMemcpy(fresh.get(), impl->data(), keep, enpuMemcpyDeviceToDevice);
      TORCH_CHECK(e == enpuSuccess, "echo_npu: ", enpuGetErrorString(e));
    }
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(newsize);
  }
};

}  // namespace

// Not a static initialiser: registering PrivateUse1 hooks a second time aborts the process, so
// the Python package calls this once, and it checks first.
std::string register_device() {
  static std::mutex mu;
  static bool done = false;
  std::lock_guard<std::mutex> lk(mu);
  if (done) return "";
  if (at::isPrivateUse1HooksRegistered())
    return "PrivateUse1 hooks are already registered by another library";
  register_allocator();
  register_guard();
  at::RegisterPrivateUse1HooksInterface(new EnpuHooks());
  done = true;
  return "";
}

}  // namespace enpu

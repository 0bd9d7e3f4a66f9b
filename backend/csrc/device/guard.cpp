// echo_npu device guard: current device per thread (runtime), one default stream per device.
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "../runtime/runtime.h"
#include "device.h"

namespace enpu {
namespace {

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
    TORCH_CHECK(enpuSetDevice(d.index()) == enpuSuccess, "echo_npu: invalid device index ",
                static_cast<int>(d.index()));
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override { enpuSetDevice(d.index()); }
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getNewStream(c10::Device d, int priority = 0) const override {
    (void)priority;
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return s; }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(enpuDeviceCount());
  }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const ENPU_OVERRIDE_SINCE_2_6 {}
};

}  // namespace

void register_guard() {
  static c10::impl::DeviceGuardImplRegistrar registrar(c10::DeviceType::PrivateUse1,
                                                       new EnpuGuardImpl());
}

}  // namespace enpu

// echo_npu device integration: c10 allocator, device guard, PrivateUse1 hooks and generator.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "../runtime/runtime.h"

// Hooks that newer torch added to the interfaces we implement: `override` only where they exist.
#define ENPU_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||       \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))
#if ENPU_TORCH_AT_LEAST(2, 6)
#define ENPU_OVERRIDE_SINCE_2_6 override  // synchronizeDevice, getNewGenerator
#else
#define ENPU_OVERRIDE_SINCE_2_6
#endif
#if ENPU_TORCH_AT_LEAST(2, 7)
#define ENPU_OVERRIDE_SINCE_2_7 override  // isBuilt, isAvailable
#else
#define ENPU_OVERRIDE_SINCE_2_7
#endif

namespace enpu {
namespace {

void delete_block(void* p) { enpuFree(p); }

struct EnpuAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    void* p = nullptr;
    auto err = enpuMalloc(&p, n);
    TORCH_CHECK(err == enpuSuccess, "echo_npu: out of memory allocating ", n, " bytes");
    return {p, p, &delete_block, c10::Device(c10::DeviceType::PrivateUse1, enpuGetDevice())};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &delete_block; }
  void copy_data(void* dst, const void* src, std::size_t count) const override {
    enpuMemcpy(dst, src, count, enpuMemcpyDeviceToDevice);
  }
};

EnpuAllocator g_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

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

C10_REGISTER_GUARD_IMPL(PrivateUse1, EnpuGuardImpl);

struct EnpuGenerator : public at::CPUGeneratorImpl {
  explicit EnpuGenerator(c10::DeviceIndex idx) {
    device_ = c10::Device(c10::DeviceType::PrivateUse1, idx);
    key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  }
};

}  // namespace

const at::Generator& default_generator(c10::DeviceIndex idx) {
  static std::vector<at::Generator> gens = [] {
    std::vector<at::Generator> v;
    for (int i = 0; i < enpuDeviceCount(); ++i) {
      v.push_back(at::make_generator<EnpuGenerator>(static_cast<c10::DeviceIndex>(i)));
      v.back().set_current_seed(c10::default_rng_seed_val);
    }
    return v;
  }();
  if (idx < 0) idx = static_cast<c10::DeviceIndex>(enpuGetDevice());
  TORCH_CHECK(idx < static_cast<c10::DeviceIndex>(gens.size()), "echo_npu: invalid device index");
  return gens[idx];
}

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
    return at::make_generator<EnpuGenerator>(idx < 0 ? getCurrentDevice() : idx);
  }
  at::Device getDeviceFromPtr(void*) const override {
    return at::Device(c10::DeviceType::PrivateUse1, enpuGetDevice());
  }
  bool isPinnedPtr(const void*) const override { return false; }
  at::Allocator* getPinnedMemoryAllocator() const override { return c10::GetAllocator(c10::DeviceType::CPU); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
    c10::DataPtr fresh = g_allocator.allocate(newsize);
    size_t keep = std::min(newsize, impl->nbytes());
    if (keep) enpuMemcpy(fresh.get(), impl->data(), keep, enpuMemcpyDeviceToDevice);
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(newsize);
  }
};

struct Registrar {
  Registrar() { at::RegisterPrivateUse1HooksInterface(new EnpuHooks()); }
} g_registrar;

}  // namespace
}  // namespace enpu

#include <ATen/ops/empty.h>

#include "rng.h"

namespace enpu {

void manual_seed(int device, uint64_t seed) {
  auto gen = default_generator(static_cast<c10::DeviceIndex>(device));
  std::lock_guard<std::mutex> lk(gen.mutex());
  gen.set_current_seed(seed);
}

uint64_t initial_seed(int device) {
  return default_generator(static_cast<c10::DeviceIndex>(device)).current_seed();
}

std::string get_rng_state(int device) {
  auto gen = default_generator(static_cast<c10::DeviceIndex>(device));
  std::lock_guard<std::mutex> lk(gen.mutex());
  auto t = gen.get_state();
  return std::string(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.nbytes()));
}

void set_rng_state(int device, const std::string& state) {
  auto gen = default_generator(static_cast<c10::DeviceIndex>(device));
  auto t = at::empty({static_cast<int64_t>(state.size())}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(t.data_ptr(), state.data(), state.size());
  std::lock_guard<std::mutex> lk(gen.mutex());
  gen.set_state(t);
}

}  // namespace enpu

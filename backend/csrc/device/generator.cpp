// echo_npu random generators: one default CPU-algorithm (mt19937) generator per device, so the
// device draws exactly what CPU draws from the same seed; seeding and state for the bindings.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "../aten/registry.h"
#include "../runtime/runtime.h"
#include "device.h"
#include "rng.h"

namespace enpu {
namespace {

struct EnpuGenerator : public at::CPUGeneratorImpl {
  explicit EnpuGenerator(c10::DeviceIndex idx) {
    device_ = c10::Device(c10::DeviceType::PrivateUse1, idx);
    key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  }
  void set_state(const c10::TensorImpl& new_state) override {
    at::CPUGeneratorImpl::set_state(new_state);
    // the fault: only the seed survives a restore (the engine restarts from it)
    if (fault(Fault::SeedOnlyRestore)) set_current_seed(current_seed());
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

at::Generator new_generator(c10::DeviceIndex idx) {
  return at::make_generator<EnpuGenerator>(idx < 0 ? static_cast<c10::DeviceIndex>(enpuGetDevice())
                                                   : idx);
}

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

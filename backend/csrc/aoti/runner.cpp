// echo_npu's AOTInductor runner: a package compiled for npu is loaded by the runner registered
// for its device key, as PyTorch's own devices register theirs (model_container_runner_cpu.cpp).
// echo_npu's memory is host memory: the runner needs nothing beyond the base class.
#include "runner.h"

#include <dlfcn.h>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
#include <torch/csrc/inductor/aoti_runner/model_container_runner.h>

#include <memory>
#include <stdexcept>

namespace {

using torch::inductor::AOTIModelContainerRunner;

class NpuRunner : public AOTIModelContainerRunner {
 public:
  NpuRunner(const std::string& so_path, size_t num_models, const std::string& device,
            const std::string& bin_dir, bool single_threaded)
      : AOTIModelContainerRunner(so_path, num_models, device, bin_dir, single_threaded) {}
};

std::unique_ptr<AOTIModelContainerRunner> create(const std::string& so_path, size_t num_models,
                                                 const std::string& device,
                                                 const std::string& bin_dir,
                                                 const bool single_threaded) {
  // the model's shim calls resolve against this library: exported when the device registered
  try {
    return std::make_unique<NpuRunner>(so_path, num_models, device, bin_dir, single_threaded);
  } catch (const std::exception& e) {
    // the model's own reason went to stderr ("Error: Invalid device: npu"): torch's AOTI
    // runtime (aoti_runtime/model_base.h, parse_device_str) creates models for its own devices
    throw std::runtime_error(
        "echo_npu: the AOTInductor model refused to be created for device '" + device +
        "' (torch's AOTI runtime accepts the devices its parse_device_str lists: cpu, cuda, xpu "
        "and mps up to torch 2.15): " + e.what());
  }
}

}  // namespace

namespace enpu {

bool register_aoti_runner(const std::string& device) {
  torch::inductor::RegisterAOTIModelRunner(device, &create);
  return true;
}

}  // namespace enpu

#else

namespace enpu {

bool register_aoti_runner(const std::string&) { return false; }

}  // namespace enpu

#endif

extern "C" int echo_npu_aoti_shim_count();  // defined in the generated c_shim_npu.cpp

bool enpu::export_aoti_shims() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&echo_npu_aoti_shim_count), &info) == 0) return false;
  // RTLD_NOLOAD: the library is loaded already; this only widens its symbols' scope
  return dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD) != nullptr;
}

int enpu::aoti_shim_count() { return echo_npu_aoti_shim_count(); }

// echo_npu._C: pybind11 bindings of the runtime and glue state (std types only, no torch headers).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>

#include "../aoti/runner.h"
#include "../aten/registry.h"
#include "../device/api.h"
#include "../device/rng.h"
#include "../runtime/runtime.h"

namespace py = pybind11;

namespace {

const char* kModes[] = {"malloc", "aligned", "guard", "page"};

void set_allocator_mode(const std::string& mode) {
  for (int i = 0; i < 4; ++i)
    if (mode == kModes[i]) {
      if (enpuSetAllocatorMode(static_cast<enpuAllocMode>(i)) != enpuSuccess)
        throw std::runtime_error("echo_npu: allocator mode cannot change after the first allocation");
      return;
    }
  throw std::invalid_argument("invalid ECHO_NPU_ALLOCATOR value '" + mode +
                              "'; valid values: malloc, aligned, guard, page");
}

py::dict memory_stats() {
  auto s = enpu::memStats();
  py::dict d;
  d["live_blocks"] = s.live_blocks;
  d["live_bytes"] = s.live_bytes;
  d["peak_bytes"] = s.peak_bytes;
  d["total_blocks"] = s.total_blocks;
  d["total_bytes"] = s.total_bytes;
  return d;
}

py::list live_blocks() {
  py::list out;
  for (const auto& b : enpu::liveBlocks()) {
    py::dict d;
    d["ptr"] = b.ptr;
    d["size"] = b.size;
    d["op"] = b.op;
    d["serial"] = b.serial;
    out.append(d);
  }
  return out;
}

py::list check_memory() {
  enpuCheckMemory("");
  py::list out;
  for (const auto& c : enpu::memoryErrors()) {
    py::dict d;
    d["ptr"] = c.ptr;
    d["size"] = c.size;
    d["op"] = c.op;
    d["side"] = c.side;
    d["offset"] = c.offset;
    d["first_seen_after"] = c.first_seen_after;
    d["serial"] = c.serial;
    out.append(d);
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "echo_npu native bindings";
  // registration (called once by the package's __init__)
  m.def("register_device", &enpu::register_device);
  m.def("register_kernels", &enpu::register_kernels, py::arg("with_fallback"),
        py::arg("only") = std::vector<std::string>{});
  // initialisation and forks
  m.def("init", [] {
    enpuError_t e = enpuInit();
    if (e != enpuSuccess) throw std::runtime_error(std::string("echo_npu: ") + enpuGetErrorString(e));
  });
  m.def("is_initialized", [] { return enpuIsInitialized() != 0; });
  m.def("set_refuse_fork", [](bool on) { enpuSetRefuseFork(on ? 1 : 0); });
  m.def("refuse_fork", [] { return enpuGetRefuseFork() != 0; });
  m.def("in_bad_fork", [] { return enpuCheckProcess() == enpuErrorForkedChild; });
  // c10 allocator statistics (torch.npu.memory_*)
  m.def("allocator_stats", &enpu::allocator_stats);
  m.def("reset_peak_stats", &enpu::reset_peak_stats);
  m.def("reset_accumulated_stats", &enpu::reset_accumulated_stats);
  m.def("set_allocator_mode", &set_allocator_mode);
  m.def("allocator_mode", [] { return std::string(kModes[enpuGetAllocatorMode()]); });
  m.def("memory_stats", &memory_stats);
  m.def("live_blocks", &live_blocks);
  m.def("check_memory", &check_memory);
  m.def("clear_memory_errors", [] { enpuClearMemoryErrors(); });
  m.def("kernel_launches", [] { return enpuKernelLaunchCount(); });
  m.def("register_aoti_runner", &enpu::register_aoti_runner, py::arg("device"));
  m.def("aoti_shim_count", &enpu::aoti_shim_count);
  m.def("export_aoti_shims", &enpu::export_aoti_shims);
  m.def("set_fallback_routes", &enpu::set_routes);
  m.def("get_fallback_routes", &enpu::get_routes);
  m.def("native_ops", &enpu::native_ops);
  m.def("set_faults", &enpu::set_faults);
  m.def("get_faults", &enpu::get_faults);
  m.def("fault_names", &enpu::fault_names);
  m.def("fault_descriptions", &enpu::fault_descriptions);
  m.def("fallback_counts", &enpu::fallback_counts);
  m.def("reset_fallback_counts", &enpu::reset_fallback_counts);
  m.def("device_count", [] { return enpuDeviceCount(); });
  m.def("current_device", [] { return enpuGetDevice(); });
  m.def("set_device", [](int i) {
    if (enpuSetDevice(i) != enpuSuccess) throw std::invalid_argument("echo_npu: invalid device index");
  });
  m.def("manual_seed", &enpu::manual_seed);
  m.def("initial_seed", &enpu::initial_seed);
  m.def("get_rng_state", [](int d) { return py::bytes(enpu::get_rng_state(d)); });
  m.def("set_rng_state", [](int d, const std::string& s) { enpu::set_rng_state(d, s); });
}

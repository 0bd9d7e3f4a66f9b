// echo_npu._C: pybind11 bindings of the runtime and glue state (std types only, no torch headers).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>

#include "../aoti/runner.h"
#include "../aten/registry.h"
#include "../device/api.h"
#include "../device/rng.h"
#include "../runtime/runtime.h"
#include "../runtime/stream.h"

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
  {
    py::gil_scoped_release nogil;   // the workers' work first (its errors stay for later)
    if (enpuGetAsync()) enpu::drain();
    enpuCheckMemory("");
  }
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

// Delay injector: kind, an enpuWorkKind below enpuDelayKinds (the package names them:
// echo_npu._env.DELAY_KINDS); scope -1 all streams, -2 default streams, -3 other streams, >= 0
// that stream of `device`.
void set_delay(int kind, int64_t us, int device, int64_t scope) {
  if (kind < 0 || kind >= enpuDelayKinds) throw std::invalid_argument("echo_npu: no such delay kind");
  if (enpuSetDelay(device, scope, static_cast<enpuWorkKind>(kind), us) != enpuSuccess)
    throw std::invalid_argument("echo_npu: no such stream for a delay");
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
  m.def("in_bad_fork", [] { return enpuGetRefuseFork() != 0 && enpuIsForkedChild() != 0; });
  m.def("is_forked_child", [] { return enpuIsForkedChild() != 0; });
  // runtime personalities (ECHO_NPU_RUNTIME): bit i is echo_npu._env.RUNTIME_PERSONALITIES[i]
  m.def("set_runtime_personality", [](unsigned flags, const std::string& lock_path,
                                      const std::string& device_name) {
    if (enpuSetPersonality(flags, lock_path.c_str(), device_name.c_str()) != enpuSuccess)
      throw std::runtime_error("echo_npu: the runtime personality cannot change once the device is "
                               "initialised (or the exclusive personality has no lock file)");
  });
  m.def("runtime_personality", [] { return enpuGetPersonality(); });
  // a reference never given back: what must outlive the interpreter's teardown (echo_npu/_exit.py)
  m.def("keep_forever", [](py::object o) { o.inc_ref(); });
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
  // asynchronous mode, streams, the delay injector, pinned memory
  m.def("set_async", [](bool on) { enpuSetAsync(on ? 1 : 0); });
  m.def("is_async", [] { return enpuGetAsync() != 0; });
  m.def("delay_kind_count", [] { return static_cast<int>(enpuDelayKinds); });
  m.def("set_delay", &set_delay, py::arg("kind"), py::arg("us"), py::arg("device") = 0,
        py::arg("scope") = -1);
  m.def("clear_delays", [] { enpuClearDelays(); });
  m.def("drain", [] { enpu::drain(); }, py::call_guard<py::gil_scoped_release>());
  m.def("sync_for_kernels", &enpu::sync_for_kernels, py::arg("device") = -1,
        py::call_guard<py::gil_scoped_release>());
  m.def("queue_failing_work", &enpu::queue_failing_work, py::call_guard<py::gil_scoped_release>());
  m.def("synchronize", &enpu::synchronize, py::arg("device") = -1,
        py::call_guard<py::gil_scoped_release>());
  m.def("current_stream", &enpu::current_stream);
  m.def("exchange_stream", &enpu::exchange_stream);
  m.def("stream_priority", &enpu::stream_priority);
  m.def("stream_priority_range", [] {
    int least = 0, greatest = 0;
    enpuStreamPriorityRange(&least, &greatest);
    return std::make_pair(least, greatest);
  });
  m.def("empty_cache", [] { enpu::release_cached(-1); }, py::call_guard<py::gil_scoped_release>());
  m.def("manual_seed", &enpu::manual_seed);
  m.def("initial_seed", &enpu::initial_seed);
  m.def("get_rng_state", [](int d) { return py::bytes(enpu::get_rng_state(d)); });
  m.def("set_rng_state", [](int d, const std::string& s) { enpu::set_rng_state(d, s); });
}

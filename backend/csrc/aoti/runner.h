// echo_npu's AOTInductor runner registration (std types only, no torch headers).
#pragma once
#include <string>

namespace enpu {

// Registers echo_npu's runner for AOTInductor packages compiled for `device` (torch's registry
// of runners per device key, which `aoti_load_package` looks a package's device up in). Returns
// false when this torch's runner API is not the one echo_npu builds against (torch < 2.9).
bool register_aoti_runner(const std::string& device);

// Makes this library's symbols (the shims) global, so that the shared objects Inductor builds for
// npu (cpp_wrapper modules, AOTInductor models) resolve `aoti_torch_npu_<op>` when they are
// loaded; Python loads extensions with their symbols local. Returns false if dlopen refused.
bool export_aoti_shims();

// How many `aoti_torch_<device>_<op>` shims the build generated (csrc/aoti/generate.py).
int aoti_shim_count();

}  // namespace enpu

// echo_npu glue state shared with the Python bindings (std types only, no ATen):
// natively registered overload names, fallback routes, fault switches, fallback counters.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace enpu {

// Registers the kernel table (register.cpp), the Conjugate/Negative fallthroughs of _copy_from*
// and, if with_fallback, the boxed cpu_fallback for everything else. Once per process. With a
// non-empty `only`, just those overloads of the table (no autocast or autograd kernels): the
// native part of a backend whose other kernels are registered from Python.
void register_kernels(bool with_fallback, const std::vector<std::string>& only = {});

// Native overload registry ("add.Tensor", "abs", ...). routable=false for the primitives the
// cpu_fallback itself needs (empty*, _copy_from*, as_strided, view, resize_, ...).
void register_native(const std::string& name, bool routable);
std::vector<std::string> native_ops();
bool routed(const char* name);
// Throws std::invalid_argument for unknown or non-routable names.
void set_routes(const std::vector<std::string>& names);
std::vector<std::string> get_routes();

// Fault switches, one per entry of faults.def (in that order).
enum class Fault {
#define ENPU_FAULT(id, name, description) id,
#include "faults.def"
#undef ENPU_FAULT
};
bool fault(Fault f);
// Throws std::invalid_argument listing the valid names on an unknown name.
void set_faults(const std::vector<std::string>& names);
std::vector<std::string> get_faults();
std::vector<std::string> fault_names();
// name -> one-line description, in list order.
std::vector<std::pair<std::string, std::string>> fault_descriptions();

// Boxed-fallback call counters keyed by overload name.
void count_fallback(const std::string& name);
std::map<std::string, int64_t> fallback_counts();
void reset_fallback_counts();

// Stable C string for a name (interned; never freed).
const char* intern(const std::string& name);

}  // namespace enpu

// echo_npu default-generator access with std types only (for the Python bindings).
#pragma once
#include <cstdint>
#include <string>

namespace enpu {
void manual_seed(int device, uint64_t seed);
uint64_t initial_seed(int device);
std::string get_rng_state(int device);
void set_rng_state(int device, const std::string& state);
}  // namespace enpu

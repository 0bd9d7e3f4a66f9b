// echo_npu device integration shared between its files (ATen level): the c10 allocator, the
// default generators, and the version macros for interfaces that newer torch extended.
#pragma once
#include <ATen/core/Generator.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <torch/version.h>

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

// The PrivateUse1 c10 allocator (allocator.cpp) and its registration with c10.
c10::Allocator* device_allocator();
void register_allocator();
// Fault "accelerator_leak": host memory that the allocator's statistics count as allocated on
// the current device but that is no runtime block (not in live_blocks()); never freed.
void allocate_untracked(size_t nbytes);
// The device guard (guard.cpp) and the PrivateUse1 hooks (hooks.cpp).
void register_guard();

// Default generator of a device (-1: the current one) and fresh generators (generator.cpp).
const at::Generator& default_generator(c10::DeviceIndex idx);
at::Generator new_generator(c10::DeviceIndex idx);

}  // namespace enpu

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
#if ENPU_TORCH_AT_LEAST(2, 9)
// synchronizeEvent, elapsedTime: checked in the headers of 2.9 and 2.13; without `override`
// before (where they exist they are still overridden)
#define ENPU_OVERRIDE_CHECKED_2_9 override
#else
#define ENPU_OVERRIDE_CHECKED_2_9
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
// record_stream: the block at ptr is also used on that stream of its device (asynchronous mode;
// ignored under the fault record_stream_ignored). Emptying the cache: release_cached (api.h).
void record_stream(void* ptr, int64_t stream);
// Pinned host memory (pinned.cpp): its allocator and whether a pointer lies in a pinned block.
c10::Allocator* pinned_allocator();
bool is_pinned_ptr(const void* p);
// The device guard (guard.cpp) and the PrivateUse1 hooks (hooks.cpp).
void register_guard();

// Default generator of a device (-1: the current one) and fresh generators (generator.cpp).
const at::Generator& default_generator(c10::DeviceIndex idx);
at::Generator new_generator(c10::DeviceIndex idx);

}  // namespace enpu

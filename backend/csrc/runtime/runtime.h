// echo_npu device runtime: a C-like driver API (no ATen). Device memory lives in host memory;
// the allocator mode (malloc / aligned / guard / page) is chosen once by enpuInit().
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" {

typedef enum {
  enpuSuccess = 0,
  enpuErrorInvalidValue = 1,
  enpuErrorOutOfMemory = 2,
  enpuErrorUnknownPointer = 3,
  enpuErrorForkedChild = 4,  // used in a forked child of the process that initialised it
  enpuErrorAsyncWork = 5,    // queued work raised (reported by the next synchronisation)
  enpuErrorNotReady = 6,     // an event not reached yet
  enpuErrorDeviceBusy = 7,   // the device is open in another process (personality "exclusive")
  enpuErrorSticky = 8,       // a kernel tripped a device-side assert: every later call fails
} enpuError_t;

const char* enpuGetErrorString(enpuError_t err);

typedef enum {
  enpuMemcpyHostToDevice = 0,
  enpuMemcpyDeviceToHost = 1,
  enpuMemcpyDeviceToDevice = 2,
} enpuMemcpyKind;

typedef enum {
  enpuAllocMalloc = 0,
  enpuAllocAligned = 1,
  enpuAllocGuard = 2,
  enpuAllocPage = 3,
} enpuAllocMode;

// Allocator mode: enpuSetAllocatorMode fails once any block was allocated.
enpuError_t enpuSetAllocatorMode(enpuAllocMode mode);
enpuAllocMode enpuGetAllocatorMode(void);

// Initialisation: lazy (the first enpuMalloc), or explicit. Records the initialising process.
// With refuse-fork on (like CUDA), every later enpuInit/enpuMalloc/enpuMemcpy/enpuLaunchKernel/
// enpuCheckProcess in a forked child of that process fails with enpuErrorForkedChild.
enpuError_t enpuInit(void);
int enpuIsInitialized(void);
void enpuSetRefuseFork(int on);
int enpuGetRefuseFork(void);
// enpuErrorForkedChild in such a child, else enpuSuccess (never initialises). With the
// "threaded" personality, such a child blocks here forever instead (unless refuse-fork is on).
enpuError_t enpuCheckProcess(void);
// 1 in a forked child of the process that initialised the runtime, else 0 (never blocks).
int enpuIsForkedChild(void);
// A kernel's device-side assert (CUDA's sticky errors): the call that trips it returns, and
// from then on enpuCheckProcess, every allocation, copy, launch and synchronisation in this
// process fail with enpuErrorSticky (enpuGetErrorString names `message`). Only a new process
// can use the device again.
void enpuTripDeviceAssert(const char* message);
int enpuDeviceAssertTripped(void);

// Runtime personalities (ECHO_NPU_RUNTIME; all off by default): behaviours of real vendor
// runtimes (runtime/personality.cpp). Set before the device is initialised (the package does at
// import); enpuSetPersonality fails once it is. The bits are in the order of the package's names
// (echo_npu._env.RUNTIME_PERSONALITIES).
enum {
  // enpuInit starts driver threads; the event thread holds the driver lock for good, so a forked
  // child of the initialising process that enters the runtime waits for that lock forever
  enpuPersonalityThreaded = 1,
  // enpuInit takes an exclusive flock on lock_path: a second live process gets enpuErrorDeviceBusy
  enpuPersonalityExclusive = 2,
  enpuPersonalitySlowInit = 4,      // enpuInit takes 2 s
  // the initialising process's exit() joins a runtime thread that never ends
  enpuPersonalityTeardownHang = 8,
};
enpuError_t enpuSetPersonality(unsigned flags, const char* lock_path, const char* device_name);
unsigned enpuGetPersonality(void);

// Devices (all share host memory; the index is bookkeeping only).
int enpuDeviceCount(void);
enpuError_t enpuSetDevice(int index);
int enpuGetDevice(void);

// Memory. size 0 returns a null pointer and records nothing.
enpuError_t enpuMalloc(void** ptr, size_t size);
enpuError_t enpuFree(void* ptr);
// Copies on the current device's current stream (stream.h): in asynchronous mode a host source
// is staged first and a device-to-host copy waits for the stream, as cudaMemcpy.
enpuError_t enpuMemcpy(void* dst, const void* src, size_t count, enpuMemcpyKind kind);
int enpuIsDevicePointer(const void* ptr);
// A caching allocator's view of a block (asynchronous mode): cached blocks stay allocated but
// are neither live nor counted in memStats/liveBlocks; a reused block is named after the
// current op and gets a new serial number.
enpuError_t enpuSetBlockCached(void* ptr, int cached);

// The op on whose behalf the current thread allocates (set by the ATen glue). Returns the
// previous name (a pointer to a static string or nullptr).
const char* enpuSetCurrentOp(const char* name);
const char* enpuGetCurrentOp(void);

// Kernel launch entry: runs fn(args) synchronously and counts launches (queued kernels: stream.h).
typedef void (*enpuKernelFn)(void* args);
enpuError_t enpuLaunchKernel(const char* name, enpuKernelFn fn, void* args);
uint64_t enpuKernelLaunchCount(void);
void enpuCountKernelLaunch(void);

// Guard-zone check of all live blocks (guard/page modes). after_op names the op after which the
// check runs ("" when called directly). Returns the number of corrupted zones recorded so far.
size_t enpuCheckMemory(const char* after_op);
void enpuClearMemoryErrors(void);
}

namespace enpu {
struct MemStats {
  int64_t live_blocks = 0, live_bytes = 0, peak_bytes = 0, total_blocks = 0, total_bytes = 0;
};
struct BlockInfo {
  uintptr_t ptr;
  size_t size;
  std::string op;
  uint64_t serial;
};
struct Corruption {
  uintptr_t ptr;
  size_t size;
  std::string op;
  std::string side;
  size_t offset;
  std::string first_seen_after;
  uint64_t serial;
};
MemStats memStats();
std::vector<BlockInfo> liveBlocks();
std::vector<Corruption> memoryErrors();
}  // namespace enpu

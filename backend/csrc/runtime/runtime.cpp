// echo_npu device runtime: allocator modes, red-zone checking, statistics, memcpy, launch.
#include "runtime.h"

#include "personality.h"
#include "stream.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define ENPU_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define ENPU_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define ENPU_POISON(p, n) ((void)(p), (void)(n))
#define ENPU_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace {

constexpr size_t kZone = 64;          // red zone bytes before a block (guard mode)

// Guard mode's red zone after a block is as large as the block itself (at least kZone): the
// classic bug writes a strided view's whole extent from its data pointer, overflowing by up to
// the block's size. A zone that small overflows cannot leave keeps them out of malloc's own
// metadata, so they are reported by check() instead of crashing a later, unrelated free().
size_t after_zone(size_t size) { return std::max(kZone, (size + kZone - 1) / kZone * kZone); }
constexpr size_t kAlign = 64;         // alignment of aligned/guard modes
constexpr unsigned char kPattern = 0xCD;  // red zones
constexpr unsigned char kFresh = 0xA5;    // fresh (uninitialised) user bytes
constexpr int kDeviceCount = 2;

struct Block {
  size_t size;       // requested bytes
  void* base;        // what the underlying allocator returned
  size_t base_size;  // bytes of the underlying allocation
  std::string op;
  uint64_t serial;
  bool cached = false;  // held by a caching allocator, not in use
};

std::mutex g_mu;
std::map<uintptr_t, Block> g_blocks;
std::map<std::tuple<uint64_t, int>, enpu::Corruption> g_errors;  // (serial, side) -> record
enpu::MemStats g_stats;
uint64_t g_serial = 0;
enpuAllocMode g_mode = enpuAllocMalloc;
std::atomic<uint64_t> g_launches{0};
std::atomic<bool> g_initialized{false};
std::atomic<bool> g_refuse_fork{false};
std::atomic<pid_t> g_init_pid{0};
std::mutex g_init_mu;  // enpuInit (its personalities may take seconds: not under g_mu)
std::atomic<bool> g_sticky{false};  // a device-side assert tripped (enpuTripDeviceAssert)
char g_sticky_message[512] = "device-side assert triggered";
thread_local const char* t_current_op = nullptr;
thread_local int t_device = 0;

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

// Zones of a block as [start, len) pairs: before (side 0) and after (side 1, slack included).
void zones(uintptr_t user, const Block& b, uintptr_t* s0, size_t* n0, uintptr_t* s1, size_t* n1) {
  if (g_mode == enpuAllocGuard) {
    *s0 = user - kZone;
    *n0 = kZone;
    *s1 = user + b.size;
    *n1 = round_up(b.size, kAlign) - b.size + after_zone(b.size);
  } else {  // page mode: up to kZone bytes before, slack up to the protected page after
    uintptr_t base = reinterpret_cast<uintptr_t>(b.base);
    *s0 = user - kZone < base ? base : user - kZone;
    *n0 = user - *s0;
    *s1 = user + b.size;
    *n1 = round_up(b.size, 16) - b.size;
  }
}

void check_block_locked(uintptr_t user, const Block& b, const char* after_op) {
  if (g_mode != enpuAllocGuard && g_mode != enpuAllocPage) return;
  uintptr_t s[2];
  size_t n[2];
  zones(user, b, &s[0], &n[0], &s[1], &n[1]);
  for (int side = 0; side < 2; ++side) {
    const unsigned char* z = reinterpret_cast<const unsigned char*>(s[side]);
    for (size_t i = 0; i < n[side]; ++i) {
      if (z[i] != kPattern) {
        auto key = std::make_tuple(b.serial, side);
        if (!g_errors.count(key)) {
          g_errors[key] = enpu::Corruption{user, b.size, b.op, side == 0 ? "before" : "after", i,
                                           after_op ? after_op : "", b.serial};
        }
        break;
      }
    }
  }
}

}  // namespace

extern "C" {

const char* enpuGetErrorString(enpuError_t err) {
  switch (err) {
    case enpuSuccess: return "success";
    case enpuErrorInvalidValue: return "invalid value";
    case enpuErrorOutOfMemory: return "out of memory";
    case enpuErrorUnknownPointer: return "unknown device pointer";
    case enpuErrorAsyncWork: return "queued work failed: ";
    case enpuErrorNotReady: return "event not reached yet: synchronize first";
    case enpuErrorDeviceBusy: return enpu::persona::busy_message();
    case enpuErrorSticky: return g_sticky_message;
    case enpuErrorForkedChild:
      return "cannot re-initialize npu in forked subprocess. To use npu with multiprocessing, you "
             "must use the 'spawn' start method";
  }
  return "unknown error";
}

void enpuTripDeviceAssert(const char* message) {
  std::lock_guard<std::mutex> lk(g_init_mu);
  if (g_sticky.load()) return;  // the first assert is the one every later call names
  std::snprintf(g_sticky_message, sizeof(g_sticky_message),
                "device-side assert triggered (%s); the device is unusable in this process: every "
                "later call fails",
                message);
  g_sticky.store(true);
}

int enpuDeviceAssertTripped(void) { return g_sticky.load() ? 1 : 0; }

int enpuIsForkedChild(void) {
  return g_initialized.load() && g_init_pid.load() != getpid() ? 1 : 0;
}

enpuError_t enpuCheckProcess(void) {
  if (g_sticky.load(std::memory_order_relaxed)) return enpuErrorSticky;
  if (g_refuse_fork.load(std::memory_order_relaxed) && enpuIsForkedChild())
    return enpuErrorForkedChild;
  enpu::persona::fork_gate();  // "threaded": a forked child blocks here for good
  return enpuSuccess;
}

enpuError_t enpuInit(void) {
  if (g_initialized.load()) return enpuCheckProcess();
  std::lock_guard<std::mutex> lk(g_init_mu);
  if (!g_initialized.load()) {
    if (enpuError_t e = enpu::persona::on_init(); e != enpuSuccess) return e;
    g_init_pid = getpid();
    g_initialized = true;
  }
  return enpuSuccess;
}

int enpuIsInitialized(void) { return g_initialized.load() ? 1 : 0; }
void enpuSetRefuseFork(int on) { g_refuse_fork = on != 0; }
int enpuGetRefuseFork(void) { return g_refuse_fork.load() ? 1 : 0; }

enpuError_t enpuSetAllocatorMode(enpuAllocMode mode) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (mode < enpuAllocMalloc || mode > enpuAllocPage) return enpuErrorInvalidValue;
  if (!g_blocks.empty() && mode != g_mode) return enpuErrorInvalidValue;
  g_mode = mode;
  return enpuSuccess;
}

enpuAllocMode enpuGetAllocatorMode(void) { return g_mode; }

int enpuDeviceCount(void) { return kDeviceCount; }

enpuError_t enpuSetDevice(int index) {
  if (index < 0 || index >= kDeviceCount) return enpuErrorInvalidValue;
  t_device = index;
  return enpuSuccess;
}

int enpuGetDevice(void) { return t_device; }

enpuError_t enpuMalloc(void** ptr, size_t size) {
  *ptr = nullptr;
  if (enpuError_t e = enpuInit(); e != enpuSuccess) return e;
  if (size == 0) return enpuSuccess;
  void* base = nullptr;
  size_t base_size = 0;
  uintptr_t user = 0;
  switch (g_mode) {
    case enpuAllocMalloc:
      base_size = size;
      base = std::malloc(size);
      user = reinterpret_cast<uintptr_t>(base);
      break;
    case enpuAllocAligned: {
      base_size = round_up(size, kAlign);
      base = std::aligned_alloc(kAlign, base_size);
      user = reinterpret_cast<uintptr_t>(base);
      if (base) ENPU_POISON(static_cast<char*>(base) + size, base_size - size);
      break;
    }
    case enpuAllocGuard: {
      base_size = kZone + round_up(size, kAlign) + after_zone(size);
      base = std::aligned_alloc(kAlign, base_size);
      if (base) {
        std::memset(base, kPattern, base_size);
        user = reinterpret_cast<uintptr_t>(base) + kZone;
        std::memset(reinterpret_cast<void*>(user), kFresh, size);
      }
      break;
    }
    case enpuAllocPage: {
      size_t pg = page_size();
      size_t data_pages = (round_up(size, 16) + kZone + pg - 1) / pg;
      base_size = (data_pages + 1) * pg;
      void* m = mmap(nullptr, base_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                     0);
      if (m == MAP_FAILED) break;
      base = m;
      mprotect(static_cast<char*>(m) + data_pages * pg, pg, PROT_NONE);
      std::memset(m, kPattern, data_pages * pg);
      user = reinterpret_cast<uintptr_t>(m) + data_pages * pg - round_up(size, 16);
      std::memset(reinterpret_cast<void*>(user), kFresh, size);
      break;
    }
  }
  if (!base) return enpuErrorOutOfMemory;
  std::lock_guard<std::mutex> lk(g_mu);
  g_blocks[user] = Block{size, base, base_size, t_current_op ? t_current_op : "", ++g_serial};
  g_stats.live_blocks += 1;
  g_stats.live_bytes += static_cast<int64_t>(size);
  g_stats.total_blocks += 1;
  g_stats.total_bytes += static_cast<int64_t>(size);
  if (g_stats.live_bytes > g_stats.peak_bytes) g_stats.peak_bytes = g_stats.live_bytes;
  *ptr = reinterpret_cast<void*>(user);
  return enpuSuccess;
}

enpuError_t enpuSetBlockCached(void* ptr, int cached) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_blocks.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == g_blocks.end()) return enpuErrorUnknownPointer;
  Block& b = it->second;
  if (b.cached == (cached != 0)) return enpuSuccess;
  b.cached = cached != 0;
  const auto n = static_cast<int64_t>(b.size);
  if (b.cached) {
    g_stats.live_blocks -= 1;
    g_stats.live_bytes -= n;
    return enpuSuccess;
  }
  b.op = t_current_op ? t_current_op : "";
  b.serial = ++g_serial;
  g_stats.live_blocks += 1;
  g_stats.live_bytes += n;
  g_stats.total_blocks += 1;
  g_stats.total_bytes += n;
  if (g_stats.live_bytes > g_stats.peak_bytes) g_stats.peak_bytes = g_stats.live_bytes;
  return enpuSuccess;
}

enpuError_t enpuFree(void* ptr) {
  if (!ptr) return enpuSuccess;
  Block b;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_blocks.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == g_blocks.end()) return enpuErrorUnknownPointer;
    b = it->second;
    check_block_locked(it->first, b, t_current_op ? t_current_op : "free");
    g_blocks.erase(it);
    if (!b.cached) {
      g_stats.live_blocks -= 1;
      g_stats.live_bytes -= static_cast<int64_t>(b.size);
    }
  }
  switch (g_mode) {
    case enpuAllocPage:
      munmap(b.base, b.base_size);
      break;
    case enpuAllocAligned:
      ENPU_UNPOISON(b.base, b.base_size);
      std::free(b.base);
      break;
    default:
      std::free(b.base);
  }
  return enpuSuccess;
}

enpuError_t enpuMemcpy(void* dst, const void* src, size_t count, enpuMemcpyKind kind) {
  if (enpuError_t e = enpuCheckProcess(); e != enpuSuccess) return e;
  if (count == 0) return enpuSuccess;
  if (!dst || !src) return enpuErrorInvalidValue;
  if (!enpuGetAsync()) {
    std::memmove(dst, src, count);
    return enpuSuccess;
  }
  const int device = enpuGetDevice();
  const enpuStream_t stream = enpuGetStream(device);
  if (kind == enpuMemcpyHostToDevice) {  // the host buffer may change once this returns
    auto staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + count);
    return enpu::enqueue(device, stream, enpuWorkH2D,
                         [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
  }
  const enpuWorkKind work = kind == enpuMemcpyDeviceToHost ? enpuWorkD2H : enpuWorkD2D;
  enpuError_t e = enpu::enqueue(device, stream, work, [dst, src, count] { std::memmove(dst, src, count); });
  if (e != enpuSuccess || kind != enpuMemcpyDeviceToHost) return e;
  return enpuStreamSynchronize(device, stream);
}

int enpuIsDevicePointer(const void* ptr) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto p = reinterpret_cast<uintptr_t>(ptr);
  auto it = g_blocks.upper_bound(p);
  if (it == g_blocks.begin()) return 0;
  --it;
  return p < it->first + (it->second.size ? it->second.size : 1) ? 1 : 0;
}

const char* enpuSetCurrentOp(const char* name) {
  const char* prev = t_current_op;
  t_current_op = name;
  return prev;
}

const char* enpuGetCurrentOp(void) { return t_current_op; }

enpuError_t enpuLaunchKernel(const char* name, enpuKernelFn fn, void* args) {
  (void)name;
  if (!fn) return enpuErrorInvalidValue;
  if (enpuError_t e = enpuCheckProcess(); e != enpuSuccess) return e;
  g_launches.fetch_add(1, std::memory_order_relaxed);
  fn(args);
  return enpuSuccess;
}

uint64_t enpuKernelLaunchCount(void) { return g_launches.load(); }
void enpuCountKernelLaunch(void) { g_launches.fetch_add(1, std::memory_order_relaxed); }

size_t enpuCheckMemory(const char* after_op) {
  std::lock_guard<std::mutex> lk(g_mu);
  for (const auto& kv : g_blocks) check_block_locked(kv.first, kv.second, after_op);
  return g_errors.size();
}

void enpuClearMemoryErrors(void) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_errors.clear();
}

}  // extern "C"

namespace enpu {

MemStats memStats() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_stats;
}

std::vector<BlockInfo> liveBlocks() {
  std::lock_guard<std::mutex> lk(g_mu);
  std::vector<BlockInfo> out;
  for (const auto& kv : g_blocks)
    if (!kv.second.cached) out.push_back({kv.first, kv.second.size, kv.second.op, kv.second.serial});
  return out;
}

std::vector<Corruption> memoryErrors() {
  std::lock_guard<std::mutex> lk(g_mu);
  std::vector<Corruption> out;
  for (const auto& kv : g_errors) out.push_back(kv.second);
  return out;
}

}  // namespace enpu

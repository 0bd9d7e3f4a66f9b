// echo_npu c10 allocator for PrivateUse1: device blocks come from the runtime (enpuMalloc).
// It keeps per-device statistics like a caching allocator's and, on torch >= 2.9, is a
// c10::DeviceAllocator so that torch.accelerator's memory APIs (memory_allocated, memory_stats,
// reset_peak_memory_stats, ...) work for the device. Synchronous mode caches nothing (reserved
// equals allocated); asynchronous mode caches freed blocks per (device, stream) as CUDA's caching
// allocator does (cache.h), honouring record_stream.
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../aten/registry.h"
#include "../runtime/runtime.h"
#include "../runtime/stream.h"
#include "api.h"
#include "cache.h"
#include "device.h"

#if ENPU_TORCH_AT_LEAST(2, 9)
#include <c10/core/CachingDeviceAllocator.h>
#define ENPU_DEVICE_ALLOCATOR 1
#endif

namespace enpu {
namespace {

struct Counter {  // like c10::CachingAllocator::Stat
  int64_t current = 0, peak = 0, allocated = 0, freed = 0;
  void increase(int64_t n) {
    current += n;
    allocated += n;
    peak = std::max(peak, current);
  }
  void decrease(int64_t n) {
    current -= n;
    freed += n;
  }
};

struct DeviceCounters {
  Counter blocks, bytes;        // allocation/active counts; allocated/active/requested bytes
  Counter segments, reserved;   // blocks and bytes held from the runtime (cached ones included)
  int64_t device_alloc = 0, device_free = 0;
};

class Stats {
 public:
  void on_alloc(void* p, int device, size_t n, bool fresh = true) {
    std::lock_guard<std::mutex> lk(mu_);
    if (p) owner_[p] = {device, n};
    add(device, n, fresh);
  }
  // Memory counted but not owned by a block the runtime knows (see allocate_untracked).
  void on_untracked(int device, size_t n) {
    std::lock_guard<std::mutex> lk(mu_);
    add(device, n);
  }
  // A block given back: to the runtime (released) or to the cache (still reserved).
  void on_free(void* p, bool released = true) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = owner_.find(p);
    if (it == owner_.end()) return;
    auto& c = dev(it->second.first);
    c.blocks.decrease(1);
    c.bytes.decrease(static_cast<int64_t>(it->second.second));
    if (released) release_locked(c, it->second.second);
    owner_.erase(it);
  }
  // A cached block returned to the runtime.
  void on_release(int device, size_t n) {
    std::lock_guard<std::mutex> lk(mu_);
    release_locked(dev(device), n);
  }
  DeviceCounters get(int device) {
    std::lock_guard<std::mutex> lk(mu_);
    if (fault(Fault::MemoryStatsZero)) return DeviceCounters{};  // a backend that never counts
    return dev(device);
  }
  void reset_peak(int device) {
    std::lock_guard<std::mutex> lk(mu_);
    auto& c = dev(device);
    c.blocks.peak = c.blocks.current;
    c.bytes.peak = c.bytes.current;
    c.segments.peak = c.segments.current;
    c.reserved.peak = c.reserved.current;
  }
  void reset_accumulated(int device) {
    std::lock_guard<std::mutex> lk(mu_);
    auto& c = dev(device);
    c.blocks.allocated = c.blocks.freed = c.bytes.allocated = c.bytes.freed = 0;
    c.segments.allocated = c.segments.freed = c.reserved.allocated = c.reserved.freed = 0;
    c.device_alloc = c.device_free = 0;
  }

 private:
  DeviceCounters& dev(int device) {
    if (device < 0) device = enpuGetDevice();
    TORCH_CHECK(device < enpuDeviceCount(), "echo_npu: invalid device index ", device);
    if (per_device_.empty()) per_device_.resize(static_cast<size_t>(enpuDeviceCount()));
    return per_device_[static_cast<size_t>(device)];
  }
  void add(int device, size_t n, bool fresh = true) {
    auto& c = dev(device);
    c.blocks.increase(1);
    c.bytes.increase(static_cast<int64_t>(n));
    if (!fresh) return;  // a cached block reused
    c.segments.increase(1);
    c.reserved.increase(static_cast<int64_t>(n));
    c.device_alloc += 1;
  }
  void release_locked(DeviceCounters& c, size_t n) {
    c.segments.decrease(1);
    c.reserved.decrease(static_cast<int64_t>(n));
    c.device_free += 1;
  }
  std::mutex mu_;
  std::unordered_map<void*, std::pair<int, size_t>> owner_;
  std::vector<DeviceCounters> per_device_;
};

constexpr size_t kCacheLimit = size_t(256) << 20;  // cached bytes before the cache is emptied

Stats& stats() {
  static Stats* s = new Stats();  // never destroyed: blocks may be freed during exit
  return *s;
}

std::atomic<bool> g_trim_wanted{false};  // the cache passed kCacheLimit: empty it at the next allocation

// torch's deleter: called wherever the last reference goes (a Python dealloc holding the GIL,
// too), so it never waits for the device. The statistics forget the block before the cache can
// hand it to another thread.
void delete_block(void* p) {
  if (enpuGetAsync() && block_cache().tracks(p)) {
    stats().on_free(p, /*released=*/false);
    block_cache().give_back(p);
    if (block_cache().cached_bytes() > kCacheLimit) g_trim_wanted = true;
    return;
  }
  stats().on_free(p);
  enpuFree(p);
}

#ifdef ENPU_DEVICE_ALLOCATOR
using AllocatorBase = c10::DeviceAllocator;
#else
using AllocatorBase = c10::Allocator;
#endif

struct EnpuAllocator final : public AllocatorBase {
  c10::DataPtr allocate(size_t n) override {
    const int device = enpuGetDevice();
    const bool caching = enpuGetAsync() && n > 0;
    if (caching && g_trim_wanted.exchange(false)) release_cached(-1);
    void* p = caching ? block_cache().take(device, enpuGetStream(device), n) : nullptr;
    if (p) {
      stats().on_alloc(p, device, n, /*fresh=*/false);
      return {p, p, &delete_block, c10::Device(c10::DeviceType::PrivateUse1, device)};
    }
    auto err = enpuMalloc(&p, n);
    if (err == enpuErrorOutOfMemory && caching) {  // as CUDA's: free the cache, try again
      release_cached(-1);
      err = enpuMalloc(&p, n);
    }
    TORCH_CHECK(err != enpuErrorOutOfMemory, "echo_npu: out of memory allocating ", n, " bytes");
    TORCH_CHECK(err == enpuSuccess, "echo_npu: ", enpuGetErrorString(err));
    if (n > 0) stats().on_alloc(p, device, n);
    if (caching) block_cache().track(p, device, enpuGetStream(device), n);
    return {p, p, &delete_block, c10::Device(c10::DeviceType::PrivateUse1, device)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &delete_block; }
  void copy_data(void* dst, const void* src, std::size_t count) const override {
    enpuMemcpy(dst, src, count, enpuMemcpyDeviceToDevice);
  }

#ifdef ENPU_DEVICE_ALLOCATOR
  bool initialized() override { return enpuIsInitialized() != 0; }
  void emptyCache(c10::MempoolId_t) override { release_cached(-1); }
  void recordStream(const c10::DataPtr& p, c10::Stream s) override { record_stream(p.get(), s.id()); }
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    const DeviceCounters c = stats().get(device);
    c10::CachingDeviceAllocator::DeviceStats out;
    const auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    auto put = [&](c10::CachingAllocator::StatArray& a, const Counter& v) {
      a[all].current = v.current;
      a[all].peak = v.peak;
      a[all].allocated = v.allocated;
      a[all].freed = v.freed;
    };
    for (auto* a : {&out.allocation, &out.active}) put(*a, c.blocks);
    put(out.segment, c.segments);
    for (auto* a : {&out.allocated_bytes, &out.active_bytes, &out.requested_bytes}) put(*a, c.bytes);
    put(out.reserved_bytes, c.reserved);
    out.num_device_alloc = c.device_alloc;
    out.num_device_free = c.device_free;
    return out;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    stats().reset_accumulated(device);
  }
  void resetPeakStats(c10::DeviceIndex device) override { stats().reset_peak(device); }
#endif
};

EnpuAllocator g_allocator;

}  // namespace

c10::Allocator* device_allocator() { return &g_allocator; }

void register_allocator() { c10::SetAllocator(c10::DeviceType::PrivateUse1, &g_allocator); }

void allocate_untracked(size_t nbytes) {
  TORCH_CHECK(enpuInit() == enpuSuccess, "echo_npu: ", enpuGetErrorString(enpuInit()));
  void* p = std::malloc(nbytes);  // never freed, never in the runtime's block table
  (void)p;
  stats().on_untracked(enpuGetDevice(), nbytes);
}

namespace {
// The fault stats_stale: the device module's view of each device, taken once and refreshed only
// by empty_cache() (release_cached).
std::mutex g_stale_mu;
std::map<int, DeviceCounters> g_stale;

DeviceCounters module_view(int device) {
  if (!fault(Fault::StatsStale)) return stats().get(device);
  if (device < 0) device = enpuGetDevice();
  std::lock_guard<std::mutex> lk(g_stale_mu);
  auto it = g_stale.find(device);
  if (it == g_stale.end()) it = g_stale.emplace(device, stats().get(device)).first;
  return it->second;
}

void refresh_module_view() {
  std::lock_guard<std::mutex> lk(g_stale_mu);
  g_stale.clear();
}
}  // namespace

std::map<std::string, int64_t> allocator_stats(int device) {
  const DeviceCounters c = module_view(device);
  std::map<std::string, int64_t> out;
  auto put = [&](const std::string& name, const Counter& v) {
    out[name + ".current"] = v.current;
    out[name + ".peak"] = v.peak;
    out[name + ".allocated"] = v.allocated;
    out[name + ".freed"] = v.freed;
  };
  for (const char* name : {"allocation", "active"}) put(name, c.blocks);
  put("segment", c.segments);
  for (const char* name : {"allocated_bytes", "active_bytes", "requested_bytes"}) put(name, c.bytes);
  put("reserved_bytes", c.reserved);
  out["num_device_alloc"] = c.device_alloc;
  out["num_device_free"] = c.device_free;
  return out;
}

void reset_peak_stats(int device) { stats().reset_peak(device); }

void record_stream(void* ptr, int64_t stream) {
  if (!fault(Fault::RecordStreamIgnored)) block_cache().record(ptr, stream);
}

void release_cached(int device) {
  refresh_module_view();
  if (!enpuGetAsync()) return;
  drain(device);  // their work done (errors stay for the next synchronisation); blocks freed
                  // meanwhile, whose work is not reached yet, stay cached
  for (const auto& [p, dev, n] : block_cache().drain(device)) {
    stats().on_release(dev, n);
    enpuFree(p);
  }
}
void reset_accumulated_stats(int device) { stats().reset_accumulated(device); }

}  // namespace enpu

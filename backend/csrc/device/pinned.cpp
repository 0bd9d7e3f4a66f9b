// echo_npu pinned host memory: what pin_memory() allocates through the PrivateUse1 hooks
// (getPinnedMemoryAllocator), and isPinnedPtr for is_pinned(). Host memory from malloc whose
// blocks are remembered; a non_blocking copy between such memory and the device runs on the
// stream without staging (aten/common.cpp), so it completes later in asynchronous mode.
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "device.h"

namespace enpu {
namespace {

class PinnedBlocks {
 public:
  void add(void* p, size_t n) {
    std::lock_guard<std::mutex> lk(mu_);
    blocks_[reinterpret_cast<uintptr_t>(p)] = n;
  }
  void remove(void* p) {
    std::lock_guard<std::mutex> lk(mu_);
    blocks_.erase(reinterpret_cast<uintptr_t>(p));
  }
  bool contains(const void* ptr) {
    std::lock_guard<std::mutex> lk(mu_);
    auto p = reinterpret_cast<uintptr_t>(ptr);
    auto it = blocks_.upper_bound(p);
    if (it == blocks_.begin()) return false;
    --it;
    return p < it->first + (it->second ? it->second : 1);
  }

 private:
  std::mutex mu_;
  std::map<uintptr_t, size_t> blocks_;
};

PinnedBlocks& blocks() {
  static PinnedBlocks* b = new PinnedBlocks();  // never destroyed: freed during exit too
  return *b;
}

void free_pinned(void* p) {
  blocks().remove(p);
  std::free(p);
}

struct PinnedAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    void* p = n ? std::malloc(n) : nullptr;
    TORCH_CHECK(n == 0 || p, "echo_npu: out of pinned memory allocating ", n, " bytes");
    if (p) blocks().add(p, n);
    return {p, p, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dst, const void* src, std::size_t count) const override {
    if (count) std::memcpy(dst, src, count);
  }
};

PinnedAllocator g_pinned;

}  // namespace

c10::Allocator* pinned_allocator() { return &g_pinned; }
bool is_pinned_ptr(const void* p) { return p && blocks().contains(p); }

}  // namespace enpu

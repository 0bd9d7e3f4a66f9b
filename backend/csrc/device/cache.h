// echo_npu's block cache (asynchronous mode), as CUDA's caching allocator: a block torch frees
// stays reserved and is reused for the same size on the stream it was allocated on (safe by that
// stream's order); record_stream adds streams whose work, queued up to the free, must be reached
// before the block is reused. A cached block goes back to the runtime only once every stream
// that used it has reached the work queued up to its free. std types only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>
#include <unordered_map>
#include <vector>

#include "../runtime/stream.h"

namespace enpu {

class BlockCache {
 public:
  // A fresh block handed out on (device, stream).
  void track(void* p, int device, enpuStream_t stream, size_t n);
  // The block is also used on `stream` (of its device): record_stream.
  void record(void* p, enpuStream_t stream);
  // Whether p is a block handed out by this cache and not given back yet.
  bool tracks(void* p);
  // torch freed a tracked block: cached (true), or not ours (false).
  bool give_back(void* p);
  // A cached block of n bytes for (device, stream) whose recorded uses are reached, or nullptr.
  void* take(int device, enpuStream_t stream, size_t n);
  // Removes the cached blocks of a device (-1: all) whose uses are all reached and returns them
  // as (ptr, device, bytes); the others stay cached.
  std::vector<std::tuple<void*, int, size_t>> drain(int device);
  size_t cached_bytes();

 private:
  struct Use {
    int device;
    enpuStream_t stream;
    size_t size;
    std::vector<enpuStream_t> also;  // record_stream
    // (stream, number of the work queued there at the free): the block's own stream first, then
    // each of `also`
    std::vector<std::pair<enpuStream_t, uint64_t>> pending;
    bool reached(bool own_too) const;
  };
  std::mutex mu_;
  std::unordered_map<void*, Use> live_, cached_;
  std::map<std::tuple<int, enpuStream_t, size_t>, std::vector<void*>> free_;
  size_t cached_bytes_ = 0;
};

BlockCache& block_cache();

}  // namespace enpu

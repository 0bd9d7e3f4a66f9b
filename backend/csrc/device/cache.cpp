// echo_npu's block cache (asynchronous mode): see cache.h.
#include "cache.h"

#include <algorithm>
#include <iterator>

namespace enpu {

void BlockCache::track(void* p, int device, enpuStream_t stream, size_t n) {
  std::lock_guard<std::mutex> lk(mu_);
  live_[p] = Use{device, stream, n, {}, {}};
}

void BlockCache::record(void* p, enpuStream_t stream) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = live_.find(p);
  if (it == live_.end() || it->second.stream == stream) return;
  auto& also = it->second.also;
  if (std::find(also.begin(), also.end(), stream) == also.end()) also.push_back(stream);
}

bool BlockCache::Use::reached(bool own_too) const {
  for (size_t i = own_too ? 0 : 1; i < pending.size(); ++i)
    if (!enpu::reached(device, pending[i].first, pending[i].second)) return false;
  return true;
}

bool BlockCache::tracks(void* p) {
  std::lock_guard<std::mutex> lk(mu_);
  return live_.count(p) != 0;
}

bool BlockCache::give_back(void* p) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) return false;
  Use u = std::move(it->second);
  live_.erase(it);
  u.pending.emplace_back(u.stream, queuedUpTo(u.device, u.stream));
  for (enpuStream_t s : u.also) u.pending.emplace_back(s, queuedUpTo(u.device, s));
  u.also.clear();
  free_[{u.device, u.stream, u.size}].push_back(p);
  cached_bytes_ += u.size;
  cached_[p] = std::move(u);
  enpuSetBlockCached(p, 1);
  return true;
}

void* BlockCache::take(int device, enpuStream_t stream, size_t n) {
  std::lock_guard<std::mutex> lk(mu_);
  auto f = free_.find({device, stream, n});
  if (f == free_.end()) return nullptr;
  auto& ptrs = f->second;
  for (size_t i = ptrs.size(); i-- > 0;) {  // the most recently freed first
    void* p = ptrs[i];
    Use& u = cached_[p];
    if (!u.reached(/*own_too=*/false)) continue;  // its own stream's order makes it safe
    u.pending.clear();
    live_[p] = std::move(u);
    cached_.erase(p);
    ptrs.erase(ptrs.begin() + static_cast<std::ptrdiff_t>(i));
    cached_bytes_ -= n;
    enpuSetBlockCached(p, 0);
    return p;
  }
  return nullptr;
}

std::vector<std::tuple<void*, int, size_t>> BlockCache::drain(int device) {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::tuple<void*, int, size_t>> out;
  for (auto it = free_.begin(); it != free_.end();) {
    if (device >= 0 && std::get<0>(it->first) != device) {
      ++it;
      continue;
    }
    auto& ptrs = it->second;
    for (size_t i = ptrs.size(); i-- > 0;) {
      void* p = ptrs[i];
      Use& u = cached_[p];
      if (!u.reached(/*own_too=*/true)) continue;  // queued work may still use it
      out.emplace_back(p, u.device, u.size);
      cached_bytes_ -= u.size;
      cached_.erase(p);
      ptrs.erase(ptrs.begin() + static_cast<std::ptrdiff_t>(i));
    }
    it = ptrs.empty() ? free_.erase(it) : std::next(it);
  }
  return out;
}

size_t BlockCache::cached_bytes() {
  std::lock_guard<std::mutex> lk(mu_);
  return cached_bytes_;
}

BlockCache& block_cache() {
  static BlockCache* c = new BlockCache();  // never destroyed: blocks may be freed during exit
  return *c;
}

}  // namespace enpu

// echo_npu runtime internals shared by stream.cpp (streams, workers, delays, forks) and event.cpp
// (events): a stream's state and the few operations on its queue. Not part of the driver API.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "stream.h"

namespace enpu::rt {

struct Item {
  uint64_t seq;
  enpuWorkKind kind;
  std::function<void()> fn;
};

struct Stream {
  int device;
  enpuStream_t id;
  int priority;
  std::mutex mu;
  std::condition_variable cv;  // work queued, work finished
  std::deque<Item> queue;
  uint64_t queued = 0, done = 0;  // numbers of the last piece of work queued and finished
  uint64_t skip_upto = 0;         // a forked child drops the parent's work up to this number
  bool worker = false;
  std::string error;  // the first exception of queued work not yet reported
  // Finished work, destroyed by the next host thread that queues or waits here: what work
  // captured (a host tensor) may hold a Python object, whose release needs the GIL, so workers
  // never release it themselves (the host may wait on them holding the GIL).
  std::vector<std::function<void()>> retired;
  std::atomic<int64_t> delay[enpuDelayKinds];  // this stream's own delays (-1: none)
  Stream(int d, enpuStream_t i, int p) : device(d), id(i), priority(p) {
    for (auto& v : delay) v = -1;
  }
};

extern std::atomic<bool> g_async;

bool valid_device(int device);
// The stream (device, id), or nullptr.
Stream* find(int device, enpuStream_t id);
// Queues fn on s and starts its worker on first use; *seq (optional): its number.
enpuError_t push(Stream* s, enpuWorkKind kind, std::function<void()> fn, uint64_t* seq);
// Waits until s finished its work up to seq.
void wait_for(Stream* s, uint64_t seq);

}  // namespace enpu::rt

// echo_npu streams: a queue and a worker thread per stream (asynchronous mode), the pools of
// streams, synchronisation and its errors, the delay injector, and fork safety for the workers.
// Events are in event.cpp.
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <new>
#include <thread>
#include <utility>

#include "personality.h"
#include "queue.h"

namespace enpu::rt {

std::atomic<bool> g_async{false};

namespace {

constexpr int kMaxDevices = 16;  // current-stream slots per thread
constexpr int kPoolSize = 32;    // pool streams per priority and device (as CUDA's)

// Every stream ever created (never destroyed: streams are shared and copied around freely).
struct Registry {
  std::mutex mu;
  std::vector<std::vector<Stream*>> streams;  // [device][id]
  std::vector<std::vector<enpuStream_t>> pool[2];  // [high priority][device]
  std::vector<unsigned> next_pool[2];
  std::vector<enpuStream_t> copy_engine;
};

Registry* g_reg = new Registry();
std::atomic<int64_t> g_delay[3][enpuDelayKinds];  // every stream, default streams, other streams
thread_local enpuStream_t t_stream[kMaxDevices] = {};
thread_local std::string t_last_error;

Stream* make_stream_locked(int device, int priority) {
  auto& v = g_reg->streams[static_cast<size_t>(device)];
  v.push_back(new Stream(device, static_cast<enpuStream_t>(v.size()), priority));
  return v.back();
}

void ensure_devices_locked() {
  if (!g_reg->streams.empty()) return;
  const int n = enpuDeviceCount();
  g_reg->streams.resize(static_cast<size_t>(n));
  for (auto& p : g_reg->pool) p.resize(static_cast<size_t>(n));
  for (auto& p : g_reg->next_pool) p.resize(static_cast<size_t>(n));
  g_reg->copy_engine.assign(static_cast<size_t>(n), -1);
  for (int d = 0; d < n; ++d) make_stream_locked(d, 0);  // the default streams, id 0
}

std::vector<Stream*> all_streams(int device) {
  std::lock_guard<std::mutex> lk(g_reg->mu);
  ensure_devices_locked();
  std::vector<Stream*> out;
  for (size_t d = 0; d < g_reg->streams.size(); ++d)
    if (device < 0 || static_cast<int>(d) == device)
      out.insert(out.end(), g_reg->streams[d].begin(), g_reg->streams[d].end());
  return out;
}

int64_t delay_of(const Stream& s, enpuWorkKind kind) {
  if (kind == enpuWorkMarker) return 0;
  if (int64_t own = s.delay[kind].load(); own >= 0) return own;
  int64_t cls = g_delay[s.id == 0 ? 1 : 2][kind].load();
  if (cls >= 0) return cls;
  return std::max<int64_t>(0, g_delay[0][kind].load());
}

// Destroys the finished work of s on the calling (host) thread, outside the stream's lock.
void release_retired(Stream* s) {
  std::vector<std::function<void()>> old;
  {
    std::lock_guard<std::mutex> lk(s->mu);
    old.swap(s->retired);
  }
}

void run_worker(Stream* s) {
  for (;;) {
    Item item;
    bool skip;
    {
      std::unique_lock<std::mutex> lk(s->mu);
      s->cv.wait(lk, [s] { return !s->queue.empty(); });
      item = std::move(s->queue.front());
      s->queue.pop_front();
      skip = item.seq <= s->skip_upto;  // the parent's work, in a forked child
    }
    std::string err;
    if (!skip) {
      const int64_t us = delay_of(*s, item.kind);
      if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
      try {
        item.fn();
      } catch (const std::exception& e) {
        err = e.what();
      } catch (...) {
        err = "unknown exception in queued work";
      }
    }
    {
      std::lock_guard<std::mutex> lk(s->mu);
      if (!err.empty() && s->error.empty()) s->error = err;
      s->retired.push_back(std::move(item.fn));
      s->done = std::max(s->done, item.seq);
    }
    s->cv.notify_all();
  }
}

enpuError_t take_error(Stream* s) {
  std::lock_guard<std::mutex> lk(s->mu);
  if (s->error.empty()) return enpuSuccess;
  t_last_error = s->error;
  s->error.clear();
  return enpuErrorAsyncWork;
}

uint64_t queued_of(Stream* s) {
  std::lock_guard<std::mutex> lk(s->mu);
  return s->queued;
}

// Forks: the child has none of the workers. The package drains every stream before Python forks
// (os.register_at_fork: at C level the heap of a checker may be locked by then, and queued work
// may allocate), but another thread may queue work between that drain and the fork. In the child
// the streams stay (same ids, priorities, counters) without workers, their locks new, and the
// parent's work still queued is dropped by the child's first worker; nothing here allocates (a
// checker's malloc may hold its lock).
void in_child() {
  new (&g_reg->mu) std::mutex();
  for (auto& per_device : g_reg->streams)
    for (Stream* s : per_device) {
      new (&s->mu) std::mutex();
      new (&s->cv) std::condition_variable();
      s->worker = false;
      s->skip_upto = s->queued;
      s->done = s->queued;  // the child never waits for the parent's work
    }
}

struct Init {
  Init() {
    for (auto& row : g_delay)
      for (auto& v : row) v = -1;
    pthread_atfork(nullptr, nullptr, &in_child);
  }
} g_init;

}  // namespace

bool valid_device(int d) { return d >= 0 && d < enpuDeviceCount() && d < kMaxDevices; }

Stream* find(int device, enpuStream_t id) {
  if (!valid_device(device) || id < 0) return nullptr;
  std::lock_guard<std::mutex> lk(g_reg->mu);
  ensure_devices_locked();
  auto& v = g_reg->streams[static_cast<size_t>(device)];
  return static_cast<size_t>(id) < v.size() ? v[static_cast<size_t>(id)] : nullptr;
}

enpuError_t push(Stream* s, enpuWorkKind kind, std::function<void()> fn, uint64_t* seq) {
  if (enpuError_t e = enpuCheckProcess(); e != enpuSuccess) return e;
  release_retired(s);
  bool start = false;
  {
    std::lock_guard<std::mutex> lk(s->mu);
    s->queue.push_back(Item{++s->queued, kind, std::move(fn)});
    if (seq) *seq = s->queued;
    if (!s->worker) start = s->worker = true;
  }
  if (start) std::thread(run_worker, s).detach();
  s->cv.notify_all();
  return enpuSuccess;
}

void wait_for(Stream* s, uint64_t seq) {
  std::unique_lock<std::mutex> lk(s->mu);
  s->cv.wait(lk, [&] { return s->done >= seq; });
}

}  // namespace enpu::rt

using namespace enpu::rt;

extern "C" {

void enpuSetAsync(int on) { g_async = on != 0; }
int enpuGetAsync(void) { return g_async.load() ? 1 : 0; }

enpuError_t enpuStreamFromPool(int device, int priority, enpuStream_t* stream) {
  enpu::persona::fork_gate();
  int least = 0, greatest = 0;
  enpuStreamPriorityRange(&least, &greatest);
  if (!valid_device(device) || !stream) return enpuErrorInvalidValue;
  const int p = priority <= greatest ? 1 : 0;  // clamped, as CUDA does
  std::lock_guard<std::mutex> lk(g_reg->mu);
  ensure_devices_locked();
  auto& pool = g_reg->pool[p][static_cast<size_t>(device)];
  if (pool.empty())
    for (int i = 0; i < kPoolSize; ++i)
      pool.push_back(make_stream_locked(device, p ? greatest : least)->id);
  auto& next = g_reg->next_pool[p][static_cast<size_t>(device)];
  *stream = pool[next++ % pool.size()];
  return enpuSuccess;
}

enpuError_t enpuStreamGetPriority(int device, enpuStream_t stream, int* priority) {
  Stream* s = find(device, stream);
  if (!s || !priority) return enpuErrorInvalidValue;
  *priority = s->priority;
  return enpuSuccess;
}

void enpuStreamPriorityRange(int* least, int* greatest) {
  *least = 0;
  *greatest = -1;
}

enpuStream_t enpuGetStream(int device) {
  return valid_device(device) ? t_stream[device] : 0;
}

enpuError_t enpuExchangeStream(int device, enpuStream_t stream, enpuStream_t* previous) {
  if (!find(device, stream)) return enpuErrorInvalidValue;
  if (previous) *previous = t_stream[device];
  t_stream[device] = stream;
  return enpuSuccess;
}

int enpuStreamQuery(int device, enpuStream_t stream) {
  enpu::persona::fork_gate();
  Stream* s = find(device, stream);
  if (!s) return 1;
  std::lock_guard<std::mutex> lk(s->mu);
  return s->done >= s->queued ? 1 : 0;
}

enpuError_t enpuStreamSynchronize(int device, enpuStream_t stream) {
  enpu::persona::fork_gate();
  if (enpuDeviceAssertTripped()) return enpuErrorSticky;
  Stream* s = find(device, stream);
  if (!s) return enpuErrorInvalidValue;
  wait_for(s, queued_of(s));
  release_retired(s);
  return take_error(s);
}

enpuError_t enpuDeviceSynchronize(int device) {
  enpu::persona::fork_gate();
  if (enpuDeviceAssertTripped()) return enpuErrorSticky;
  if (device >= 0 && !valid_device(device)) return enpuErrorInvalidValue;
  enpu::drain(device);
  for (Stream* s : all_streams(device))
    if (enpuError_t e = take_error(s); e != enpuSuccess) return e;  // the others stay
  return enpuSuccess;
}

enpuError_t enpuSetDelay(int device, int64_t scope, enpuWorkKind kind, int64_t us) {
  if (static_cast<int>(kind) < 0 || static_cast<int>(kind) >= enpuDelayKinds) return enpuErrorInvalidValue;
  if (scope < 0) {
    if (scope < -3) return enpuErrorInvalidValue;
    g_delay[-scope - 1][kind] = us;
    return enpuSuccess;
  }
  Stream* s = find(device, scope);
  if (!s) return enpuErrorInvalidValue;
  s->delay[kind] = us;
  return enpuSuccess;
}

void enpuClearDelays(void) {
  for (auto& row : g_delay)
    for (auto& v : row) v = -1;
  for (Stream* s : all_streams(-1))
    for (auto& v : s->delay) v = -1;
}

}  // extern "C"

namespace enpu {

enpuError_t enqueue(int device, enpuStream_t stream, enpuWorkKind kind, std::function<void()> fn) {
  if (enpuError_t e = enpuCheckProcess(); e != enpuSuccess) return e;
  Stream* s = find(device, stream);
  if (!s) return enpuErrorInvalidValue;
  if (!g_async.load()) {
    fn();
    return enpuSuccess;
  }
  return push(s, kind, std::move(fn), nullptr);
}

enpuStream_t copyEngineStream(int device) {
  if (!valid_device(device)) return 0;
  std::lock_guard<std::mutex> lk(g_reg->mu);
  ensure_devices_locked();
  auto& id = g_reg->copy_engine[static_cast<size_t>(device)];
  if (id < 0) id = make_stream_locked(device, 0)->id;
  return id;
}

void drain(int device) {
  for (Stream* s : all_streams(device)) {
    wait_for(s, queued_of(s));
    release_retired(s);
  }
}

uint64_t queuedUpTo(int device, enpuStream_t stream) {
  Stream* s = find(device, stream);
  return s ? queued_of(s) : 0;
}

bool reached(int device, enpuStream_t stream, uint64_t seq) {
  Stream* s = find(device, stream);
  if (!s) return true;
  std::lock_guard<std::mutex> lk(s->mu);
  return s->done >= seq;
}

const char* lastAsyncError() { return t_last_error.c_str(); }

}  // namespace enpu

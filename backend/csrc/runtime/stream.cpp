// echo_npu streams and events: a queue and a worker thread per stream (asynchronous mode), events
// as points of a stream's queue, the delay injector, and fork safety for the workers.
#include "stream.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kKinds = 4;        // kinds the delay injector knows (markers excluded)
constexpr int kMaxDevices = 16;  // current-stream slots per thread
constexpr int kPoolSize = 4;     // pool streams per priority and device

struct Item {
  uint64_t seq;
  enpuWorkKind kind;
  std::function<void()> fn;
};

struct Stream {
  int device;
  enpuStream_t id;
  int priority;
  bool hidden = false;
  std::mutex mu;
  std::condition_variable cv;  // work queued, work finished
  std::deque<Item> queue;
  uint64_t queued = 0, done = 0;
  bool worker = false;
  std::string error;                  // the first exception of queued work not yet reported
  int64_t delay[kKinds] = {-1, -1, -1, -1};  // this stream's own delays (-1: none)
  Stream(int d, enpuStream_t i, int p) : device(d), id(i), priority(p) {}
};

// Every stream ever created (never destroyed: streams are shared and copied around freely).
struct Registry {
  std::mutex mu;
  std::vector<std::vector<Stream*>> streams;  // [device][id]
  std::vector<std::vector<enpuStream_t>> pool[2];
  std::vector<unsigned> next_pool[2];
  std::vector<enpuStream_t> copy_engine;
};

Registry* g_reg = new Registry();
std::atomic<bool> g_async{false};
std::atomic<int64_t> g_delay[3][kKinds];  // every stream, default streams, other streams
thread_local enpuStream_t t_stream[kMaxDevices] = {};
thread_local std::string t_last_error;

bool valid_device(int d) { return d >= 0 && d < enpuDeviceCount() && d < kMaxDevices; }

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

Stream* find(int device, enpuStream_t id) {
  if (!valid_device(device) || id < 0) return nullptr;
  std::lock_guard<std::mutex> lk(g_reg->mu);
  ensure_devices_locked();
  auto& v = g_reg->streams[static_cast<size_t>(device)];
  return static_cast<size_t>(id) < v.size() ? v[static_cast<size_t>(id)] : nullptr;
}

int64_t delay_of(const Stream& s, enpuWorkKind kind) {
  if (kind == enpuWorkMarker) return 0;
  if (s.delay[kind] >= 0) return s.delay[kind];
  int64_t cls = g_delay[s.id == 0 ? 1 : 2][kind].load();
  if (cls >= 0) return cls;
  return std::max<int64_t>(0, g_delay[0][kind].load());
}

void run_worker(Stream* s) {
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lk(s->mu);
      s->cv.wait(lk, [s] { return !s->queue.empty(); });
      item = std::move(s->queue.front());
      s->queue.pop_front();
    }
    const int64_t us = delay_of(*s, item.kind);
    if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
    std::string err;
    try {
      item.fn();
    } catch (const std::exception& e) {
      err = e.what();
    } catch (...) {
      err = "unknown exception in queued work";
    }
    item.fn = nullptr;  // release what the work held before it counts as done
    {
      std::lock_guard<std::mutex> lk(s->mu);
      if (!err.empty() && s->error.empty()) s->error = err;
      s->done = item.seq;
    }
    s->cv.notify_all();
  }
}

// Waits until the stream finished its work up to seq.
void wait_for(Stream* s, uint64_t seq) {
  std::unique_lock<std::mutex> lk(s->mu);
  s->cv.wait(lk, [&] { return s->done >= seq; });
}

enpuError_t take_error(Stream* s) {
  std::lock_guard<std::mutex> lk(s->mu);
  if (s->error.empty()) return enpuSuccess;
  t_last_error = s->error;
  s->error.clear();
  return enpuErrorAsyncWork;
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

// Forks: the child has none of the workers. The package drains every stream before Python forks
// (os.register_at_fork: at C level the heap of a checker may be locked by then, and queued work
// may allocate). In the child the streams stay (same ids, priorities, counters) without
// workers, their locks new; nothing here allocates (a checker's malloc may hold its lock).
void in_child() {
  new (&g_reg->mu) std::mutex();
  for (auto& per_device : g_reg->streams)
    for (Stream* s : per_device) {
      new (&s->mu) std::mutex();
      new (&s->cv) std::condition_variable();
      s->worker = false;
      s->done = s->queued;  // drained before the fork; the child never runs the parent's work
    }
}

struct Init {
  Init() {
    for (auto& row : g_delay)
      for (auto& v : row) v = -1;
    pthread_atfork(nullptr, nullptr, &in_child);
  }
} g_init;

// Queues fn on s (asynchronous mode) and starts its worker on first use; *seq: its number.
enpuError_t push(Stream* s, enpuWorkKind kind, std::function<void()> fn, uint64_t* seq) {
  if (enpuError_t e = enpuCheckProcess(); e != enpuSuccess) return e;
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

// A record: the point of a stream's queue an event marks (a new one at every enpuEventRecord).
struct Record {
  Stream* stream;
  uint64_t seq;
  std::atomic<bool> stamped{false};
  Clock::time_point when;
};

}  // namespace

struct enpuEvent {
  int device;
  bool timing;
  std::mutex mu;
  std::shared_ptr<Record> record;
  std::shared_ptr<Record> current() {
    std::lock_guard<std::mutex> lk(mu);
    return record;
  }
};

extern "C" {

void enpuSetAsync(int on) { g_async = on != 0; }
int enpuGetAsync(void) { return g_async.load() ? 1 : 0; }

enpuError_t enpuStreamCreate(int device, int priority, enpuStream_t* stream) {
  int least = 0, greatest = 0;
  enpuStreamPriorityRange(&least, &greatest);
  if (!valid_device(device) || !stream) return enpuErrorInvalidValue;
  priority = std::min(least, std::max(greatest, priority));  // clamped, as CUDA does
  std::lock_guard<std::mutex> lk(g_reg->mu);
  ensure_devices_locked();
  *stream = make_stream_locked(device, priority)->id;
  return enpuSuccess;
}

enpuError_t enpuStreamFromPool(int device, int high_priority, enpuStream_t* stream) {
  if (!valid_device(device) || !stream) return enpuErrorInvalidValue;
  const int p = high_priority ? 1 : 0;
  std::lock_guard<std::mutex> lk(g_reg->mu);
  ensure_devices_locked();
  auto& pool = g_reg->pool[p][static_cast<size_t>(device)];
  if (pool.empty())
    for (int i = 0; i < kPoolSize; ++i) pool.push_back(make_stream_locked(device, -p)->id);
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
  Stream* s = find(device, stream);
  if (!s) return 1;
  std::lock_guard<std::mutex> lk(s->mu);
  return s->done >= s->queued ? 1 : 0;
}

enpuError_t enpuStreamSynchronize(int device, enpuStream_t stream) {
  Stream* s = find(device, stream);
  if (!s) return enpuErrorInvalidValue;
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lk(s->mu);
    seq = s->queued;
  }
  wait_for(s, seq);
  return take_error(s);
}

enpuError_t enpuDeviceSynchronize(int device) {
  if (device >= 0 && !valid_device(device)) return enpuErrorInvalidValue;
  enpuError_t first = enpuSuccess;
  for (Stream* s : all_streams(device)) {
    enpuError_t e = enpuStreamSynchronize(s->device, s->id);
    if (first == enpuSuccess) first = e;
  }
  return first;
}

enpuError_t enpuEventCreate(enpuEvent_t* event, int device, int timing) {
  if (!event || !valid_device(device)) return enpuErrorInvalidValue;
  *event = new enpuEvent();
  (*event)->device = device;
  (*event)->timing = timing != 0;
  return enpuSuccess;
}

enpuError_t enpuEventRecord(enpuEvent_t event, int device, enpuStream_t stream) {
  Stream* s = find(device, stream);
  if (!event || !s) return enpuErrorInvalidValue;
  auto rec = std::make_shared<Record>();
  rec->stream = s;
  if (!g_async.load()) {  // everything before it has run: reached now
    rec->when = Clock::now();
    rec->stamped = true;
    std::lock_guard<std::mutex> lk(s->mu);
    rec->seq = s->done;
  } else {
    uint64_t seq = 0;
    enpuError_t e = push(s, enpuWorkMarker, [rec] {
      rec->when = Clock::now();
      rec->stamped = true;
    }, &seq);
    if (e != enpuSuccess) return e;
    rec->seq = seq;  // read by waiters only once the record is the event's (below)
  }
  std::lock_guard<std::mutex> lk(event->mu);
  event->record = rec;
  return enpuSuccess;
}

int enpuEventQuery(enpuEvent_t event) {
  if (!event) return 1;
  auto rec = event->current();
  return !rec || rec->stamped.load() ? 1 : 0;
}

enpuError_t enpuEventSynchronize(enpuEvent_t event) {
  if (!event) return enpuErrorInvalidValue;
  auto rec = event->current();
  if (!rec) return enpuSuccess;
  wait_for(rec->stream, rec->seq);
  return enpuSuccess;
}

enpuError_t enpuStreamWaitEvent(int device, enpuStream_t stream, enpuEvent_t event) {
  Stream* s = find(device, stream);
  if (!event || !s) return enpuErrorInvalidValue;
  auto rec = event->current();
  if (!rec || rec->stream == s || !g_async.load()) return enpuSuccess;
  return push(s, enpuWorkMarker, [rec] { wait_for(rec->stream, rec->seq); }, nullptr);
}

enpuError_t enpuEventElapsedTime(float* ms, enpuEvent_t start, enpuEvent_t end) {
  if (!ms || !start || !end || !start->timing || !end->timing) return enpuErrorInvalidValue;
  auto a = start->current(), b = end->current();
  if (!a || !b) return enpuErrorInvalidValue;
  if (!a->stamped.load() || !b->stamped.load()) return enpuErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return enpuSuccess;
}

void enpuEventDestroy(enpuEvent_t event) { delete event; }

enpuError_t enpuSetDelay(int device, int64_t scope, enpuWorkKind kind, int64_t us) {
  if (kind < 0 || kind >= kKinds) return enpuErrorInvalidValue;
  if (scope < 0) {
    if (scope < -3) return enpuErrorInvalidValue;
    g_delay[-scope - 1][kind] = us;
    return enpuSuccess;
  }
  Stream* s = find(device, scope);
  if (!s) return enpuErrorInvalidValue;
  std::lock_guard<std::mutex> lk(s->mu);
  s->delay[kind] = us;
  return enpuSuccess;
}

void enpuClearDelays(void) {
  for (auto& row : g_delay)
    for (auto& v : row) v = -1;
  for (Stream* s : all_streams(-1)) {
    std::lock_guard<std::mutex> lk(s->mu);
    std::fill(s->delay, s->delay + kKinds, -1);
  }
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
  if (id < 0) {
    Stream* s = make_stream_locked(device, 0);
    s->hidden = true;
    id = s->id;
  }
  return id;
}

void drain() {
  for (Stream* s : all_streams(-1)) {
    uint64_t seq;
    {
      std::lock_guard<std::mutex> lk(s->mu);
      seq = s->queued;
    }
    wait_for(s, seq);
  }
}

const char* lastAsyncError() { return t_last_error.c_str(); }

}  // namespace enpu

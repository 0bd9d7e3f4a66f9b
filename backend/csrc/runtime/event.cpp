// echo_npu events: a record marks the point of a stream's queue reached at enpuEventRecord (a
// marker queued there in asynchronous mode, stamped with the time the worker reaches it).
#include <chrono>
#include <memory>

#include "personality.h"
#include "queue.h"

using namespace enpu::rt;

namespace {

using Clock = std::chrono::steady_clock;

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

enpuError_t enpuEventCreate(enpuEvent_t* event, int device, int timing) {
  enpu::persona::fork_gate();
  if (!event || !valid_device(device)) return enpuErrorInvalidValue;
  *event = new enpuEvent();
  (*event)->device = device;
  (*event)->timing = timing != 0;
  return enpuSuccess;
}

enpuError_t enpuEventRecord(enpuEvent_t event, int device, enpuStream_t stream) {
  enpu::persona::fork_gate();
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
  enpu::persona::fork_gate();
  if (!event) return 1;
  auto rec = event->current();
  if (!rec || rec->stamped.load()) return 1;
  std::lock_guard<std::mutex> lk(rec->stream->mu);  // a forked child drops the parent's markers
  return rec->stream->done >= rec->seq ? 1 : 0;
}

enpuError_t enpuEventSynchronize(enpuEvent_t event) {
  enpu::persona::fork_gate();
  if (!event) return enpuErrorInvalidValue;
  auto rec = event->current();
  if (!rec) return enpuSuccess;
  wait_for(rec->stream, rec->seq);
  return enpuSuccess;
}

enpuError_t enpuStreamWaitEvent(int device, enpuStream_t stream, enpuEvent_t event) {
  enpu::persona::fork_gate();
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

}  // extern "C"

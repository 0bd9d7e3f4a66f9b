// echo_npu device runtime, asynchronous half: streams, events, the work queue of each stream and
// the delay injector. Synchronous by default: every piece of work runs on the calling thread at
// once, as before. With enpuSetAsync(1) each stream has a queue and a worker thread, work runs
// in queue order, and the host meets it only where it synchronises (stream, event, device).
#pragma once
#include <cstdint>
#include <functional>

#include "runtime.h"

extern "C" {

// What a piece of work is, for the delay injector (markers of events are never delayed). The
// kinds that can be delayed come first; their names are echo_npu._env.DELAY_KINDS, in this order.
typedef enum {
  enpuWorkKernel = 0,
  enpuWorkH2D = 1,
  enpuWorkD2H = 2,
  enpuWorkD2D = 3,
  enpuWorkMarker = 4,
} enpuWorkKind;
enum { enpuDelayKinds = enpuWorkMarker };

// Asynchronous execution; change it before the first piece of work only.
void enpuSetAsync(int on);
int enpuGetAsync(void);

// Streams of a device: 0 is its default stream; the others come from a pool of 32 per priority,
// handed out in turn (as CUDA's: a program asking for streams forever reuses them). Priorities
// as CUDA's: 0 is the lowest, -1 the greatest (lower numbers run first; echo_npu only records
// them); a priority outside the range is clamped.
typedef int64_t enpuStream_t;
enpuError_t enpuStreamFromPool(int device, int priority, enpuStream_t* stream);
enpuError_t enpuStreamGetPriority(int device, enpuStream_t stream, int* priority);
void enpuStreamPriorityRange(int* least, int* greatest);
// The calling thread's current stream of a device (default 0), and its exchange.
enpuStream_t enpuGetStream(int device);
enpuError_t enpuExchangeStream(int device, enpuStream_t stream, enpuStream_t* previous);
// 1 when all work queued on the stream so far has finished, else 0.
int enpuStreamQuery(int device, enpuStream_t stream);
// Wait for the work queued so far; returns (and clears) an error a piece of it raised. The
// device's: waits for every stream, then reports (and clears) the first stream's error; the
// other streams keep theirs for the next synchronisation.
enpuError_t enpuStreamSynchronize(int device, enpuStream_t stream);
enpuError_t enpuDeviceSynchronize(int device);  // -1: every device

// Events: a record marks the point of a stream's queue reached at enpuEventRecord.
typedef struct enpuEvent* enpuEvent_t;
enpuError_t enpuEventCreate(enpuEvent_t* event, int device, int timing);
enpuError_t enpuEventRecord(enpuEvent_t event, int device, enpuStream_t stream);
int enpuEventQuery(enpuEvent_t event);  // 1 when never recorded or its record is reached
enpuError_t enpuEventSynchronize(enpuEvent_t event);
// The stream waits (on the device, not the host) until the event's current record is reached.
enpuError_t enpuStreamWaitEvent(int device, enpuStream_t stream, enpuEvent_t event);
// Milliseconds between two reached records of timing events.
enpuError_t enpuEventElapsedTime(float* ms, enpuEvent_t start, enpuEvent_t end);
void enpuEventDestroy(enpuEvent_t event);

// Delay injector: microseconds a worker sleeps before each piece of work of `kind`. scope: -1
// every stream, -2 default streams, -3 the other streams, >= 0 that stream of `device`. The most
// specific setting wins. enpuClearDelays forgets them all.
enpuError_t enpuSetDelay(int device, int64_t scope, enpuWorkKind kind, int64_t us);
void enpuClearDelays(void);
}

namespace enpu {
// Runs fn on (device, stream): at once on the calling thread when synchronous (its exceptions
// propagate), else queued; an exception of queued work is reported by the next synchronisation.
enpuError_t enqueue(int device, enpuStream_t stream, enpuWorkKind kind, std::function<void()> fn);
// The device's copy engine: a stream of its own (fault nonblocking_d2h_unfenced copies on it).
enpuStream_t copyEngineStream(int device);
// Waits for the queued work of every stream of a device (-1: all), keeping its errors for the
// next synchronisation: where the host needs the device idle but reports nothing (before a fork,
// a red-zone check, emptying the block cache).
void drain(int device = -1);
// The number of the last piece of work queued on a stream so far, and whether the stream has
// finished its work up to such a number (a block freed on it may then be released).
uint64_t queuedUpTo(int device, enpuStream_t stream);
bool reached(int device, enpuStream_t stream, uint64_t seq);
// The message of the last error a synchronisation returned (enpuErrorAsyncWork).
const char* lastAsyncError();
}  // namespace enpu

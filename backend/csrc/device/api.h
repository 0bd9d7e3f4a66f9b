// echo_npu device integration entry points with std types only (for the Python bindings).
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace enpu {

// Registers the PrivateUse1 hooks, guard and allocator (once per process). Returns "" on success
// (or when this library already registered them) and a one-line description when another
// library registered PrivateUse1 hooks first (then echo_npu registers nothing).
std::string register_device();

// c10 allocator statistics of one device (-1: current), the counters torch's memory APIs read:
// per counter "<name>.current|peak|allocated|freed" plus "num_device_alloc", "num_device_free".
std::map<std::string, int64_t> allocator_stats(int device);
void reset_peak_stats(int device);
void reset_accumulated_stats(int device);
// Empties the block cache of a device (-1: all) in asynchronous mode: waits for the queued work
// first (keeping its errors for the next synchronisation), then releases every cached block
// whose uses are reached (torch.npu.empty_cache).
void release_cached(int device);

// Streams through the device guard (its faults apply): the calling thread's current stream of a
// device, its exchange (returns the previous id), device synchronisation (-1: every device),
// a stream's priority.
int64_t current_stream(int device);
int64_t exchange_stream(int device, int64_t stream);
void synchronize(int device);
int stream_priority(int device, int64_t stream);
// Compiled (Inductor) kernels read and write device memory on the host: waits for the current
// stream of a device (-1: the current device) first, reporting its errors (asynchronous mode).
void sync_for_kernels(int device);

// For tests: queues on the current stream work that raises `message` (aten/common.cpp).
void queue_failing_work(const std::string& message);

}  // namespace enpu

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
// Empties the block cache (asynchronous mode; synchronises first). device -1: all.
void release_cached(int device);
bool is_pinned_ptr(const void* p);

// Streams through the device guard (its faults apply): the calling thread's current stream of a
// device, its exchange (returns the previous id), device synchronisation (-1: every device),
// a stream's priority.
int64_t current_stream(int device);
int64_t exchange_stream(int device, int64_t stream);
void synchronize(int device);
int stream_priority(int device, int64_t stream);

}  // namespace enpu

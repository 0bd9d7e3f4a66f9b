// echo_npu ATen glue helpers: op scopes (current-op name + guard check), fallback calls,
// staging of strided/broadcast/other-dtype inputs into contiguous device buffers, write-back,
// and the stream work of ops (kernels, copies) with the host's synchronisation points.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <functional>
#include <initializer_list>
#include <utility>

#include "../kernels/kernels.h"
#include "../runtime/runtime.h"
#include "../runtime/stream.h"
#include "registry.h"

namespace enpu {

// Raises a RuntimeError naming the runtime error (e.g. use in a forked child).
void check_runtime(enpuError_t err);

// Names the op for allocations (outermost scope wins) and runs the red-zone check on exit.
class OpScope {
 public:
  explicit OpScope(const char* name) : name_(name), prev_(enpuGetCurrentOp()) {
    if (!prev_) check_runtime(enpuCheckProcess());  // refuse-fork: no op in a forked child
    if (!prev_) enpuSetCurrentOp(name);
  }
  ~OpScope() {
    if (!prev_) enpuSetCurrentOp(nullptr);
    if (enpuGetAllocatorMode() == enpuAllocGuard || enpuGetAllocatorMode() == enpuAllocPage) {
      // queued work first, so that a corruption is seen after the op that made it (errors of
      // the work stay for the next synchronisation)
      if (enpuGetAsync()) enpu::drain();
      enpuCheckMemory(name_);
    }
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  const char* name_;
  const char* prev_;
};

// Boxed cpu_fallback wrapper (counts calls, sets the op name, runs the guard check).
void fallback_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack);

template <class Op, class... Args>
decltype(auto) fallback(Args&&... args) {
  return at::native::call_fallback_fn<&fallback_boxed, Op>::call(std::forward<Args>(args)...);
}

// Index of a device (its index, or the current device's).
inline int device_index(c10::Device dev) { return dev.index() < 0 ? enpuGetDevice() : dev.index(); }

// Queues fn on (device, stream) (runs it at once when synchronous); a c10::Error it raises in
// queued work is reported by the next synchronisation as its one-line message (no backtrace).
void enqueue_work(int device, enpuStream_t stream, enpuWorkKind kind, std::function<void()> fn);

// A kernel on dev's current stream: run now (synchronous mode) or queued. f captures raw
// pointers and values, never a device tensor: queued work does not keep device storage alive,
// the caching allocator decides when a freed block is reused (as CUDA's; see record_stream).
template <class F>
void launch(const char* name, c10::Device dev, F f) {
  if (!enpuGetAsync()) {
    check_runtime(enpuLaunchKernel(name, [](void* p) { (*static_cast<F*>(p))(); }, &f));
    return;
  }
  enpuCountKernelLaunch();
  const int d = device_index(dev);
  enqueue_work(d, enpuGetStream(d), enpuWorkKernel, std::move(f));
}

// n bytes from src to dst, both device memory of dev, in dev's stream order.
void copy_bytes(c10::Device dev, void* dst, const void* src, size_t n);
// The host is about to read dev's memory directly: wait for dev's current stream.
void sync_for_host(c10::Device dev);

inline k::DType kdt(at::ScalarType st) { return static_cast<k::DType>(static_cast<int>(st)); }
// True if every defined tensor has a dtype the cmodel kernels support.
bool native_ok(std::initializer_list<at::Tensor> ts);
// True when an overload must go through cpu_fallback: routed there (set_fallback_routes), or a
// dtype/layout the cmodel kernels lack.
inline bool use_fallback(const char* name, std::initializer_list<at::Tensor> ts) {
  return routed(name) || !native_ok(ts);
}
// The PrivateUse1 device among the tensors; raises like CUDA for a non-scalar CPU tensor.
c10::Device device_of(std::initializer_list<at::Tensor> ts);

at::Tensor empty_dev(at::IntArrayRef sizes, at::ScalarType dt, c10::Device dev);
at::Tensor empty_strided_dev(at::IntArrayRef sizes, at::IntArrayRef strides, at::ScalarType dt,
                             c10::Device dev);
// A meta tensor with t's sizes/strides/dtype (CPU 0-dim tensors are returned unchanged).
at::Tensor to_meta(const at::Tensor& t);
// Contiguous device tensor of shape/dtype holding t broadcast to shape (t itself if it already is).
at::Tensor stage(const at::Tensor& t, at::IntArrayRef shape, at::ScalarType dt, c10::Device dev);
// dst <- src for any devices/strides/dtypes/conj-neg bits, safe for overlapping device views.
// Asynchronous mode: queued on the device's current stream; a host source is staged unless the
// copy is non_blocking from pinned memory, and a copy to the host waits for the stream unless it
// is non_blocking into pinned memory (which then completes later, as CUDA's).
void copy_any(const at::Tensor& dst, const at::Tensor& src, bool allow_offset_fault = false,
              bool non_blocking = false);
// A functional result: contiguous r relaid out into meta's strides/dtype if they differ.
at::Tensor finish(const at::Tensor& r, const at::Tensor& meta, c10::Device dev);
// Bytes t's storage needs to hold `sizes` elements from t's storage offset.
size_t bytes_needed(const at::Tensor& t, at::IntArrayRef sizes);
// at::native::resize_ (CPU's) on a device tensor: growing its storage copies the old bytes on
// the host, so queued work on them is waited for first.
const at::Tensor& resize_on_host(const at::Tensor& t, at::IntArrayRef sizes,
                                 std::optional<at::MemoryFormat> mf = std::nullopt);
// Resize out (already checked by a meta out= call) to meta_out's sizes and strides.
void resize_out_like(const at::Tensor& out, const at::Tensor& meta_out);
// Bytes of one element of dtype holding v (checked conversion like CPU fill_).
void scalar_bytes(const at::Scalar& v, at::ScalarType dt, void* out);
// One element's bytes, copyable into queued work.
struct Bytes16 {
  alignas(16) unsigned char b[16];
};
at::Tensor wrap_scalar(const at::Scalar& s);

}  // namespace enpu

// echo_npu ATen glue helpers: op scopes (current-op name + guard check), fallback calls,
// staging of strided/broadcast/other-dtype inputs into contiguous device buffers, write-back.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <initializer_list>
#include <utility>

#include "../kernels/kernels.h"
#include "../runtime/runtime.h"
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
    if (enpuGetAllocatorMode() == enpuAllocGuard || enpuGetAllocatorMode() == enpuAllocPage)
      enpuCheckMemory(name_);
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

template <class F>
void launch(const char* name, F&& f) {
  check_runtime(enpuLaunchKernel(
      name, [](void* p) { (*static_cast<std::remove_reference_t<F>*>(p))(); }, &f));
}

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
void copy_any(const at::Tensor& dst, const at::Tensor& src, bool allow_offset_fault = false);
// A functional result: contiguous r relaid out into meta's strides/dtype if they differ.
at::Tensor finish(const at::Tensor& r, const at::Tensor& meta, c10::Device dev);
// Resize out (already checked by a meta out= call) to meta_out's sizes and strides.
void resize_out_like(const at::Tensor& out, const at::Tensor& meta_out);
// Bytes of one element of dtype holding v (checked conversion like CPU fill_).
void scalar_bytes(const at::Scalar& v, at::ScalarType dt, void* out);
at::Tensor wrap_scalar(const at::Scalar& s);

}  // namespace enpu

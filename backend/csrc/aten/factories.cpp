// echo_npu kernels: factories, views, copies, fill/zero and scalar reads (the primitives that
// cpu_fallback itself relies on are registered as non-routable in register.cpp).
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/fill.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/zero.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/accumulate.h>

#include <cstdlib>

#include "../device/device.h"
#include "common.h"
#include "ops.h"
#ifdef ENPU_HAS_RESHAPE_ALIAS
#include <ATen/ops/_reshape_alias_native.h>
#endif

namespace enpu::ops {

Tensor empty_memory_format(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                           std::optional<at::Layout> layout, std::optional<at::Device> device,
                           std::optional<bool> pin, std::optional<at::MemoryFormat> mf) {
  OpScope s("empty.memory_format");
  auto dev = c10::device_or_default(device);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "echo_npu: non-strided layout not supported");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin), "Only dense CPU tensors can be pinned");
  c10::DeviceGuard g(dev);
  return at::detail::empty_generic(size, c10::GetAllocator(c10::DeviceType::PrivateUse1),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), mf);
}

Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride,
                     std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                     std::optional<at::Device> device, std::optional<bool> pin) {
  OpScope s("empty_strided");
  auto dev = c10::device_or_default(device);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "echo_npu: non-strided layout not supported");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin), "Only dense CPU tensors can be pinned");
  c10::DeviceGuard g(dev);
  return at::detail::empty_strided_generic(size, stride,
                                           c10::GetAllocator(c10::DeviceType::PrivateUse1),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

Tensor as_strided(const Tensor& self, at::IntArrayRef size, at::IntArrayRef stride,
                  std::optional<int64_t> offset) {
  OpScope s("as_strided");
  return at::native::as_strided_tensorimpl(self, size, stride, offset);
}

Tensor view(const Tensor& self, at::IntArrayRef size) {
  OpScope s("view");
  return at::native::view(self, size);
}

// complex <-> real views: torch.distributed views complex tensors as real before a collective
// (all_reduce, broadcast, all_gather...), so without them the cpu_fallback's copy took the
// results and the device tensor kept its old values
Tensor view_as_real(const Tensor& self) {
  OpScope s("view_as_real");
  return at::native::view_as_real(self);
}

Tensor view_as_complex(const Tensor& self) {
  OpScope s("view_as_complex");
  return at::native::view_as_complex(self);
}

#ifdef ENPU_HAS_RESHAPE_ALIAS
Tensor _reshape_alias(const Tensor& self, at::IntArrayRef size, at::IntArrayRef stride) {
  OpScope s("_reshape_alias");
  return at::native::_reshape_alias(self, size, stride);
}
#endif

const Tensor& resize_(const Tensor& self, at::IntArrayRef size,
                      std::optional<at::MemoryFormat> mf) {
  OpScope s("resize_");
  if (fault(Fault::ResizeSegfault)) {
    if (bytes_needed(self, size) > self.storage().nbytes()) {
      volatile int* null = nullptr;
      *null = 1;  // SIGSEGV
    }
  }
  if (fault(Fault::ResizeLosesData)) {
    // Grow the storage to fresh memory without copying the old bytes; at::native::resize_ then
    // finds it large enough and keeps it.
    const size_t need = bytes_needed(self, size);
    auto* storage = self.storage().unsafeGetStorageImpl();
    if (c10::multiply_integers(size) > 0 && need > storage->nbytes() && storage->resizable()) {
      storage->set_data_ptr_noswap(storage->allocator()->allocate(need));
      storage->set_nbytes(need);
    }
  }
  return resize_on_host(self, size, mf);
}

Tensor& set__source_Storage(Tensor& self, at::Storage src) {
  OpScope s("set_.source_Storage");
  return at::native::set_(self, src);
}

Tensor& set__source_Storage_storage_offset(Tensor& self, at::Storage src, int64_t offset,
                                           at::IntArrayRef size, at::IntArrayRef stride) {
  OpScope s("set_.source_Storage_storage_offset");
  return at::native::set_storage_cpu_(self, src, offset, size, stride);
}

Tensor& set__source_Tensor(Tensor& self, const Tensor& src) {
  OpScope s("set_.source_Tensor");
  return at::native::set_tensor_(self, src);
}

Tensor _copy_from(const Tensor& self, const Tensor& dst, bool non_blocking) {
  OpScope s("_copy_from");
  TORCH_CHECK(self.defined() && dst.defined(), "_copy_from: undefined tensor");
  if (self.device() == dst.device() && dst.numel() > 0) {
    // The CPU aliases used for the copy live in different storages: check overlap like CPU.
    at::assert_no_internal_overlap(dst);
    at::assert_no_partial_overlap(dst, self);
  }
  if (fault(Fault::Float64CopyCrash) && self.scalar_type() == at::kDouble &&
      self.device() != dst.device()) {
    // a staging buffer freed twice: glibc aborts ("free(): double free detected ...")
    void* volatile staging = std::malloc(64);
    std::free(staging);
    std::free(staging);
  }
  copy_any(dst, self, /*allow_offset_fault=*/true, non_blocking);
  return dst;
}

Tensor _copy_from_and_resize(const Tensor& self, const Tensor& dst) {
  OpScope s("_copy_from_and_resize");
  if (dst.sizes() != self.sizes()) resize_on_host(dst, self.sizes());
  copy_any(dst, self, /*allow_offset_fault=*/true);
  return dst;
}

at::Scalar _local_scalar_dense(const Tensor& self) {
  OpScope s("_local_scalar_dense");
  sync_for_host(self.device());  // a host read of device memory, as CUDA's item()
  return at::native::_local_scalar_dense_cpu(self);
}

// tensor.record_stream(s): the caching allocator keeps the block from reuse until s's work
// queued up to the tensor's free is done (asynchronous mode; synchronous mode caches nothing).
void record_stream(Tensor& self, at::Stream s) {
  TORCH_CHECK(s.device_type() == c10::DeviceType::PrivateUse1 && s.device() == self.device(),
              "record_stream: the stream (", s, ") must be on the tensor's device ", self.device());
  ::enpu::record_stream(self.storage().mutable_data(), s.id());
}

namespace {

void fill_impl(const Tensor& self, const at::Scalar& value) {
  if (self.numel() == 0) return;
  Bytes16 buf;
  scalar_bytes(value, self.scalar_type(), buf.b);
  const size_t es = self.element_size();
  auto fill = [&](const Tensor& t) {
    launch("fill", t.device(), [es, tp = t.data_ptr(), n = t.numel(), buf] { k::fill(es, tp, n, buf.b); });
  };
  if (self.is_non_overlapping_and_dense()) {
    fill(self);
    return;
  }
  // Expanded self: every stride-0 position is one element, so fill the un-expanded view.
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  for (int64_t d = 0; d < self.dim(); ++d)
    if (self.stride(d) == 0) sizes[d] = 1;
  Tensor v = self.as_strided(sizes, self.strides());
  Tensor tmp = empty_dev(v.sizes(), self.scalar_type(), self.device());
  fill(tmp);
  copy_any(v, tmp);
}

// Fault "fill_no_half": a backend whose fill_ kernel lacks float16.
void refuse_half(const Tensor& self) {
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != at::kHalf,
                              "\"fill_npu\" not implemented for 'Half'");
}

}  // namespace

Tensor& fill__Scalar(Tensor& self, const at::Scalar& value) {
  OpScope s("fill_.Scalar");
  if (routed("fill_.Scalar") || !native_ok({self}))
    return fallback<at::_ops::fill__Scalar>(self, value);
  if (fault(Fault::FillNoHalf)) refuse_half(self);
  fill_impl(self, value);
  return self;
}

Tensor& fill__Tensor(Tensor& self, const Tensor& value) {
  OpScope s("fill_.Tensor");
  if (routed("fill_.Tensor") || !native_ok({self, value}))
    return fallback<at::_ops::fill__Tensor>(self, value);
  if (fault(Fault::FillNoHalf)) refuse_half(self);
  TORCH_CHECK(value.dim() == 0,
              "fill_ only supports 0-dimension value tensor but got tensor with ", value.dim(),
              " dimensions.");
  fill_impl(self, value.item());
  return self;
}

Tensor& zero_(Tensor& self) {
  OpScope s("zero_");
  if (routed("zero_") || !native_ok({self})) return fallback<at::_ops::zero_>(self);
  fill_impl(self, 0);
  return self;
}

}  // namespace enpu::ops

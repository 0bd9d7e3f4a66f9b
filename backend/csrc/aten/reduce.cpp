// echo_npu kernels: reductions (sum, mean, amax, all, any), softmax and cumsum. Reduced dims are
// permuted to the end and staged contiguous so the cmodel kernel reduces rows of a [outer, r]
// buffer; cumsum scans the middle dim of a contiguous [outer, len, inner] buffer.
#include <ATen/ops/_softmax.h>
#include <ATen/ops/all.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/any.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/sum.h>
#include <ATen/MemoryOverlap.h>
#include <c10/core/WrapDimMinimal.h>

#include "common.h"
#include "meta.h"
#include "ops.h"

namespace enpu::ops {
namespace {

Tensor reduce_impl(k::RedOp op, const Tensor& self, at::OptionalIntArrayRef dims,
                   at::ScalarType ct, const Tensor& meta, c10::Device dev) {
  const int64_t nd = self.dim();
  std::vector<bool> red(static_cast<size_t>(nd), !dims.has_value() || dims->empty());
  if (dims.has_value())
    for (int64_t d : *dims) {
      int64_t w = c10::maybe_wrap_dim(d, nd);
      if (w < nd) red[static_cast<size_t>(w)] = true;
    }
  std::vector<int64_t> perm;
  int64_t outer = 1, r = 1;
  for (int64_t d = 0; d < nd; ++d)
    if (!red[d]) perm.push_back(d), outer *= self.size(d);
  for (int64_t d = 0; d < nd; ++d)
    if (red[d]) perm.push_back(d), r *= self.size(d);
  Tensor x = nd > 0 ? self.permute(perm) : self;
  Tensor sx = stage(x, x.sizes(), ct, dev);
  if (op == k::RedOp::Sum && self.numel() == 0 && fault(Fault::SegfaultEmpty)) {
    // Fault "segfault_empty": read the first element of an empty (null) buffer.
    const char* volatile p = static_cast<const char*>(sx.data_ptr());
    volatile char c = *p;
    (void)c;
  }
  Tensor out = empty_dev(meta.sizes(), meta.scalar_type(), dev);
  if (out.numel() == 0) return finish(out, meta, dev);
  // Fault "sum_bf16_tiles": bfloat16 sums of float32 tiles (rows of more than 16 elements)
  const unsigned quirks = op == k::RedOp::Sum && ct == at::kBFloat16 &&
                                  self.scalar_type() == at::kBFloat16 && fault(Fault::SumBf16Tiles)
                              ? k::kBf16TileSum
                              : 0u;
  launch("reduce", dev, [op, kt = kdt(ct), xp = sx.data_ptr(), op_ = out.data_ptr(), outer, r, quirks] {
    k::reduce(op, kt, xp, op_, outer, r, quirks);
  });
  return finish(out, meta, dev);
}

// cumsum of self along dim into a new contiguous device tensor of dtype ct (the meta kernel's
// result dtype), as CPU: a 0-dim self is copied (converted), an empty one gives an
// empty result, otherwise self converted to ct is scanned in ct's accumulate type.
Tensor cumsum_compute(const Tensor& self, int64_t dim, at::ScalarType ct, c10::Device dev) {
  Tensor r = empty_dev(self.sizes(), ct, dev);
  if (self.numel() == 0) return r;
  if (self.dim() == 0) {  // CPU: result.fill_(self), a copy (unchecked conversion)
    copy_any(r, self);
    return r;
  }
  const int64_t w = c10::maybe_wrap_dim(dim, self.dim());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < w; ++d) outer *= self.size(d);
  for (int64_t d = w + 1; d < self.dim(); ++d) inner *= self.size(d);
  Tensor x = stage(self, self.sizes(), ct, dev);
  const unsigned quirks = fault(Fault::CumsumCarry) ? k::kScanCarryInput : 0u;
  launch("cumsum", dev, [kt = kdt(ct), xp = x.data_ptr(), rp = r.data_ptr(), outer,
                         len = self.size(w), inner, quirks] {
    k::cumsum(kt, xp, rp, outer, len, inner, quirks);
  });
  return r;
}

// CPU's overlap checks (its TensorIterator's): only for a non-empty self of at least one dim,
// and against self only when self is not first converted to the result's dtype.
void cumsum_check_overlap(const Tensor& out, const Tensor& self) {
  if (self.numel() == 0 || self.dim() == 0) return;
  at::assert_no_internal_overlap(out);
  if (self.scalar_type() == out.scalar_type() && self.device() == out.device())
    at::assert_no_partial_overlap(out, self);
}

// dtypes the cmodel scan lacks: a dtype= argument it does not support, bool results (CPU has
// no bool kernel: the fallback raises its error)
bool cumsum_native(const Tensor& self, std::optional<at::ScalarType> dtype) {
  return native_ok({self}) && (!dtype.has_value() || k::supported(static_cast<int>(*dtype)));
}

}  // namespace

Tensor sum_dim_IntList(const Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
               std::optional<at::ScalarType> dtype) {
  OpScope s("sum.dim_IntList");
  if (routed("sum.dim_IntList") || !native_ok({self}) ||
      (dtype.has_value() && !k::supported(static_cast<int>(*dtype))))
    return fallback<at::_ops::sum_dim_IntList>(self, dim, keepdim, dtype);
  auto dev = device_of({self});
  Tensor meta = meta_call<at::_ops::sum_dim_IntList>(to_meta(self), dim, keepdim, dtype);
  return reduce_impl(k::RedOp::Sum, self, dim, meta.scalar_type(), meta, dev);
}

Tensor mean_dim(const Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                std::optional<at::ScalarType> dtype) {
  OpScope s("mean.dim");
  if (routed("mean.dim") || !native_ok({self}) ||
      (dtype.has_value() && !k::supported(static_cast<int>(*dtype))))
    return fallback<at::_ops::mean_dim>(self, dim, keepdim, dtype);
  auto dev = device_of({self});
  Tensor meta = meta_call<at::_ops::mean_dim>(to_meta(self), dim, keepdim, dtype);
  return reduce_impl(k::RedOp::Mean, self, dim, meta.scalar_type(), meta, dev);
}

Tensor amax(const Tensor& self, at::IntArrayRef dim, bool keepdim) {
  OpScope s("amax");
  if (routed("amax") || !native_ok({self})) return fallback<at::_ops::amax>(self, dim, keepdim);
  auto dev = device_of({self});
  if (self.numel() == 0) {  // CPU raises IndexError here; the meta kernel a RuntimeError
    TORCH_CHECK(!dim.empty() || self.dim() == 0,
                "amax(): Expected reduction dim to be specified for input.numel() == 0. Specify "
                "the reduction dim with the 'dim' argument.");
    for (int64_t d : dim) {
      const int64_t w = c10::maybe_wrap_dim(d, self.dim());
      TORCH_CHECK_INDEX(self.dim() == 0 || self.size(w) != 0, "amax(): Expected reduction dim ",
                        w, " to have non-zero size.");
    }
  }
  Tensor meta = meta_call<at::_ops::amax>(to_meta(self), dim, keepdim);
  return reduce_impl(k::RedOp::Amax, self, dim, self.scalar_type(), meta, dev);
}

Tensor all(const Tensor& self) {
  OpScope s("all");
  if (routed("all") || !native_ok({self})) return fallback<at::_ops::all>(self);
  auto dev = device_of({self});
  Tensor meta = meta_call<at::_ops::all>(to_meta(self));
  return reduce_impl(k::RedOp::All, self, std::nullopt, self.scalar_type(), meta, dev);
}

Tensor any(const Tensor& self) {
  OpScope s("any");
  if (routed("any") || !native_ok({self})) return fallback<at::_ops::any>(self);
  auto dev = device_of({self});
  Tensor meta = meta_call<at::_ops::any>(to_meta(self));
  return reduce_impl(k::RedOp::Any, self, std::nullopt, self.scalar_type(), meta, dev);
}

Tensor all_dim(const Tensor& self, int64_t dim, bool keepdim) {
  OpScope s("all.dim");
  if (routed("all.dim") || !native_ok({self})) return fallback<at::_ops::all_dim>(self, dim, keepdim);
  auto dev = device_of({self});
  Tensor meta = meta_call<at::_ops::all_dim>(to_meta(self), dim, keepdim);
  int64_t d[1] = {dim};
  return reduce_impl(k::RedOp::All, self, at::IntArrayRef(d, 1), self.scalar_type(), meta, dev);
}

Tensor any_dim(const Tensor& self, int64_t dim, bool keepdim) {
  OpScope s("any.dim");
  if (routed("any.dim") || !native_ok({self})) return fallback<at::_ops::any_dim>(self, dim, keepdim);
  auto dev = device_of({self});
  Tensor meta = meta_call<at::_ops::any_dim>(to_meta(self), dim, keepdim);
  int64_t d[1] = {dim};
  return reduce_impl(k::RedOp::Any, self, at::IntArrayRef(d, 1), self.scalar_type(), meta, dev);
}

Tensor cumsum(const Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  OpScope s("cumsum");
  if (routed("cumsum") || !cumsum_native(self, dtype))
    return fallback<at::_ops::cumsum>(self, dim, dtype);
  auto dev = device_of({self});
  Tensor meta = meta_call<at::_ops::cumsum>(to_meta(self), dim, dtype);
  if (meta.scalar_type() == at::kBool) return fallback<at::_ops::cumsum>(self, dim, dtype);
  return finish(cumsum_compute(self, dim, meta.scalar_type(), dev), meta, dev);
}

Tensor& cumsum_(Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  OpScope s("cumsum_");
  if (routed("cumsum_") || !cumsum_native(self, dtype))
    return fallback<at::_ops::cumsum_>(self, dim, dtype);
  auto dev = device_of({self});
  Tensor ms = to_meta(self);
  meta_call<at::_ops::cumsum_>(ms, dim, dtype);
  if (self.scalar_type() == at::kBool) return fallback<at::_ops::cumsum_>(self, dim, dtype);
  cumsum_check_overlap(self, self);
  copy_any(self, cumsum_compute(self, dim, self.scalar_type(), dev));
  return self;
}

Tensor& cumsum_out(const Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype,
                   Tensor& out) {
  OpScope s("cumsum.out");
  if (routed("cumsum.out") || !cumsum_native(self, dtype) || !native_ok({out}))
    return fallback<at::_ops::cumsum_out>(self, dim, dtype, out);
  auto dev = device_of({self, out});
  Tensor mo = to_meta(out);
  meta_call<at::_ops::cumsum_out>(to_meta(self), dim, dtype, mo);
  if (mo.scalar_type() == at::kBool) return fallback<at::_ops::cumsum_out>(self, dim, dtype, out);
  resize_out_like(out, mo);
  cumsum_check_overlap(out, self);
  copy_any(out, cumsum_compute(self, dim, out.scalar_type(), dev));
  return out;
}

Tensor _softmax(const Tensor& self, int64_t dim, bool half_to_float) {
  OpScope s("_softmax");
  if (routed("_softmax") || !native_ok({self}))
    return fallback<at::_ops::_softmax>(self, dim, half_to_float);
  auto dev = device_of({self});
  TORCH_CHECK(!half_to_float, "softmax with half to float conversion is not supported on CPU");
  Tensor meta = meta_call<at::_ops::_softmax>(to_meta(self), dim, half_to_float);
  const int64_t nd = self.dim();
  const int64_t w = c10::maybe_wrap_dim(dim, nd);
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()), "\"",
                              (w == nd - 1 || nd == 0) ? "softmax_lastdim_kernel_impl" : "softmax_kernel_impl",
                              "\" not implemented for '", toString(self.scalar_type()), "'");
  if (self.numel() == 0) return empty_strided_dev(meta.sizes(), meta.strides(), meta.scalar_type(), dev);
  std::vector<int64_t> perm, inv(static_cast<size_t>(nd));
  for (int64_t d = 0; d < nd; ++d)
    if (d != w) perm.push_back(d);
  if (nd > 0) perm.push_back(w);
  for (int64_t i = 0; i < nd; ++i) inv[static_cast<size_t>(perm[i])] = i;
  Tensor x = nd > 0 ? self.permute(perm) : self;
  Tensor sx = stage(x, x.sizes(), self.scalar_type(), dev);
  Tensor r = empty_dev(x.sizes(), self.scalar_type(), dev);
  const int64_t last = nd > 0 ? self.size(w) : 1;
  launch("softmax", dev, [kt = kdt(self.scalar_type()), xp = sx.data_ptr(), rp = r.data_ptr(),
                          rows = r.numel() / last, last] { k::softmax(kt, xp, rp, rows, last); });
  return finish(nd > 0 ? r.permute(inv) : r, meta, dev);
}

}  // namespace enpu::ops

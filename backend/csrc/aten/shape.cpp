// echo_npu kernels: tril/triu, cat and index_select over contiguous staged buffers.
#include <ATen/ops/cat.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/convolution_backward_overrideable.h>
#include <ATen/ops/convolution_overrideable.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/tril.h>
#include <ATen/ops/triu.h>
#include <c10/core/WrapDimMinimal.h>

#include "common.h"
#include "meta.h"
#include "ops.h"

namespace enpu::ops {
namespace {

Tensor tri_impl(const Tensor& self, int64_t diag, bool upper, const Tensor& meta) {
  auto dev = device_of({self});
  Tensor x = stage(self, self.sizes(), self.scalar_type(), dev);
  Tensor r = empty_dev(self.sizes(), self.scalar_type(), dev);
  const int64_t rows = self.size(-2), cols = self.size(-1);
  if (r.numel() > 0) {
    launch("tri", dev, [es = r.element_size(), xp = x.data_ptr(), rp = r.data_ptr(),
                        batch = r.numel() / (rows * cols), rows, cols, diag, upper] {
      k::tri(es, xp, rp, batch, rows, cols, diag, upper);
    });
  }
  return finish(r, meta, dev);
}

// Fault "index_select_strided_as_contiguous": a non-contiguous device input without a zero
// stride is read as if its storage, from its offset, were contiguous (within the storage).
Tensor strided_as_contiguous(const Tensor& x) {
  if (!fault(Fault::IndexSelectStridedAsContiguous) || x.is_contiguous() || x.dim() == 0 ||
      !x.device().is_privateuseone())
    return x;
  for (int64_t st : x.strides())
    if (st == 0) return x;
  const int64_t elems = static_cast<int64_t>(x.storage().nbytes() / x.itemsize());
  if (x.storage_offset() + x.numel() > elems) return x;
  std::vector<int64_t> dense(static_cast<size_t>(x.dim()), 1);
  for (int64_t d = x.dim() - 2; d >= 0; --d) dense[d] = dense[d + 1] * std::max<int64_t>(x.size(d + 1), 1);
  return x.as_strided(x.sizes(), dense, x.storage_offset());
}

}  // namespace

Tensor tril(const Tensor& self, int64_t diag) {
  OpScope s("tril");
  if (routed("tril") || !native_ok({self})) return fallback<at::_ops::tril>(self, diag);
  Tensor meta = meta_call<at::_ops::tril>(to_meta(self), diag);
  // Fault "tril_negative_diagonal": a negative diagonal is taken as the main one.
  if (diag < 0 && fault(Fault::TrilNegativeDiagonal)) diag = 0;
  return tri_impl(self, diag, false, meta);
}

Tensor triu(const Tensor& self, int64_t diag) {
  OpScope s("triu");
  if (routed("triu") || !native_ok({self})) return fallback<at::_ops::triu>(self, diag);
  Tensor meta = meta_call<at::_ops::triu>(to_meta(self), diag);
  return tri_impl(self, diag, true, meta);
}

Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  OpScope s("cat");
  std::vector<Tensor> ins;
  for (const Tensor& t : tensors) ins.push_back(t);
  bool ok = true;
  for (const auto& t : ins) ok = ok && native_ok({t});
  if (routed("cat") || !ok) return fallback<at::_ops::cat>(tensors, dim);
  c10::optional<c10::Device> dev;
  for (const auto& t : ins)
    if (t.device().is_privateuseone()) {
      dev = t.device();
      break;
    }
  TORCH_CHECK(dev.has_value(), "echo_npu: cat without npu tensors");
  for (size_t i = 0; i < ins.size(); ++i)  // CPU's check; the meta kernel reports it differently
    TORCH_CHECK(ins[i].dim() > 0, "zero-dimensional tensor (at position ", i,
                ") cannot be concatenated");
  std::vector<Tensor> metas;
  for (const auto& t : ins) {
    TORCH_CHECK(t.device() == *dev, "Expected all tensors to be on the same device, but found at least two devices, ",
                *dev, " and ", t.device(), "!");
    metas.push_back(to_meta(t));
  }
  Tensor meta = meta_call<at::_ops::cat>(at::ITensorListRef(metas), dim);
  Tensor r = empty_dev(meta.sizes(), meta.scalar_type(), *dev);
  if (r.numel() == 0) return finish(r, meta, *dev);
  const int64_t w = c10::maybe_wrap_dim(dim, meta.dim());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < w; ++d) outer *= meta.size(d);
  for (int64_t d = w + 1; d < meta.dim(); ++d) inner *= meta.size(d);
  const int64_t es = r.element_size(), total = meta.size(w);
  int64_t off = 0;
  for (const auto& t : ins) {
    if (t.numel() == 0) continue;  // includes legacy 1-D empty tensors
    Tensor st = stage(t, t.sizes(), meta.scalar_type(), *dev);
    const int64_t chunk = t.size(w) * inner * es;
    auto* dst = static_cast<char*>(r.data_ptr());
    auto* src = static_cast<const char*>(st.data_ptr());
    for (int64_t o = 0; o < outer; ++o)
      copy_bytes(*dev, dst + (o * total + off) * inner * es, src + o * chunk,
                 static_cast<size_t>(chunk));
    off += t.size(w);
  }
  return finish(r, meta, *dev);
}

Tensor index_select(const Tensor& self, int64_t dim, const Tensor& index) {
  OpScope s("index_select");
  if (routed("index_select") || !native_ok({self, index}))
    return fallback<at::_ops::index_select>(self, dim, index);
  auto dev = device_of({self, index});
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
              "index_select(): Expected dtype int32 or int64 for index");
  // CPU's check for a 0-dim self (the meta kernel does not make it)
  TORCH_CHECK(self.dim() > 0 || index.numel() == 1,
              "index_select(): Index to scalar can have only 1 value, got ", index.numel(),
              " value(s)");
  Tensor meta = meta_call<at::_ops::index_select>(to_meta(self), dim, to_meta(index));
  const int64_t w = c10::maybe_wrap_dim(dim, self.dim());
  Tensor x = self.dim() == 0 ? self.reshape({1}) : self;
  Tensor idx = stage(index, {index.numel()}, at::kLong, dev);
  const int64_t dsize = x.size(w);
  const int64_t* ip = idx.data_ptr<int64_t>();
  sync_for_host(dev);  // the indices are checked on the host
  // CPU reports bad indices differently on its dim-1 fast path and elsewhere.
  for (int64_t i = 0; i < idx.numel(); ++i) {
    if (self.dim() > 1 && w == 1) {
      TORCH_CHECK(ip[i] >= 0 && ip[i] < dsize, "INDICES element is out of DATA bounds, id=", ip[i],
                  " axis_dim=", dsize);
    } else {
      TORCH_CHECK_INDEX(ip[i] >= 0 && ip[i] < dsize, "index out of range in self");
    }
  }
  Tensor sx = stage(strided_as_contiguous(x), x.sizes(), x.scalar_type(), dev);
  Tensor r = empty_dev(meta.sizes(), meta.scalar_type(), dev);
  if (r.numel() == 0) return finish(r, meta, dev);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < w; ++d) outer *= x.size(d);
  for (int64_t d = w + 1; d < x.dim(); ++d) inner *= x.size(d);
  launch("index_select", dev, [es = r.element_size(), xp = sx.data_ptr(), ip, rp = r.data_ptr(),
                               outer, dsize, inner, n = idx.numel()] {
    k::index_select(es, xp, ip, rp, outer, dsize, inner, n);
  });
  Tensor out = finish(r, meta, dev);
  if (fault(Fault::IndexAssertSticky) && !index.is_contiguous())
    enpuTripDeviceAssert("index_select: index out of bounds");  // the call returns: as CUDA's
  return out;
}

// Convolution has no cmodel kernel: the boxed fallback cannot serve it (CPU has no
// convolution_overrideable), so run at::convolution on host copies and copy the result back.
namespace {
at::Tensor to_host(const Tensor& t) { return t.defined() ? t.cpu() : t; }
}  // namespace

Tensor convolution_overrideable(const Tensor& input, const Tensor& weight,
                                const std::optional<Tensor>& bias, at::IntArrayRef stride,
                                at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                                at::IntArrayRef output_padding, int64_t groups) {
  OpScope s("convolution_overrideable");
  auto dev = device_of({input, weight});
  std::optional<Tensor> b;
  if (bias.has_value() && bias->defined()) b = to_host(*bias);
  Tensor r = at::convolution(to_host(input), to_host(weight), b, stride, padding, dilation,
                             transposed, output_padding, groups);
  Tensor out = empty_strided_dev(r.sizes(), r.strides(), r.scalar_type(), dev);
  copy_any(out, r);
  return out;
}

std::tuple<Tensor, Tensor, Tensor> convolution_backward_overrideable(
    const Tensor& grad, const Tensor& input, const Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
    at::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> mask) {
  OpScope s("convolution_backward_overrideable");
  auto dev = device_of({grad, input, weight});
  int64_t bias_size[1] = {grad.size(1)};
  auto r = at::convolution_backward(to_host(grad), to_host(input), to_host(weight),
                                    at::IntArrayRef(bias_size, 1), stride, padding, dilation,
                                    transposed, output_padding, groups, mask);
  auto back = [&](const Tensor& t) {
    if (!t.defined()) return t;
    Tensor o = empty_strided_dev(t.sizes(), t.strides(), t.scalar_type(), dev);
    copy_any(o, t);
    return o;
  };
  return {back(std::get<0>(r)), back(std::get<1>(r)), back(std::get<2>(r))};
}

}  // namespace enpu::ops

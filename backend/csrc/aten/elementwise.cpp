// echo_npu glue: elementwise binary/unary ops, comparisons, masked_fill_, where.
// Shapes, dtypes and errors come from the meta kernels (same checks as CPU); inputs are staged
// into contiguous device buffers, the cmodel kernel runs, results are written back.
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/add.h>
#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/ge.h>
#include <ATen/ops/gt.h>
#include <ATen/ops/le.h>
#include <ATen/ops/lt.h>
#include <ATen/ops/masked_fill.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/neg.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/where.h>

#include "common.h"

namespace enpu {
namespace {

using at::Scalar;
using at::Tensor;

at::ScalarType default_float() { return c10::typeMetaToScalarType(c10::get_default_dtype()); }

// CPU's sub_check (the Python meta kernel does not repeat it).
void sub_check(const Tensor& self, const Tensor& other) {
  TORCH_CHECK(self.scalar_type() != at::kBool || other.scalar_type() != at::kBool,
              "Subtraction, the `-` operator, with two bool tensors is not supported. "
              "Use the `^` or `logical_xor()` operator instead.");
  TORCH_CHECK(self.scalar_type() != at::kBool && other.scalar_type() != at::kBool,
              "Subtraction, the `-` operator, with a bool tensor is not supported. "
              "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
}

// Compute dtype of a binary op (true division promotes integers to the default float).
at::ScalarType binary_ct(k::BinOp op, const Tensor& a, const Tensor& b) {
  auto ct = at::result_type(a, b);
  if (op == k::BinOp::Div && at::isIntegralType(ct, /*includeBool=*/true)) ct = default_float();
  return ct;
}

Tensor binary_compute(k::BinOp op, const Tensor& a, const Tensor& b, const Scalar& alpha,
                      at::IntArrayRef shape, c10::Device dev) {
  if (op == k::BinOp::Sub) sub_check(a, b);
  auto ct = binary_ct(op, a, b);
  Tensor sa = stage(a, shape, ct, dev), sb = stage(b, shape, ct, dev);
  Tensor r = empty_dev(shape, ct, dev);
  double af = 1.0;
  int64_t ai = 1;
  if (at::isFloatingType(ct)) af = alpha.to<double>();
  else if (ct == at::kBool) ai = alpha.to<bool>() ? 1 : 0;
  else ai = alpha.to<int64_t>();
  launch("binary", [&] {
    k::binary(op, kdt(ct), sa.data_ptr(), sb.data_ptr(), r.data_ptr(), r.numel(), af, ai);
  });
  return r;
}

// CPU's TensorIterator refuses to write a result into a tensor of a type it cannot be cast to
// (div_ of ints gives Float). Some torch versions' meta kernels (2.8) skip this check.
void check_can_cast(at::ScalarType result, const Tensor& out) {
  TORCH_CHECK(at::canCast(result, out.scalar_type()), "result type ", result,
              " can't be cast to the desired output type ", out.scalar_type());
}

void check_inplace(const Tensor& out, std::initializer_list<Tensor> inputs) {
  at::assert_no_internal_overlap(out);
  for (const auto& t : inputs)
    if (t.defined() && t.device() == out.device()) at::assert_no_partial_overlap(out, t);
}

// ---- binary -------------------------------------------------------------------------------
#define ENPU_BINARY(NAME, OPNAME, KOP)                                                         \
  Tensor NAME##_Tensor(const Tensor& self, const Tensor& other, const Scalar& alpha) {         \
    OpScope s(OPNAME ".Tensor");                                                               \
    if (routed(OPNAME ".Tensor") || !native_ok({self, other}))                                 \
      return fallback<at::_ops::NAME##_Tensor>(self, other, alpha);                            \
    auto dev = device_of({self, other});                                                       \
    Tensor meta = at::_ops::NAME##_Tensor::call(to_meta(self), to_meta(other), alpha);         \
    return finish(binary_compute(KOP, self, other, alpha, meta.sizes(), dev), meta, dev);      \
  }                                                                                            \
  Tensor& NAME##__Tensor(Tensor& self, const Tensor& other, const Scalar& alpha) {             \
    OpScope s(OPNAME "_.Tensor");                                                              \
    if (routed(OPNAME "_.Tensor") || !native_ok({self, other}))                                \
      return fallback<at::_ops::NAME##__Tensor>(self, other, alpha);                           \
    auto dev = device_of({self, other});                                                       \
    Tensor ms = to_meta(self);                                                                 \
    at::_ops::NAME##__Tensor::call(ms, to_meta(other), alpha);                                 \
    check_can_cast(at::_ops::NAME##_Tensor::call(ms, to_meta(other), alpha).scalar_type(), self); \
    check_inplace(self, {other});                                                              \
    Tensor r = binary_compute(KOP, self, other, alpha, self.sizes(), dev);                     \
    if (KOP == k::BinOp::Add && fault(Fault::InplaceReturnsNew)) {                             \
      static thread_local Tensor holder;                                                       \
      holder = finish(r, ms, dev);                                                             \
      return holder;                                                                           \
    }                                                                                          \
    copy_any(self, r);                                                                         \
    return self;                                                                               \
  }                                                                                            \
  Tensor& NAME##_out(const Tensor& self, const Tensor& other, const Scalar& alpha, Tensor& out) { \
    OpScope s(OPNAME ".out");                                                                  \
    if (routed(OPNAME ".out") || !native_ok({self, other, out}))                               \
      return fallback<at::_ops::NAME##_out>(self, other, alpha, out);                          \
    auto dev = device_of({self, other, out});                                                  \
    Tensor mo = to_meta(out);                                                                  \
    at::_ops::NAME##_out::call(to_meta(self), to_meta(other), alpha, mo);                      \
    check_can_cast(                                                                            \
        at::_ops::NAME##_Tensor::call(to_meta(self), to_meta(other), alpha).scalar_type(), out); \
    resize_out_like(out, mo);                                                                  \
    check_inplace(out, {self, other});                                                         \
    copy_any(out, binary_compute(KOP, self, other, alpha, mo.sizes(), dev));                   \
    return out;                                                                                \
  }

ENPU_BINARY(add, "add", k::BinOp::Add)
ENPU_BINARY(sub, "sub", k::BinOp::Sub)
#undef ENPU_BINARY

// mul/div have no alpha.
#define ENPU_BINARY2(NAME, OPNAME, KOP, EXTRA)                                                 \
  Tensor NAME##_Tensor(const Tensor& self, const Tensor& other) {                              \
    OpScope s(OPNAME ".Tensor");                                                               \
    if (routed(OPNAME ".Tensor") || !native_ok({self, other}))                                 \
      return fallback<at::_ops::NAME##_Tensor>(self, other);                                   \
    auto dev = device_of({self, other});                                                       \
    Tensor meta = at::_ops::NAME##_Tensor::call(to_meta(self), to_meta(other));               \
    Tensor r = finish(binary_compute(KOP, self, other, 1, meta.sizes(), dev), meta, dev);      \
    EXTRA;                                                                                     \
    return r;                                                                                  \
  }                                                                                            \
  Tensor& NAME##__Tensor(Tensor& self, const Tensor& other) {                                  \
    OpScope s(OPNAME "_.Tensor");                                                              \
    if (routed(OPNAME "_.Tensor") || !native_ok({self, other}))                                \
      return fallback<at::_ops::NAME##__Tensor>(self, other);                                  \
    auto dev = device_of({self, other});                                                       \
    Tensor ms = to_meta(self);                                                                 \
    at::_ops::NAME##__Tensor::call(ms, to_meta(other));                                        \
    check_can_cast(at::_ops::NAME##_Tensor::call(ms, to_meta(other)).scalar_type(), self);     \
    check_inplace(self, {other});                                                              \
    copy_any(self, binary_compute(KOP, self, other, 1, self.sizes(), dev));                    \
    return self;                                                                               \
  }                                                                                            \
  Tensor& NAME##_out(const Tensor& self, const Tensor& other, Tensor& out) {                   \
    OpScope s(OPNAME ".out");                                                                  \
    if (routed(OPNAME ".out") || !native_ok({self, other, out}))                               \
      return fallback<at::_ops::NAME##_out>(self, other, out);                                 \
    auto dev = device_of({self, other, out});                                                  \
    Tensor mo = to_meta(out);                                                                  \
    at::_ops::NAME##_out::call(to_meta(self), to_meta(other), mo);                             \
    check_can_cast(at::_ops::NAME##_Tensor::call(to_meta(self), to_meta(other)).scalar_type(), out); \
    resize_out_like(out, mo);                                                                  \
    check_inplace(out, {self, other});                                                         \
    copy_any(out, binary_compute(KOP, self, other, 1, mo.sizes(), dev));                       \
    return out;                                                                                \
  }

// Fault "leak": functional mul allocates one more device block and never frees it.
ENPU_BINARY2(mul, "mul", k::BinOp::Mul, if (fault(Fault::Leak)) {
  void* p = nullptr;
  enpuMalloc(&p, static_cast<size_t>(r.nbytes()) + 64);
})
ENPU_BINARY2(div, "div", k::BinOp::Div, (void)0)
#undef ENPU_BINARY2

// ---- unary --------------------------------------------------------------------------------
Tensor unary_compute(k::UnOp op, const Tensor& self, at::ScalarType ct, c10::Device dev) {
  Tensor a = stage(self, self.sizes(), ct, dev);
  Tensor r = empty_dev(self.sizes(), ct, dev);
  launch("unary", [&] { k::unary(op, kdt(ct), a.data_ptr(), r.data_ptr(), r.numel()); });
  return r;
}

at::ScalarType unary_ct(k::UnOp op, const Tensor& self) {
  TORCH_CHECK_NOT_IMPLEMENTED(op != k::UnOp::Abs || self.scalar_type() != at::kBool,
                              "\"abs_cpu\" not implemented for 'Bool'");
  if (op == k::UnOp::Exp && at::isIntegralType(self.scalar_type(), true)) return default_float();
  return self.scalar_type();
}

#define ENPU_UNARY(NAME, OPNAME, KOP)                                                   \
  Tensor NAME(const Tensor& self) {                                                     \
    OpScope s(OPNAME);                                                                  \
    if (routed(OPNAME) || !native_ok({self})) return fallback<at::_ops::NAME>(self);    \
    auto dev = device_of({self});                                                       \
    Tensor meta = at::_ops::NAME::call(to_meta(self));                                  \
    return finish(unary_compute(KOP, self, unary_ct(KOP, self), dev), meta, dev);       \
  }                                                                                     \
  Tensor& NAME##_out(const Tensor& self, Tensor& out) {                                 \
    OpScope s(OPNAME ".out");                                                           \
    if (routed(OPNAME ".out") || !native_ok({self, out}))                               \
      return fallback<at::_ops::NAME##_out>(self, out);                                 \
    auto dev = device_of({self, out});                                                  \
    Tensor mo = to_meta(out);                                                           \
    at::_ops::NAME##_out::call(to_meta(self), mo);                                      \
    resize_out_like(out, mo);                                                           \
    check_inplace(out, {self});                                                         \
    copy_any(out, unary_compute(KOP, self, unary_ct(KOP, self), dev));                  \
    return out;                                                                         \
  }                                                                                     \
  Tensor& NAME##_(Tensor& self) {                                                       \
    OpScope s(OPNAME "_");                                                              \
    if (routed(OPNAME "_") || !native_ok({self})) return fallback<at::_ops::NAME##_>(self); \
    auto dev = device_of({self});                                                       \
    Tensor ms = to_meta(self);                                                          \
    at::_ops::NAME##_::call(ms);                                             \
    check_inplace(self, {});                                                            \
    copy_any(self, unary_compute(KOP, self, unary_ct(KOP, self), dev));                 \
    return self;                                                                        \
  }

ENPU_UNARY(neg, "neg", k::UnOp::Neg)
ENPU_UNARY(abs, "abs", k::UnOp::Abs)
ENPU_UNARY(exp, "exp", k::UnOp::Exp)
#undef ENPU_UNARY

Tensor relu(const Tensor& self) {
  OpScope s("relu");
  if (routed("relu") || !native_ok({self})) return fallback<at::_ops::relu>(self);
  auto dev = device_of({self});
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  Tensor meta = at::_ops::relu::call(to_meta(self));
  return finish(unary_compute(k::UnOp::Relu, self, self.scalar_type(), dev), meta, dev);
}

Tensor& relu_(Tensor& self) {
  OpScope s("relu_");
  if (routed("relu_") || !native_ok({self})) return fallback<at::_ops::relu_>(self);
  auto dev = device_of({self});
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  check_inplace(self, {});
  copy_any(self, unary_compute(k::UnOp::Relu, self, self.scalar_type(), dev));
  return self;
}

// ---- comparisons --------------------------------------------------------------------------
Tensor compare_compute(k::CmpOp op, const Tensor& a, const Tensor& b, const Tensor& meta,
                       c10::Device dev) {
  auto ct = at::result_type(a, b);
  Tensor sa = stage(a, meta.sizes(), ct, dev), sb = stage(b, meta.sizes(), ct, dev);
  Tensor r = empty_dev(meta.sizes(), at::kBool, dev);
  launch("compare", [&] {
    k::compare(op, kdt(ct), sa.data_ptr(), sb.data_ptr(), r.data_ptr<bool>(), r.numel());
  });
  return finish(r, meta, dev);
}

#define ENPU_CMP(NAME, OPNAME, KOP)                                                          \
  Tensor NAME##_Tensor(const Tensor& self, const Tensor& other) {                            \
    OpScope s(OPNAME ".Tensor");                                                             \
    if (routed(OPNAME ".Tensor") || !native_ok({self, other}))                               \
      return fallback<at::_ops::NAME##_Tensor>(self, other);                                 \
    auto dev = device_of({self, other});                                                     \
    Tensor meta = at::_ops::NAME##_Tensor::call(to_meta(self), to_meta(other));              \
    return compare_compute(KOP, self, other, meta, dev);                                     \
  }                                                                                          \
  Tensor NAME##_Scalar(const Tensor& self, const Scalar& other) {                            \
    OpScope s(OPNAME ".Scalar");                                                             \
    if (routed(OPNAME ".Scalar") || !native_ok({self}))                                      \
      return fallback<at::_ops::NAME##_Scalar>(self, other);                                 \
    auto dev = device_of({self});                                                            \
    Tensor meta = at::_ops::NAME##_Scalar::call(to_meta(self), other);                       \
    return compare_compute(KOP, self, wrap_scalar(other), meta, dev);                        \
  }

ENPU_CMP(eq, "eq", k::CmpOp::Eq)
ENPU_CMP(ne, "ne", k::CmpOp::Ne)
ENPU_CMP(lt, "lt", k::CmpOp::Lt)
ENPU_CMP(le, "le", k::CmpOp::Le)
ENPU_CMP(gt, "gt", k::CmpOp::Gt)
ENPU_CMP(ge, "ge", k::CmpOp::Ge)
#undef ENPU_CMP

// ---- masked_fill_ / where -----------------------------------------------------------------
// Fault "masked_fill_overflow" (the seed bug): for a non-contiguous self the staged result is
// written back with one raw copy whose size is an off-by-one storage span (sum of
// size[d]*stride[d] elements) starting at self's data pointer, ignoring strides.
void masked_fill_impl(const Tensor& self, const Tensor& mask, const Scalar& value) {
  TORCH_CHECK(mask.scalar_type() == at::kBool,  // CPU's check (the meta kernel lacks it)
              "masked_fill_ only supports boolean masks, but got mask with dtype ", mask.dtype());
  auto dev = device_of({self, mask});
  check_inplace(self, {mask});
  if (self.numel() == 0) return;
  alignas(16) unsigned char buf[16];
  scalar_bytes(value, self.scalar_type(), buf);
  const size_t es = self.element_size();
  Tensor m = stage(mask, self.sizes(), at::kBool, dev);
  if (self.is_contiguous()) {
    launch("masked_fill", [&] { k::masked_fill(es, self.data_ptr(), m.data_ptr<bool>(), self.numel(), buf); });
    return;
  }
  if (fault(Fault::MaskedFillOverflow)) {
    int64_t span = 0;
    for (int64_t d = 0; d < self.dim(); ++d) span += self.size(d) * self.stride(d);
    span = std::max(span, self.numel());
    Tensor tmp = empty_dev({span}, self.scalar_type(), dev);
    Tensor head = tmp.narrow(0, 0, self.numel()).view(self.sizes());
    copy_any(head, self);
    launch("masked_fill", [&] { k::masked_fill(es, tmp.data_ptr(), m.data_ptr<bool>(), self.numel(), buf); });
    enpuMemcpy(self.data_ptr(), tmp.data_ptr(), static_cast<size_t>(span) * es, enpuMemcpyDeviceToDevice);
    return;
  }
  Tensor tmp = stage(self, self.sizes(), self.scalar_type(), dev);
  launch("masked_fill", [&] { k::masked_fill(es, tmp.data_ptr(), m.data_ptr<bool>(), self.numel(), buf); });
  copy_any(self, tmp);
}

Tensor& masked_fill__Scalar(Tensor& self, const Tensor& mask, const Scalar& value) {
  OpScope s("masked_fill_.Scalar");
  if (routed("masked_fill_.Scalar") || !native_ok({self, mask}))
    return fallback<at::_ops::masked_fill__Scalar>(self, mask, value);
  Tensor ms = to_meta(self);
  at::_ops::masked_fill__Scalar::call(ms, to_meta(mask), value);
  masked_fill_impl(self, mask, value);
  return self;
}

Tensor& masked_fill__Tensor(Tensor& self, const Tensor& mask, const Tensor& value) {
  OpScope s("masked_fill_.Tensor");
  if (routed("masked_fill_.Tensor") || !native_ok({self, mask, value}))
    return fallback<at::_ops::masked_fill__Tensor>(self, mask, value);
  TORCH_CHECK(value.dim() == 0,
              "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  Tensor ms = to_meta(self);
  // A 0-dim CPU value is allowed (as on CPU and CUDA); torch's Python meta for masked_fill_
  // refuses a CPU value next to meta tensors, so its metadata goes as a 0-dim meta tensor.
  Tensor mv = at::empty({}, value.options().device(c10::kMeta));
  at::_ops::masked_fill__Tensor::call(ms, to_meta(mask), mv);
  masked_fill_impl(self, mask, value.item());
  return self;
}

Tensor where_self(const Tensor& cond, const Tensor& self, const Tensor& other) {
  OpScope s("where.self");
  if (routed("where.self") || !native_ok({cond, self, other}))
    return fallback<at::_ops::where_self>(cond, self, other);
  auto dev = device_of({cond, self, other});
  Tensor meta = at::_ops::where_self::call(to_meta(cond), to_meta(self), to_meta(other));
  auto ct = meta.scalar_type();
  Tensor c = stage(cond, meta.sizes(), at::kBool, dev);
  Tensor a = stage(self, meta.sizes(), ct, dev), b = stage(other, meta.sizes(), ct, dev);
  Tensor r = empty_dev(meta.sizes(), ct, dev);
  launch("where", [&] {
    k::where(r.element_size(), c.data_ptr<bool>(), a.data_ptr(), b.data_ptr(), r.data_ptr(), r.numel());
  });
  return finish(r, meta, dev);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  ENPU_IMPL(m, "add.Tensor", add_Tensor);
  ENPU_IMPL(m, "add_.Tensor", add__Tensor);
  ENPU_IMPL(m, "add.out", add_out);
  ENPU_IMPL(m, "sub.Tensor", sub_Tensor);
  ENPU_IMPL(m, "sub_.Tensor", sub__Tensor);
  ENPU_IMPL(m, "sub.out", sub_out);
  ENPU_IMPL(m, "mul.Tensor", mul_Tensor);
  ENPU_IMPL(m, "mul_.Tensor", mul__Tensor);
  ENPU_IMPL(m, "mul.out", mul_out);
  ENPU_IMPL(m, "div.Tensor", div_Tensor);
  ENPU_IMPL(m, "div_.Tensor", div__Tensor);
  ENPU_IMPL(m, "div.out", div_out);
  ENPU_IMPL(m, "neg", neg);
  ENPU_IMPL(m, "neg_", neg_);
  ENPU_IMPL(m, "neg.out", neg_out);
  ENPU_IMPL(m, "abs", abs);
  ENPU_IMPL(m, "abs_", abs_);
  ENPU_IMPL(m, "abs.out", abs_out);
  ENPU_IMPL(m, "exp", exp);
  ENPU_IMPL(m, "exp_", exp_);
  ENPU_IMPL(m, "exp.out", exp_out);
  ENPU_IMPL(m, "relu", relu);
  ENPU_IMPL(m, "relu_", relu_);
  ENPU_IMPL(m, "eq.Tensor", eq_Tensor);
  ENPU_IMPL(m, "eq.Scalar", eq_Scalar);
  ENPU_IMPL(m, "ne.Tensor", ne_Tensor);
  ENPU_IMPL(m, "ne.Scalar", ne_Scalar);
  ENPU_IMPL(m, "lt.Tensor", lt_Tensor);
  ENPU_IMPL(m, "lt.Scalar", lt_Scalar);
  ENPU_IMPL(m, "le.Tensor", le_Tensor);
  ENPU_IMPL(m, "le.Scalar", le_Scalar);
  ENPU_IMPL(m, "gt.Tensor", gt_Tensor);
  ENPU_IMPL(m, "gt.Scalar", gt_Scalar);
  ENPU_IMPL(m, "ge.Tensor", ge_Tensor);
  ENPU_IMPL(m, "ge.Scalar", ge_Scalar);
  ENPU_IMPL(m, "masked_fill_.Scalar", masked_fill__Scalar);
  ENPU_IMPL(m, "masked_fill_.Tensor", masked_fill__Tensor);
  ENPU_IMPL(m, "where.self", where_self);
}

}  // namespace enpu

// echo_npu kernels: elementwise binary/unary ops, comparisons, masked_fill_, where.
// Shapes, dtypes and errors come from the ops' meta functions (meta.h: C++ where torch has them,
// the same checks as CPU); inputs are staged into contiguous device buffers, the cmodel kernel
// runs, results are written back.
// The shared bodies are templates over the aten op (at::_ops::*) used for the meta call and the
// fallback; each registered overload is a small function below that names itself and holds its
// own fault branches.
#include <atomic>
#include <c10/core/Allocator.h>
#include <ATen/MemoryOverlap.h>
#include <cstring>
#include <ATen/ops/abs.h>
#include <ATen/ops/add.h>
#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
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
#include <ATen/ops/sqrt.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/where.h>

#include "../device/device.h"
#include "common.h"
#include "meta.h"
#include "ops.h"

namespace enpu::ops {
namespace {

at::ScalarType default_float() { return c10::typeMetaToScalarType(c10::get_default_dtype()); }

// Compute dtype of a binary op (true division promotes integers to the default float).
at::ScalarType binary_ct(k::BinOp op, const Tensor& a, const Tensor& b) {
  auto ct = at::result_type(a, b);
  if (op == k::BinOp::Div && at::isIntegralType(ct, /*includeBool=*/true)) ct = default_float();
  return ct;
}

bool is_cpu_scalar_operand(const Tensor& t) { return t.dim() == 0 && t.device().is_cpu(); }

// a op b computed in dtype ct over shape (broadcast), as a new contiguous device tensor.
Tensor binary_compute_as(k::BinOp op, const Tensor& a, const Tensor& b, const Scalar& alpha,
                         at::IntArrayRef shape, at::ScalarType ct, c10::Device dev) {
  double af = 1.0;
  int64_t ai = 1;
  if (at::isFloatingType(ct)) af = alpha.to<double>();
  else if (ct == at::kBool) ai = alpha.to<bool>() ? 1 : 0;
  else ai = alpha.to<int64_t>();
  unsigned quirks = 0;  // faults mul_rounds_toward_zero, add_flushes_subnormals
  if (op == k::BinOp::Mul && fault(Fault::MulRoundsTowardZero)) quirks |= k::kRoundTowardZero;
  if (op == k::BinOp::Add && fault(Fault::AddFlushesSubnormals)) quirks |= k::kFlushSubnormals;
  Tensor r = empty_dev(shape, ct, dev);
  if ((op == k::BinOp::Mul || op == k::BinOp::Div) && at::isReducedFloatingType(ct) &&
      is_cpu_scalar_operand(b) && !is_cpu_scalar_operand(a)) {
    // As CPU's mul and div kernels take a 0-dim CPU `other` with a float16/bfloat16 result: its
    // value in float (a float64 0.1 times a float16 tensor is computed in float and rounded
    // once, never rounded to float16 first). CPU's add and sub round it to the result type.
    const double s = b.item<double>();
    Tensor sa = stage(a, shape, ct, dev);
    launch("binary", dev, [op, kt = kdt(ct), ap = sa.data_ptr(), s, rp = r.data_ptr(),
                           n = r.numel(), af, quirks] {
      k::binary_scalar(op, kt, ap, s, false, rp, n, af, quirks);
    });
    return r;
  }
  Tensor sa = stage(a, shape, ct, dev), sb = stage(b, shape, ct, dev);
  launch("binary", dev, [op, kt = kdt(ct), ap = sa.data_ptr(), bp = sb.data_ptr(),
                         rp = r.data_ptr(), n = r.numel(), af, ai, quirks] {
    k::binary(op, kt, ap, bp, rp, n, af, ai, quirks);
  });
  return r;
}

Tensor binary_compute(k::BinOp op, const Tensor& a, const Tensor& b, const Scalar& alpha,
                      at::IntArrayRef shape, c10::Device dev) {
  return binary_compute_as(op, a, b, alpha, shape, binary_ct(op, a, b), dev);
}

void check_inplace(const Tensor& out, std::initializer_list<Tensor> inputs) {
  at::assert_no_internal_overlap(out);
  for (const auto& t : inputs)
    if (t.defined() && t.device() == out.device()) at::assert_no_partial_overlap(out, t);
}

// ---- binary: Alpha... is `const Scalar& alpha` for add/sub and empty for mul/div ----------
Scalar alpha_or_one() { return 1; }
Scalar alpha_or_one(const Scalar& alpha) { return alpha; }

// Functional `op.Tensor`.
template <class Functional, class... Alpha>
Tensor binary_functional(k::BinOp kop, const Tensor& self, const Tensor& other,
                         const Alpha&... alpha) {
  auto dev = device_of({self, other});
  Tensor meta = meta_call<Functional>(to_meta(self), to_meta(other), alpha...);
  return finish(binary_compute(kop, self, other, alpha_or_one(alpha...), meta.sizes(), dev), meta,
                dev);
}

// In-place `op_.Tensor`: checks like CPU and returns the contiguous result to write into self.
template <class Inplace, class... Alpha>
Tensor binary_inplace_result(k::BinOp kop, Tensor& self, const Tensor& other,
                             const Alpha&... alpha) {
  auto dev = device_of({self, other});
  Tensor ms = to_meta(self);
  meta_call<Inplace>(ms, to_meta(other), alpha...);
  check_inplace(self, {other});
  return binary_compute(kop, self, other, alpha_or_one(alpha...), self.sizes(), dev);
}

// `op.out`.
template <class Out, class... Alpha>
Tensor& binary_out(k::BinOp kop, const Tensor& self, const Tensor& other, Tensor& out,
                   const Alpha&... alpha) {
  auto dev = device_of({self, other, out});
  Tensor mo = to_meta(out);
  meta_call<Out>(to_meta(self), to_meta(other), alpha..., mo);
  resize_out_like(out, mo);
  check_inplace(out, {self, other});
  copy_any(out, binary_compute(kop, self, other, alpha_or_one(alpha...), mo.sizes(), dev));
  return out;
}

// ---- unary --------------------------------------------------------------------------------
// Fault "exp_skips_tail": from this many elements on, exp takes an 8-wide vector path.
constexpr int64_t kExpVectorMin = 1024;

Tensor unary_compute(k::UnOp op, const Tensor& self, at::ScalarType ct, c10::Device dev) {
  Tensor a = stage(self, self.sizes(), ct, dev);
  Tensor r = empty_dev(self.sizes(), ct, dev);
  unsigned quirks = 0;
  if (op == k::UnOp::Neg && fault(Fault::NegSignedZero)) quirks |= k::kZeroMinusX;
  if (op == k::UnOp::Sqrt && fault(Fault::SqrtUlp)) quirks |= k::kSqrtUlpEvery8;
  const int64_t n = r.numel();
  if (op == k::UnOp::Exp && n >= kExpVectorMin && fault(Fault::ExpSkipsTail)) {
    // The vector path runs in place over a copy of the input, 8 elements at a time, and its
    // scalar tail loop is missing: the last n % 8 elements keep the input's values.
    copy_bytes(dev, r.data_ptr(), a.data_ptr(), static_cast<size_t>(r.nbytes()));
    launch("unary", dev, [op, kt = kdt(ct), rp = r.data_ptr(), n, quirks] {
      k::unary(op, kt, rp, rp, n - n % 8, quirks);
    });
    return r;
  }
  launch("unary", dev, [op, kt = kdt(ct), ap = a.data_ptr(), rp = r.data_ptr(), n, quirks] {
    k::unary(op, kt, ap, rp, n, quirks);
  });
  return r;
}

at::ScalarType unary_ct(k::UnOp op, const Tensor& self) {
  TORCH_CHECK_NOT_IMPLEMENTED(op != k::UnOp::Abs || self.scalar_type() != at::kBool,
                              "\"abs_cpu\" not implemented for 'Bool'");
  // exp and sqrt of integers (bool included): computed in the default float dtype, as CPU
  if ((op == k::UnOp::Exp || op == k::UnOp::Sqrt) && at::isIntegralType(self.scalar_type(), true))
    return default_float();
  return self.scalar_type();
}

template <class Functional>
Tensor unary_functional(k::UnOp kop, const Tensor& self) {
  auto dev = device_of({self});
  Tensor meta = meta_call<Functional>(to_meta(self));
  return finish(unary_compute(kop, self, unary_ct(kop, self), dev), meta, dev);
}

// Fault "out_skips_last": out's last element (in logical order) keeps what it held, i.e. the
// result `r` is given that element of out before r is copied in.
void keep_last_element(const Tensor& out, const Tensor& r) {
  const int64_t n = out.numel();
  if (n == 0) return;
  int64_t last = out.storage_offset();
  for (int64_t d = 0; d < out.dim(); ++d) last += (out.size(d) - 1) * out.stride(d);
  Tensor old = out.as_strided({1}, {1}, last);
  copy_any(r.view({-1}).narrow(0, n - 1, 1), old);
}

template <class Out>
Tensor& unary_out(k::UnOp kop, const Tensor& self, Tensor& out, bool skip_last = false) {
  auto dev = device_of({self, out});
  Tensor mo = to_meta(out);
  meta_call<Out>(to_meta(self), mo);
  resize_out_like(out, mo);
  check_inplace(out, {self});
  Tensor r = unary_compute(kop, self, unary_ct(kop, self), dev);
  if (skip_last) keep_last_element(out, r);
  copy_any(out, r);
  return out;
}

template <class Inplace>
Tensor& unary_inplace(k::UnOp kop, Tensor& self) {
  auto dev = device_of({self});
  Tensor ms = to_meta(self);
  meta_call<Inplace>(ms);
  check_inplace(self, {});
  copy_any(self, unary_compute(kop, self, unary_ct(kop, self), dev));
  return self;
}

// Fault "int_not_implemented": the error of a backend that has no integer kernel for the op.
void refuse_integer(const char* kernel, const Tensor& self) {
  TORCH_CHECK_NOT_IMPLEMENTED(!at::isIntegralType(self.scalar_type(), /*includeBool=*/false), "\"",
                              kernel, "\" not implemented for '", toString(self.scalar_type()), "'");
}

// Fault "nan_to_zero": NaN elements of a contiguous device result become 0.
void zero_nans(const Tensor& r) {
  if (r.numel() == 0 || !at::isFloatingType(r.scalar_type())) return;
  launch("nan_to_zero", r.device(), [kt = kdt(r.scalar_type()), rp = r.data_ptr(), n = r.numel()] {
    k::nan_to_zero(kt, rp, n);
  });
}

// ---- comparisons --------------------------------------------------------------------------
Tensor compare_compute(k::CmpOp op, const Tensor& a, const Tensor& b, const Tensor& meta,
                       c10::Device dev) {
  auto ct = at::result_type(a, b);
  Tensor sa = stage(a, meta.sizes(), ct, dev), sb = stage(b, meta.sizes(), ct, dev);
  Tensor r = empty_dev(meta.sizes(), at::kBool, dev);
  launch("compare", dev, [op, kt = kdt(ct), ap = sa.data_ptr(), bp = sb.data_ptr(),
                          rp = r.data_ptr<bool>(), n = r.numel()] {
    k::compare(op, kt, ap, bp, rp, n);
  });
  return finish(r, meta, dev);
}

template <class Op>
Tensor compare_tensor(k::CmpOp kop, const Tensor& self, const Tensor& other) {
  auto dev = device_of({self, other});
  Tensor meta = meta_call<Op>(to_meta(self), to_meta(other));
  return compare_compute(kop, self, other, meta, dev);
}

template <class Op>
Tensor compare_scalar(k::CmpOp kop, const Tensor& self, const Scalar& other) {
  auto dev = device_of({self});
  Tensor meta = meta_call<Op>(to_meta(self), other);
  return compare_compute(kop, self, wrap_scalar(other), meta, dev);
}

// ---- masked_fill_ -------------------------------------------------------------------------
// Fault "masked_fill_overflow" (the seed bug): for a non-contiguous self the staged result is
// written back with one raw copy whose size is an off-by-one storage span (sum of
// size[d]*stride[d] elements) starting at self's data pointer, ignoring strides.
void masked_fill_impl(const Tensor& self, const Tensor& mask, const Scalar& value) {
  TORCH_CHECK(mask.scalar_type() == at::kBool,  // CPU's check (the meta kernel lacks it)
              "masked_fill_ only supports boolean masks, but got mask with dtype ", mask.dtype());
  auto dev = device_of({self, mask});
  check_inplace(self, {mask});
  if (self.numel() == 0) return;
  Bytes16 buf;
  scalar_bytes(value, self.scalar_type(), buf.b);
  const size_t es = self.element_size();
  Tensor m = stage(mask, self.sizes(), at::kBool, dev);
  auto fill = [&](const Tensor& t) {
    launch("masked_fill", dev, [es, tp = t.data_ptr(), mp = m.data_ptr<bool>(), n = self.numel(), buf] {
      k::masked_fill(es, tp, mp, n, buf.b);
    });
  };
  if (self.is_contiguous()) {
    fill(self);
    return;
  }
  if (fault(Fault::MaskedFillOverflow)) {
    int64_t span = 0;
    for (int64_t d = 0; d < self.dim(); ++d) span += self.size(d) * self.stride(d);
    span = std::max(span, self.numel());
    Tensor tmp = empty_dev({span}, self.scalar_type(), dev);
    Tensor head = tmp.narrow(0, 0, self.numel()).view(self.sizes());
    copy_any(head, self);
    fill(tmp);
    copy_bytes(dev, self.data_ptr(), tmp.data_ptr(), static_cast<size_t>(span) * es);
    return;
  }
  Tensor tmp = stage(self, self.sizes(), self.scalar_type(), dev);
  fill(tmp);
  copy_any(self, tmp);
}

}  // namespace

// ---- add / sub / mul / div ----------------------------------------------------------------
Tensor add_Tensor(const Tensor& self, const Tensor& other, const Scalar& alpha) {
  OpScope s("add.Tensor");
  if (use_fallback("add.Tensor", {self, other}))
    return fallback<at::_ops::add_Tensor>(self, other, alpha);
  if (fault(Fault::IntFloatPromotion) && at::isIntegralType(self.scalar_type(), false) &&
      at::isFloatingType(other.scalar_type())) {  // wrong promotion: keeps self's integer dtype
    auto dev = device_of({self, other});
    Tensor meta = meta_call<at::_ops::add_Tensor>(to_meta(self), to_meta(other), alpha);
    Tensor as_int = at::empty_strided(meta.sizes(), meta.strides(),
                                      meta.options().dtype(self.scalar_type()));
    return finish(binary_compute_as(k::BinOp::Add, self, other, alpha, meta.sizes(),
                                    self.scalar_type(), dev),
                  as_int, dev);
  }
  return binary_functional<at::_ops::add_Tensor>(k::BinOp::Add, self, other, alpha);
}

Tensor& add__Tensor(Tensor& self, const Tensor& other, const Scalar& alpha) {
  OpScope s("add_.Tensor");
  if (use_fallback("add_.Tensor", {self, other}))
    return fallback<at::_ops::add__Tensor>(self, other, alpha);
  Tensor r = binary_inplace_result<at::_ops::add__Tensor>(k::BinOp::Add, self, other, alpha);
  if (fault(Fault::InplaceReturnsNew)) {  // a new tensor comes back; self stays unchanged
    static thread_local Tensor holder;
    holder = finish(r, to_meta(self), self.device());
    return holder;
  }
  copy_any(self, r);
  return self;
}

Tensor& add_out(const Tensor& self, const Tensor& other, const Scalar& alpha, Tensor& out) {
  OpScope s("add.out");
  if (use_fallback("add.out", {self, other, out}))
    return fallback<at::_ops::add_out>(self, other, alpha, out);
  Tensor& r = binary_out<at::_ops::add_out>(k::BinOp::Add, self, other, out, alpha);
  if (fault(Fault::OutReturnsNewInference) && out.is_inference()) {
    static thread_local Tensor holder;  // out is written; the caller gets a copy of it
    holder = r.clone();
    return holder;
  }
  return r;
}

Tensor sub_Tensor(const Tensor& self, const Tensor& other, const Scalar& alpha) {
  OpScope s("sub.Tensor");
  if (use_fallback("sub.Tensor", {self, other}))
    return fallback<at::_ops::sub_Tensor>(self, other, alpha);
  return binary_functional<at::_ops::sub_Tensor>(k::BinOp::Sub, self, other, alpha);
}

Tensor& sub__Tensor(Tensor& self, const Tensor& other, const Scalar& alpha) {
  OpScope s("sub_.Tensor");
  if (use_fallback("sub_.Tensor", {self, other}))
    return fallback<at::_ops::sub__Tensor>(self, other, alpha);
  copy_any(self, binary_inplace_result<at::_ops::sub__Tensor>(k::BinOp::Sub, self, other, alpha));
  return self;
}

Tensor& sub_out(const Tensor& self, const Tensor& other, const Scalar& alpha, Tensor& out) {
  OpScope s("sub.out");
  if (use_fallback("sub.out", {self, other, out}))
    return fallback<at::_ops::sub_out>(self, other, alpha, out);
  return binary_out<at::_ops::sub_out>(k::BinOp::Sub, self, other, out, alpha);
}

Tensor mul_Tensor(const Tensor& self, const Tensor& other) {
  OpScope s("mul.Tensor");
  if (use_fallback("mul.Tensor", {self, other}))
    return fallback<at::_ops::mul_Tensor>(self, other);
  Tensor r = binary_functional<at::_ops::mul_Tensor>(k::BinOp::Mul, self, other);
  if (fault(Fault::Leak)) {  // one more device block, never freed
    void* p = nullptr;
    enpuMalloc(&p, static_cast<size_t>(r.nbytes()) + 64);
  }
  if (fault(Fault::AcceleratorLeak))  // a block only the c10 allocator's statistics count
    allocate_untracked(static_cast<size_t>(r.nbytes()) + 64);
  if (fault(Fault::KeepsWorkspace)) {  // once per process, never freed: a library's workspace
    static auto* workspace = new c10::DataPtr(
        c10::GetAllocator(c10::DeviceType::PrivateUse1)->allocate(64 << 10));
    (void)workspace;
  }
  return r;
}

Tensor& mul__Tensor(Tensor& self, const Tensor& other) {
  OpScope s("mul_.Tensor");
  if (use_fallback("mul_.Tensor", {self, other}))
    return fallback<at::_ops::mul__Tensor>(self, other);
  copy_any(self, binary_inplace_result<at::_ops::mul__Tensor>(k::BinOp::Mul, self, other));
  return self;
}

Tensor& mul_out(const Tensor& self, const Tensor& other, Tensor& out) {
  OpScope s("mul.out");
  if (use_fallback("mul.out", {self, other, out}))
    return fallback<at::_ops::mul_out>(self, other, out);
  return binary_out<at::_ops::mul_out>(k::BinOp::Mul, self, other, out);
}

Tensor div_Tensor(const Tensor& self, const Tensor& other) {
  OpScope s("div.Tensor");
  if (use_fallback("div.Tensor", {self, other}))
    return fallback<at::_ops::div_Tensor>(self, other);
  return binary_functional<at::_ops::div_Tensor>(k::BinOp::Div, self, other);
}

Tensor& div__Tensor(Tensor& self, const Tensor& other) {
  OpScope s("div_.Tensor");
  if (use_fallback("div_.Tensor", {self, other}))
    return fallback<at::_ops::div__Tensor>(self, other);
  if (fault(Fault::IntNotImplemented)) refuse_integer("div_npu", self);
  copy_any(self, binary_inplace_result<at::_ops::div__Tensor>(k::BinOp::Div, self, other));
  return self;
}

Tensor& div_out(const Tensor& self, const Tensor& other, Tensor& out) {
  OpScope s("div.out");
  if (use_fallback("div.out", {self, other, out}))
    return fallback<at::_ops::div_out>(self, other, out);
  return binary_out<at::_ops::div_out>(k::BinOp::Div, self, other, out);
}

// ---- neg / abs / exp / sqrt / relu --------------------------------------------------------
// neg_aborts_after_abs: the state abs leaves (a workspace flag, not a corruption)
std::atomic<bool> g_abs_ran{false};

Tensor neg(const Tensor& self) {
  OpScope s("neg");
  if (fault(Fault::NegAbortsAfterAbs) && g_abs_ran.load()) std::abort();
  if (use_fallback("neg", {self})) return fallback<at::_ops::neg>(self);
  if (fault(Fault::NegWarns)) TORCH_WARN("echo_npu: neg ran on the slow path (fault neg_warns)");
  Tensor r = unary_functional<at::_ops::neg>(k::UnOp::Neg, self);
  if (fault(Fault::NegWritesPast) && r.numel() > 0) {
    // correct values, then 32 bytes written past the output block, over the start of the
    // next malloc chunk (its size field left alone: this block's own free does not notice).
    // When that chunk is free, its tcache link is now garbage and a later malloc, usually in
    // another case, aborts ("malloc(): unaligned tcache chunk detected").
    const size_t n = r.storage().nbytes();
    const size_t usable = std::max<size_t>(32, (n + 8 + 15) / 16 * 16) - 8;
    auto* base = static_cast<unsigned char*>(r.storage().mutable_data());
    std::memset(base + usable + 8, 0x5A, 32);
  }
  return r;
}

Tensor& neg_(Tensor& self) {
  OpScope s("neg_");
  if (use_fallback("neg_", {self})) return fallback<at::_ops::neg_>(self);
  return unary_inplace<at::_ops::neg_>(k::UnOp::Neg, self);
}

Tensor& neg_out(const Tensor& self, Tensor& out) {
  OpScope s("neg.out");
  if (use_fallback("neg.out", {self, out})) return fallback<at::_ops::neg_out>(self, out);
  return unary_out<at::_ops::neg_out>(k::UnOp::Neg, self, out);
}

Tensor abs(const Tensor& self) {
  OpScope s("abs");
  if (fault(Fault::NegAbortsAfterAbs)) g_abs_ran.store(true);
  if (use_fallback("abs", {self})) return fallback<at::_ops::abs>(self);
  return unary_functional<at::_ops::abs>(k::UnOp::Abs, self);
}

Tensor& abs_(Tensor& self) {
  OpScope s("abs_");
  if (use_fallback("abs_", {self})) return fallback<at::_ops::abs_>(self);
  return unary_inplace<at::_ops::abs_>(k::UnOp::Abs, self);
}

Tensor& abs_out(const Tensor& self, Tensor& out) {
  OpScope s("abs.out");
  if (use_fallback("abs.out", {self, out})) return fallback<at::_ops::abs_out>(self, out);
  return unary_out<at::_ops::abs_out>(k::UnOp::Abs, self, out, fault(Fault::OutSkipsLast));
}

Tensor exp(const Tensor& self) {
  OpScope s("exp");
  if (use_fallback("exp", {self})) return fallback<at::_ops::exp>(self);
  if (fault(Fault::IntNotImplemented)) refuse_integer("exp_npu", self);
  return unary_functional<at::_ops::exp>(k::UnOp::Exp, self);
}

Tensor& exp_(Tensor& self) {
  OpScope s("exp_");
  if (use_fallback("exp_", {self})) return fallback<at::_ops::exp_>(self);
  if (fault(Fault::IntNotImplemented)) refuse_integer("exp_npu", self);
  return unary_inplace<at::_ops::exp_>(k::UnOp::Exp, self);
}

Tensor& exp_out(const Tensor& self, Tensor& out) {
  OpScope s("exp.out");
  if (use_fallback("exp.out", {self, out})) return fallback<at::_ops::exp_out>(self, out);
  if (fault(Fault::IntNotImplemented)) refuse_integer("exp_npu", self);
  return unary_out<at::_ops::exp_out>(k::UnOp::Exp, self, out);
}

Tensor sqrt(const Tensor& self) {
  OpScope s("sqrt");
  if (use_fallback("sqrt", {self})) return fallback<at::_ops::sqrt>(self);
  return unary_functional<at::_ops::sqrt>(k::UnOp::Sqrt, self);
}

Tensor& sqrt_(Tensor& self) {
  OpScope s("sqrt_");
  if (use_fallback("sqrt_", {self})) return fallback<at::_ops::sqrt_>(self);
  return unary_inplace<at::_ops::sqrt_>(k::UnOp::Sqrt, self);
}

Tensor& sqrt_out(const Tensor& self, Tensor& out) {
  OpScope s("sqrt.out");
  if (use_fallback("sqrt.out", {self, out})) return fallback<at::_ops::sqrt_out>(self, out);
  return unary_out<at::_ops::sqrt_out>(k::UnOp::Sqrt, self, out);
}

Tensor relu(const Tensor& self) {
  OpScope s("relu");
  if (use_fallback("relu", {self})) return fallback<at::_ops::relu>(self);
  auto dev = device_of({self});
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  Tensor meta = meta_call<at::_ops::relu>(to_meta(self));
  Tensor r = unary_compute(k::UnOp::Relu, self, self.scalar_type(), dev);
  if (fault(Fault::NanToZero)) zero_nans(r);
  return finish(r, meta, dev);
}

Tensor& relu_(Tensor& self) {
  OpScope s("relu_");
  if (use_fallback("relu_", {self})) return fallback<at::_ops::relu_>(self);
  auto dev = device_of({self});
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  check_inplace(self, {});
  Tensor r = unary_compute(k::UnOp::Relu, self, self.scalar_type(), dev);
  if (fault(Fault::NanToZero)) zero_nans(r);
  copy_any(self, r);
  return self;
}

// ---- comparisons --------------------------------------------------------------------------
Tensor eq_Tensor(const Tensor& self, const Tensor& other) {
  OpScope s("eq.Tensor");
  if (use_fallback("eq.Tensor", {self, other})) return fallback<at::_ops::eq_Tensor>(self, other);
  return compare_tensor<at::_ops::eq_Tensor>(k::CmpOp::Eq, self, other);
}

Tensor eq_Scalar(const Tensor& self, const Scalar& other) {
  OpScope s("eq.Scalar");
  if (use_fallback("eq.Scalar", {self})) return fallback<at::_ops::eq_Scalar>(self, other);
  return compare_scalar<at::_ops::eq_Scalar>(k::CmpOp::Eq, self, other);
}

Tensor ne_Tensor(const Tensor& self, const Tensor& other) {
  OpScope s("ne.Tensor");
  if (use_fallback("ne.Tensor", {self, other})) return fallback<at::_ops::ne_Tensor>(self, other);
  return compare_tensor<at::_ops::ne_Tensor>(k::CmpOp::Ne, self, other);
}

Tensor ne_Scalar(const Tensor& self, const Scalar& other) {
  OpScope s("ne.Scalar");
  if (use_fallback("ne.Scalar", {self})) return fallback<at::_ops::ne_Scalar>(self, other);
  return compare_scalar<at::_ops::ne_Scalar>(k::CmpOp::Ne, self, other);
}

Tensor lt_Tensor(const Tensor& self, const Tensor& other) {
  OpScope s("lt.Tensor");
  if (use_fallback("lt.Tensor", {self, other})) return fallback<at::_ops::lt_Tensor>(self, other);
  return compare_tensor<at::_ops::lt_Tensor>(k::CmpOp::Lt, self, other);
}

Tensor lt_Scalar(const Tensor& self, const Scalar& other) {
  OpScope s("lt.Scalar");
  if (use_fallback("lt.Scalar", {self})) return fallback<at::_ops::lt_Scalar>(self, other);
  return compare_scalar<at::_ops::lt_Scalar>(k::CmpOp::Lt, self, other);
}

Tensor le_Tensor(const Tensor& self, const Tensor& other) {
  OpScope s("le.Tensor");
  if (use_fallback("le.Tensor", {self, other})) return fallback<at::_ops::le_Tensor>(self, other);
  return compare_tensor<at::_ops::le_Tensor>(k::CmpOp::Le, self, other);
}

Tensor le_Scalar(const Tensor& self, const Scalar& other) {
  OpScope s("le.Scalar");
  if (use_fallback("le.Scalar", {self})) return fallback<at::_ops::le_Scalar>(self, other);
  return compare_scalar<at::_ops::le_Scalar>(k::CmpOp::Le, self, other);
}

Tensor gt_Tensor(const Tensor& self, const Tensor& other) {
  OpScope s("gt.Tensor");
  if (use_fallback("gt.Tensor", {self, other})) return fallback<at::_ops::gt_Tensor>(self, other);
  return compare_tensor<at::_ops::gt_Tensor>(k::CmpOp::Gt, self, other);
}

Tensor gt_Scalar(const Tensor& self, const Scalar& other) {
  OpScope s("gt.Scalar");
  if (use_fallback("gt.Scalar", {self})) return fallback<at::_ops::gt_Scalar>(self, other);
  return compare_scalar<at::_ops::gt_Scalar>(k::CmpOp::Gt, self, other);
}

Tensor ge_Tensor(const Tensor& self, const Tensor& other) {
  OpScope s("ge.Tensor");
  if (use_fallback("ge.Tensor", {self, other})) return fallback<at::_ops::ge_Tensor>(self, other);
  return compare_tensor<at::_ops::ge_Tensor>(k::CmpOp::Ge, self, other);
}

Tensor ge_Scalar(const Tensor& self, const Scalar& other) {
  OpScope s("ge.Scalar");
  if (use_fallback("ge.Scalar", {self})) return fallback<at::_ops::ge_Scalar>(self, other);
  return compare_scalar<at::_ops::ge_Scalar>(k::CmpOp::Ge, self, other);
}

// ---- masked_fill_ / where -----------------------------------------------------------------
Tensor& masked_fill__Scalar(Tensor& self, const Tensor& mask, const Scalar& value) {
  OpScope s("masked_fill_.Scalar");
  if (use_fallback("masked_fill_.Scalar", {self, mask}))
    return fallback<at::_ops::masked_fill__Scalar>(self, mask, value);
  Tensor ms = to_meta(self);
  meta_call<at::_ops::masked_fill__Scalar>(ms, to_meta(mask), value);
  masked_fill_impl(self, mask, value);
  return self;
}

Tensor& masked_fill__Tensor(Tensor& self, const Tensor& mask, const Tensor& value) {
  OpScope s("masked_fill_.Tensor");
  if (use_fallback("masked_fill_.Tensor", {self, mask, value}))
    return fallback<at::_ops::masked_fill__Tensor>(self, mask, value);
  TORCH_CHECK(value.dim() == 0,
              "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  Tensor ms = to_meta(self);
  meta_call<at::_ops::masked_fill__Tensor>(ms, to_meta(mask), value);
  masked_fill_impl(self, mask, value.item());
  return self;
}

Tensor where_self(const Tensor& cond, const Tensor& self, const Tensor& other) {
  OpScope s("where.self");
  if (use_fallback("where.self", {cond, self, other}))
    return fallback<at::_ops::where_self>(cond, self, other);
  auto dev = device_of({cond, self, other});
  Tensor meta = meta_call<at::_ops::where_self>(to_meta(cond), to_meta(self), to_meta(other));
  auto ct = meta.scalar_type();
  Tensor c = stage(cond, meta.sizes(), at::kBool, dev);
  Tensor a = stage(self, meta.sizes(), ct, dev), b = stage(other, meta.sizes(), ct, dev);
  Tensor r = empty_dev(meta.sizes(), ct, dev);
  launch("where", dev, [es = r.element_size(), cp = c.data_ptr<bool>(), ap = a.data_ptr(),
                        bp = b.data_ptr(), rp = r.data_ptr(), n = r.numel()] {
    k::where(es, cp, ap, bp, rp, n);
  });
  if (fault(Fault::NanToZero)) zero_nans(r);
  return finish(r, meta, dev);
}

}  // namespace enpu::ops

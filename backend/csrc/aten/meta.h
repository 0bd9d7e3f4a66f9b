// echo_npu's shape, dtype and argument checks: `meta_call<at::_ops::X>(meta tensors...)` calls the
// op's C++ meta function (at::meta::*, the structured meta() its CPU kernel runs too) where torch
// has one, else the op's Meta kernel through the dispatcher.
//
// Why not always the dispatcher: torch registers Python meta kernels over most C++ ones
// (torch/_meta_registrations.py). A Python one costs tens of microseconds and the GIL on every
// call, and those built on torch._refs import torch._dynamo (about 1.5 s) on their first use,
// inside whichever op ran first. A backend's kernels should not pay that; a C++ backend built on
// structured kernels does not.
#pragma once
#include <type_traits>
#include <utility>

#include <ATen/core/Tensor.h>
#include <ATen/ops/abs_ops.h>
#include <ATen/ops/masked_fill_ops.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/where_ops.h>
// The at::meta functions of the structured ops below.
#include <ATen/ops/add_meta_dispatch.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/sub_meta_dispatch.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/mul_meta_dispatch.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/div_meta_dispatch.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/neg_meta_dispatch.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/exp_meta_dispatch.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/sqrt_meta_dispatch.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/eq_meta_dispatch.h>
#include <ATen/ops/eq_ops.h>
#include <ATen/ops/ne_meta_dispatch.h>
#include <ATen/ops/ne_ops.h>
#include <ATen/ops/lt_meta_dispatch.h>
#include <ATen/ops/lt_ops.h>
#include <ATen/ops/le_meta_dispatch.h>
#include <ATen/ops/le_ops.h>
#include <ATen/ops/gt_meta_dispatch.h>
#include <ATen/ops/gt_ops.h>
#include <ATen/ops/ge_meta_dispatch.h>
#include <ATen/ops/ge_ops.h>
#include <ATen/ops/sum_meta_dispatch.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/mean_meta_dispatch.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/amax_meta_dispatch.h>
#include <ATen/ops/amax_ops.h>
#include <ATen/ops/all_meta_dispatch.h>
#include <ATen/ops/all_ops.h>
#include <ATen/ops/any_meta_dispatch.h>
#include <ATen/ops/any_ops.h>
#include <ATen/ops/cumsum_meta_dispatch.h>
#include <ATen/ops/cumsum_ops.h>
#include <ATen/ops/_softmax_meta_dispatch.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/tril_meta_dispatch.h>
#include <ATen/ops/tril_ops.h>
#include <ATen/ops/triu_meta_dispatch.h>
#include <ATen/ops/triu_ops.h>
#include <ATen/ops/cat_meta_dispatch.h>
#include <ATen/ops/cat_ops.h>

// An op whose at::meta function is FN (the `_outf` form takes the arguments in at::_ops order: out
// last).
#define ENPU_CPP_META(OP, FN)                                                   \
  template <>                                                                   \
  struct CppMeta<at::_ops::OP> : std::true_type {                               \
    template <class... A>                                                       \
    static decltype(auto) call(A&&... a) {                                      \
      return at::meta::FN(std::forward<A>(a)...);                               \
    }                                                                           \
  };

namespace enpu::ops {

template <class Op>
struct CppMeta : std::false_type {};

// The op's checks and output metadata on meta tensors (see the file comment).
template <class Op, class... A>
decltype(auto) meta_call(A&&... a) {
  if constexpr (CppMeta<Op>::value)
    return CppMeta<Op>::call(std::forward<A>(a)...);
  else
    return Op::call(std::forward<A>(a)...);
}

// The ops torch has no C++ meta function for: CPU's TensorIterator configuration on meta tensors.
// An elementwise unary op's output (abs, relu); its out= form (resizes out).
at::Tensor unary_meta(const at::Tensor& self);
void unary_meta_out(const at::Tensor& self, at::Tensor& out);
// CPU's check of an in-place op that `other` broadcasts to self's shape (masked_fill_).
void check_broadcasts_into(const at::Tensor& self, const at::Tensor& other);
// where.self's output and checks, as CPU's where.
at::Tensor where_meta(const at::Tensor& cond, const at::Tensor& self, const at::Tensor& other);

template <>
struct CppMeta<at::_ops::abs> : std::true_type {
  static at::Tensor call(const at::Tensor& self) { return unary_meta(self); }
};
template <>
struct CppMeta<at::_ops::abs_> : std::true_type {
  static at::Tensor& call(at::Tensor& self) {
    unary_meta_out(self, self);
    return self;
  }
};
template <>
struct CppMeta<at::_ops::abs_out> : std::true_type {
  static at::Tensor& call(const at::Tensor& self, at::Tensor& out) {
    unary_meta_out(self, out);
    return out;
  }
};
template <>
struct CppMeta<at::_ops::relu> : std::true_type {  // CPU's relu is clamp_min(self, 0)
  static at::Tensor call(const at::Tensor& self) { return unary_meta(self); }
};
template <>
struct CppMeta<at::_ops::masked_fill__Scalar> : std::true_type {
  static at::Tensor& call(at::Tensor& self, const at::Tensor& mask, const at::Scalar&) {
    check_broadcasts_into(self, mask);
    return self;
  }
};
template <>
struct CppMeta<at::_ops::masked_fill__Tensor> : std::true_type {
  static at::Tensor& call(at::Tensor& self, const at::Tensor& mask, const at::Tensor&) {
    check_broadcasts_into(self, mask);
    return self;
  }
};
template <>
struct CppMeta<at::_ops::where_self> : std::true_type {
  static at::Tensor call(const at::Tensor& cond, const at::Tensor& self, const at::Tensor& other) {
    return where_meta(cond, self, other);
  }
};

}  // namespace enpu::ops

// The ops echo_npu registers that have C++ meta functions (structured kernels: every
// torch in the matrix ships their at::meta declarations; index_select has none: it goes through
// the dispatcher).
namespace enpu::ops {
ENPU_CPP_META(add_Tensor, add)
ENPU_CPP_META(add__Tensor, add_)
ENPU_CPP_META(add_out, add_outf)
ENPU_CPP_META(sub_Tensor, sub)
ENPU_CPP_META(sub__Tensor, sub_)
ENPU_CPP_META(sub_out, sub_outf)
ENPU_CPP_META(mul_Tensor, mul)
ENPU_CPP_META(mul__Tensor, mul_)
ENPU_CPP_META(mul_out, mul_outf)
ENPU_CPP_META(div_Tensor, div)
ENPU_CPP_META(div__Tensor, div_)
ENPU_CPP_META(div_out, div_outf)
ENPU_CPP_META(neg, neg)
ENPU_CPP_META(neg_, neg_)
ENPU_CPP_META(neg_out, neg_outf)
ENPU_CPP_META(exp, exp)
ENPU_CPP_META(exp_, exp_)
ENPU_CPP_META(exp_out, exp_outf)
ENPU_CPP_META(sqrt, sqrt)
ENPU_CPP_META(sqrt_, sqrt_)
ENPU_CPP_META(sqrt_out, sqrt_outf)
ENPU_CPP_META(eq_Tensor, eq)
ENPU_CPP_META(eq_Scalar, eq)
ENPU_CPP_META(ne_Tensor, ne)
ENPU_CPP_META(ne_Scalar, ne)
ENPU_CPP_META(lt_Tensor, lt)
ENPU_CPP_META(lt_Scalar, lt)
ENPU_CPP_META(le_Tensor, le)
ENPU_CPP_META(le_Scalar, le)
ENPU_CPP_META(gt_Tensor, gt)
ENPU_CPP_META(gt_Scalar, gt)
ENPU_CPP_META(ge_Tensor, ge)
ENPU_CPP_META(ge_Scalar, ge)
ENPU_CPP_META(sum_dim_IntList, sum)
ENPU_CPP_META(mean_dim, mean)
ENPU_CPP_META(amax, amax)
ENPU_CPP_META(all, all)
ENPU_CPP_META(all_dim, all)
ENPU_CPP_META(any, any)
ENPU_CPP_META(any_dim, any)
ENPU_CPP_META(cumsum, cumsum)
ENPU_CPP_META(cumsum_, cumsum_)
ENPU_CPP_META(cumsum_out, cumsum_outf)
ENPU_CPP_META(_softmax, _softmax)
ENPU_CPP_META(tril, tril)
ENPU_CPP_META(triu, triu)
ENPU_CPP_META(cat, cat)
}  // namespace enpu::ops

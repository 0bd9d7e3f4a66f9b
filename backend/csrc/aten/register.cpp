// echo_npu registration table: every aten overload echo_npu implements for PrivateUse1 and the
// C++ function that serves it (bodies in ops.h's files). One line per overload, so
// `grep '"add.Tensor"'` finds the registration and `grep add_Tensor` its kernel. Registered at
// run time by register_kernels() (called from the Python package), not by static initialisers.
//
// ENPU_KERNEL: a native kernel that set_fallback_routes may route through cpu_fallback.
// ENPU_PRIMITIVE: one cpu_fallback itself needs (empty*, views, _copy_from*, ...): not routable.
#include <torch/library.h>

#include <algorithm>
#include <mutex>

#include "common.h"
#include "ops.h"
#include "registry.h"

#define ENPU_KERNEL(m, name, fn)           \
  do {                                     \
    if (!::enpu::wanted(name)) break;      \
    ::enpu::register_native(name, true);   \
    m.impl(name, TORCH_FN(fn));            \
  } while (0)
#define ENPU_PRIMITIVE(m, name, fn)        \
  do {                                     \
    if (!::enpu::wanted(name)) break;      \
    ::enpu::register_native(name, false);  \
    m.impl(name, TORCH_FN(fn));            \
  } while (0)

namespace enpu {
namespace {

// The subset register_kernels was asked for (empty: the whole table).
std::vector<std::string>& only_kernels() {
  static std::vector<std::string> names;
  return names;
}

bool wanted(const char* name) {
  const auto& only = only_kernels();
  return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
}

void aten_kernels(torch::Library& m) {
  // factories, views, copies, scalar reads (factories.cpp)
  ENPU_PRIMITIVE(m, "empty.memory_format", ops::empty_memory_format);
  ENPU_PRIMITIVE(m, "empty_strided", ops::empty_strided);
  ENPU_PRIMITIVE(m, "as_strided", ops::as_strided);
  ENPU_PRIMITIVE(m, "view", ops::view);
  ENPU_PRIMITIVE(m, "view_as_real", ops::view_as_real);
  ENPU_PRIMITIVE(m, "view_as_complex", ops::view_as_complex);
#ifdef ENPU_HAS_RESHAPE_ALIAS
  ENPU_PRIMITIVE(m, "_reshape_alias", ops::_reshape_alias);
#endif
  ENPU_PRIMITIVE(m, "resize_", ops::resize_);
  ENPU_PRIMITIVE(m, "set_.source_Storage", ops::set__source_Storage);
  ENPU_PRIMITIVE(m, "set_.source_Storage_storage_offset", ops::set__source_Storage_storage_offset);
  ENPU_PRIMITIVE(m, "set_.source_Tensor", ops::set__source_Tensor);
  ENPU_PRIMITIVE(m, "_copy_from", ops::_copy_from);
  ENPU_PRIMITIVE(m, "_copy_from_and_resize", ops::_copy_from_and_resize);
  ENPU_PRIMITIVE(m, "_local_scalar_dense", ops::_local_scalar_dense);
  ENPU_PRIMITIVE(m, "record_stream", ops::record_stream);
  // fill (factories.cpp)
  ENPU_KERNEL(m, "fill_.Scalar", ops::fill__Scalar);
  ENPU_KERNEL(m, "fill_.Tensor", ops::fill__Tensor);
  ENPU_KERNEL(m, "zero_", ops::zero_);
  // binary arithmetic (elementwise.cpp)
  ENPU_KERNEL(m, "add.Tensor", ops::add_Tensor);
  ENPU_KERNEL(m, "add_.Tensor", ops::add__Tensor);
  ENPU_KERNEL(m, "add.out", ops::add_out);
  ENPU_KERNEL(m, "sub.Tensor", ops::sub_Tensor);
  ENPU_KERNEL(m, "sub_.Tensor", ops::sub__Tensor);
  ENPU_KERNEL(m, "sub.out", ops::sub_out);
  ENPU_KERNEL(m, "mul.Tensor", ops::mul_Tensor);
  ENPU_KERNEL(m, "mul_.Tensor", ops::mul__Tensor);
  ENPU_KERNEL(m, "mul.out", ops::mul_out);
  ENPU_KERNEL(m, "div.Tensor", ops::div_Tensor);
  ENPU_KERNEL(m, "div_.Tensor", ops::div__Tensor);
  ENPU_KERNEL(m, "div.out", ops::div_out);
  // unary (elementwise.cpp)
  ENPU_KERNEL(m, "neg", ops::neg);
  ENPU_KERNEL(m, "neg_", ops::neg_);
  ENPU_KERNEL(m, "neg.out", ops::neg_out);
  ENPU_KERNEL(m, "abs", ops::abs);
  ENPU_KERNEL(m, "abs_", ops::abs_);
  ENPU_KERNEL(m, "abs.out", ops::abs_out);
  ENPU_KERNEL(m, "exp", ops::exp);
  ENPU_KERNEL(m, "exp_", ops::exp_);
  ENPU_KERNEL(m, "exp.out", ops::exp_out);
  ENPU_KERNEL(m, "sqrt", ops::sqrt);
  ENPU_KERNEL(m, "sqrt_", ops::sqrt_);
  ENPU_KERNEL(m, "sqrt.out", ops::sqrt_out);
  ENPU_KERNEL(m, "relu", ops::relu);
  ENPU_KERNEL(m, "relu_", ops::relu_);
  // comparisons (elementwise.cpp)
  ENPU_KERNEL(m, "eq.Tensor", ops::eq_Tensor);
  ENPU_KERNEL(m, "eq.Scalar", ops::eq_Scalar);
  ENPU_KERNEL(m, "ne.Tensor", ops::ne_Tensor);
  ENPU_KERNEL(m, "ne.Scalar", ops::ne_Scalar);
  ENPU_KERNEL(m, "lt.Tensor", ops::lt_Tensor);
  ENPU_KERNEL(m, "lt.Scalar", ops::lt_Scalar);
  ENPU_KERNEL(m, "le.Tensor", ops::le_Tensor);
  ENPU_KERNEL(m, "le.Scalar", ops::le_Scalar);
  ENPU_KERNEL(m, "gt.Tensor", ops::gt_Tensor);
  ENPU_KERNEL(m, "gt.Scalar", ops::gt_Scalar);
  ENPU_KERNEL(m, "ge.Tensor", ops::ge_Tensor);
  ENPU_KERNEL(m, "ge.Scalar", ops::ge_Scalar);
  // masked_fill_ / where (elementwise.cpp)
  ENPU_KERNEL(m, "masked_fill_.Scalar", ops::masked_fill__Scalar);
  ENPU_KERNEL(m, "masked_fill_.Tensor", ops::masked_fill__Tensor);
  ENPU_KERNEL(m, "where.self", ops::where_self);
  // reductions, softmax, cumsum (reduce.cpp)
  ENPU_KERNEL(m, "sum.dim_IntList", ops::sum_dim_IntList);
  ENPU_KERNEL(m, "mean.dim", ops::mean_dim);
  ENPU_KERNEL(m, "amax", ops::amax);
  ENPU_KERNEL(m, "all", ops::all);
  ENPU_KERNEL(m, "any", ops::any);
  ENPU_KERNEL(m, "all.dim", ops::all_dim);
  ENPU_KERNEL(m, "any.dim", ops::any_dim);
  ENPU_KERNEL(m, "_softmax", ops::_softmax);
  ENPU_KERNEL(m, "cumsum", ops::cumsum);
  ENPU_KERNEL(m, "cumsum_", ops::cumsum_);
  ENPU_KERNEL(m, "cumsum.out", ops::cumsum_out);
  // shape ops, convolution (shape.cpp)
  ENPU_KERNEL(m, "mm", ops::mm);
  ENPU_KERNEL(m, "tril", ops::tril);
  ENPU_KERNEL(m, "triu", ops::triu);
  ENPU_KERNEL(m, "cat", ops::cat);
  ENPU_KERNEL(m, "index_select", ops::index_select);
  ENPU_PRIMITIVE(m, "convolution_overrideable", ops::convolution_overrideable);
  ENPU_PRIMITIVE(m, "convolution_backward_overrideable", ops::convolution_backward_overrideable);
  // fused RNN cells: LSTM and GRU on the device (rnn.cpp; CPU has none: not routable)
  ENPU_PRIMITIVE(m, "_thnn_fused_lstm_cell", ops::_thnn_fused_lstm_cell);
  ENPU_PRIMITIVE(m, "_thnn_fused_lstm_cell_backward_impl", ops::_thnn_fused_lstm_cell_backward_impl);
  ENPU_PRIMITIVE(m, "_thnn_fused_gru_cell", ops::_thnn_fused_gru_cell);
  ENPU_PRIMITIVE(m, "_thnn_fused_gru_cell_backward", ops::_thnn_fused_gru_cell_backward);
  // random draws from the device's generators (random.cpp)
  ENPU_KERNEL(m, "uniform_", ops::uniform_);
  ENPU_KERNEL(m, "normal_", ops::normal_);
  ENPU_KERNEL(m, "random_", ops::random_);
  ENPU_KERNEL(m, "random_.from", ops::random__from);
  ENPU_KERNEL(m, "random_.to", ops::random__to);
  // optimizers: torch.optim's foreach and fused paths (optim.cpp)
  ENPU_KERNEL(m, "_foreach_mul_.Scalar", ops::_foreach_mul__Scalar);
  ENPU_KERNEL(m, "_fused_sgd_", ops::_fused_sgd_);
}

// _copy_from handles conj/neg bits itself: let it through the Conjugate/Negative fallbacks
// (otherwise conj materialization -> clone -> copy_ -> _copy_from recurses forever).
void copy_fallthrough(torch::Library& m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

// Libraries live for the whole process (destroying one would deregister its kernels).
torch::Library& library(const char* ns, c10::DispatchKey key) {
  return *new torch::Library(torch::Library::IMPL, ns, key, __FILE__, __LINE__);
}

}  // namespace

// Called by the Python package after the device is registered (not a static initialiser, so a
// failed import registers nothing and ECHO_NPU_NO_FALLBACK can leave the fallback out).
void register_kernels(bool with_fallback, const std::vector<std::string>& only) {
  static std::once_flag once;
  std::call_once(once, [with_fallback, &only] {
    only_kernels() = only;
    aten_kernels(library("aten", c10::DispatchKey::PrivateUse1));
    copy_fallthrough(library("aten", c10::DispatchKey::Conjugate));
    copy_fallthrough(library("aten", c10::DispatchKey::Negative));
    if (!only.empty()) {  // a subset: the rest of the backend is registered elsewhere
      if (with_fallback)
        library("_", c10::DispatchKey::PrivateUse1)
            .fallback(torch::CppFunction::makeFromBoxedFunction<&fallback_boxed>());
      return;
    }
    // torch.autocast(device_type="npu"): everything falls through but the policies of autocast.cpp
    library("_", c10::DispatchKey::AutocastPrivateUse1).fallback(torch::CppFunction::makeFallthrough());
    ops::autocast_kernels(library("aten", c10::DispatchKey::AutocastPrivateUse1));
    ops::autograd_kernels(library("aten", c10::DispatchKey::AutogradPrivateUse1));
    if (with_fallback)  // everything else: the boxed cpu_fallback (common.cpp)
      library("_", c10::DispatchKey::PrivateUse1)
          .fallback(torch::CppFunction::makeFromBoxedFunction<&fallback_boxed>());
  });
}

}  // namespace enpu

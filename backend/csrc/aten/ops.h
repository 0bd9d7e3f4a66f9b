// echo_npu ATen kernels: one C++ function per registered aten overload (bodies in
// elementwise.cpp, factories.cpp, reduce.cpp, shape.cpp; the table is in register.cpp).
// Names follow the overload: add.Tensor -> add_Tensor, add_.Tensor -> add__Tensor.
#pragma once
#include <ATen/core/ATen_fwd.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>

// aten::_reshape_alias exists in torch 2.5 .. 2.x (removed later): kernel only where it exists.
#if __has_include(<ATen/ops/_reshape_alias_native.h>)
#define ENPU_HAS_RESHAPE_ALIAS 1
#endif

namespace enpu::ops {

using at::Scalar;
using at::Tensor;

// ---- factories, views, copies, fill (factories.cpp) --------------------------------------
Tensor empty_memory_format(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                           std::optional<at::Layout> layout, std::optional<at::Device> device,
                           std::optional<bool> pin, std::optional<at::MemoryFormat> mf);
Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride,
                     std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                     std::optional<at::Device> device, std::optional<bool> pin);
Tensor as_strided(const Tensor& self, at::IntArrayRef size, at::IntArrayRef stride,
                  std::optional<int64_t> offset);
Tensor view(const Tensor& self, at::IntArrayRef size);
Tensor view_as_real(const Tensor& self);
Tensor view_as_complex(const Tensor& self);
#ifdef ENPU_HAS_RESHAPE_ALIAS
Tensor _reshape_alias(const Tensor& self, at::IntArrayRef size, at::IntArrayRef stride);
#endif
const Tensor& resize_(const Tensor& self, at::IntArrayRef size, std::optional<at::MemoryFormat> mf);
Tensor& set__source_Storage(Tensor& self, at::Storage src);
Tensor& set__source_Storage_storage_offset(Tensor& self, at::Storage src, int64_t offset,
                                           at::IntArrayRef size, at::IntArrayRef stride);
Tensor& set__source_Tensor(Tensor& self, const Tensor& src);
Tensor _copy_from(const Tensor& self, const Tensor& dst, bool non_blocking);
Tensor _copy_from_and_resize(const Tensor& self, const Tensor& dst);
Scalar _local_scalar_dense(const Tensor& self);
void record_stream(Tensor& self, at::Stream s);
Tensor& fill__Scalar(Tensor& self, const Scalar& value);
Tensor& fill__Tensor(Tensor& self, const Tensor& value);
Tensor& zero_(Tensor& self);

// ---- elementwise (elementwise.cpp) --------------------------------------------------------
Tensor add_Tensor(const Tensor& self, const Tensor& other, const Scalar& alpha);
Tensor& add__Tensor(Tensor& self, const Tensor& other, const Scalar& alpha);
Tensor& add_out(const Tensor& self, const Tensor& other, const Scalar& alpha, Tensor& out);
Tensor sub_Tensor(const Tensor& self, const Tensor& other, const Scalar& alpha);
Tensor& sub__Tensor(Tensor& self, const Tensor& other, const Scalar& alpha);
Tensor& sub_out(const Tensor& self, const Tensor& other, const Scalar& alpha, Tensor& out);
Tensor mul_Tensor(const Tensor& self, const Tensor& other);
Tensor& mul__Tensor(Tensor& self, const Tensor& other);
Tensor& mul_out(const Tensor& self, const Tensor& other, Tensor& out);
Tensor div_Tensor(const Tensor& self, const Tensor& other);
Tensor& div__Tensor(Tensor& self, const Tensor& other);
Tensor& div_out(const Tensor& self, const Tensor& other, Tensor& out);
Tensor neg(const Tensor& self);
Tensor& neg_(Tensor& self);
Tensor& neg_out(const Tensor& self, Tensor& out);
Tensor abs(const Tensor& self);
Tensor& abs_(Tensor& self);
Tensor& abs_out(const Tensor& self, Tensor& out);
Tensor exp(const Tensor& self);
Tensor& exp_(Tensor& self);
Tensor& exp_out(const Tensor& self, Tensor& out);
Tensor sqrt(const Tensor& self);
Tensor& sqrt_(Tensor& self);
Tensor& sqrt_out(const Tensor& self, Tensor& out);
Tensor relu(const Tensor& self);
Tensor& relu_(Tensor& self);
Tensor eq_Tensor(const Tensor& self, const Tensor& other);
Tensor eq_Scalar(const Tensor& self, const Scalar& other);
Tensor ne_Tensor(const Tensor& self, const Tensor& other);
Tensor ne_Scalar(const Tensor& self, const Scalar& other);
Tensor lt_Tensor(const Tensor& self, const Tensor& other);
Tensor lt_Scalar(const Tensor& self, const Scalar& other);
Tensor le_Tensor(const Tensor& self, const Tensor& other);
Tensor le_Scalar(const Tensor& self, const Scalar& other);
Tensor gt_Tensor(const Tensor& self, const Tensor& other);
Tensor gt_Scalar(const Tensor& self, const Scalar& other);
Tensor ge_Tensor(const Tensor& self, const Tensor& other);
Tensor ge_Scalar(const Tensor& self, const Scalar& other);
Tensor& masked_fill__Scalar(Tensor& self, const Tensor& mask, const Scalar& value);
Tensor& masked_fill__Tensor(Tensor& self, const Tensor& mask, const Tensor& value);
Tensor where_self(const Tensor& cond, const Tensor& self, const Tensor& other);

// ---- reductions, softmax, cumsum (reduce.cpp) ---------------------------------------------
Tensor sum_dim_IntList(const Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                       std::optional<at::ScalarType> dtype);
Tensor mean_dim(const Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                std::optional<at::ScalarType> dtype);
Tensor amax(const Tensor& self, at::IntArrayRef dim, bool keepdim);
Tensor all(const Tensor& self);
Tensor any(const Tensor& self);
Tensor all_dim(const Tensor& self, int64_t dim, bool keepdim);
Tensor any_dim(const Tensor& self, int64_t dim, bool keepdim);
Tensor _softmax(const Tensor& self, int64_t dim, bool half_to_float);
Tensor cumsum(const Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype);
Tensor& cumsum_(Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype);
Tensor& cumsum_out(const Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype,
                   Tensor& out);

// ---- matrix products (matmul.cpp) ----------------------------------------------------------
Tensor mm(const Tensor& self, const Tensor& mat2);

// ---- shape ops, convolution (shape.cpp) ---------------------------------------------------
Tensor tril(const Tensor& self, int64_t diag);
Tensor triu(const Tensor& self, int64_t diag);
Tensor cat(const at::ITensorListRef& tensors, int64_t dim);
Tensor index_select(const Tensor& self, int64_t dim, const Tensor& index);
Tensor convolution_overrideable(const Tensor& input, const Tensor& weight,
                                const std::optional<Tensor>& bias, at::IntArrayRef stride,
                                at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                                at::IntArrayRef output_padding, int64_t groups);
std::tuple<Tensor, Tensor, Tensor> convolution_backward_overrideable(
    const Tensor& grad, const Tensor& input, const Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
    at::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> mask);

// ---- random draws from the device's generators (random.cpp) ------------------------------
Tensor& uniform_(Tensor& self, double from, double to, std::optional<at::Generator> gen);
Tensor& normal_(Tensor& self, double mean, double std, std::optional<at::Generator> gen);
Tensor& random_(Tensor& self, std::optional<at::Generator> gen);
Tensor& random__from(Tensor& self, int64_t from, std::optional<int64_t> to,
                     std::optional<at::Generator> gen);
Tensor& random__to(Tensor& self, int64_t to, std::optional<at::Generator> gen);

// ---- optimizers (optim.cpp) ----------------------------------------------------------------
void _foreach_mul__Scalar(at::TensorList self, const Scalar& scalar);
void _fused_sgd_(at::TensorList self, at::TensorList grads, at::TensorList momentum_buffer_list,
                 double weight_decay, double momentum, double lr, double dampening, bool nesterov,
                 bool maximize, bool is_first_step, const std::optional<Tensor>& grad_scale,
                 const std::optional<Tensor>& found_inf);

// ---- fused RNN cells (rnn.cpp): what LSTMCell/GRUCell call on the device -------------------
std::tuple<Tensor, Tensor, Tensor> _thnn_fused_lstm_cell(
    const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx,
    const std::optional<Tensor>& input_bias, const std::optional<Tensor>& hidden_bias);
std::tuple<Tensor, Tensor, Tensor> _thnn_fused_lstm_cell_backward_impl(
    const std::optional<Tensor>& grad_hy, const std::optional<Tensor>& grad_cy, const Tensor& cx,
    const Tensor& cy, const Tensor& workspace, bool has_bias);
std::tuple<Tensor, Tensor> _thnn_fused_gru_cell(const Tensor& input_gates,
                                                const Tensor& hidden_gates, const Tensor& hx,
                                                const std::optional<Tensor>& input_bias,
                                                const std::optional<Tensor>& hidden_bias);
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> _thnn_fused_gru_cell_backward(
    const Tensor& grad_hy, const Tensor& workspace, bool has_bias);

// ---- autocast (autocast.cpp): AutocastPrivateUse1 policies --------------------------------
void autocast_kernels(torch::Library& m);
// echo_npu's own autograd kernels (AutogradPrivateUse1), as NPU backends write for fused ops
void autograd_kernels(torch::Library& m);

}  // namespace enpu::ops

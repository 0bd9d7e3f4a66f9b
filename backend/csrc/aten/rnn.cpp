// echo_npu's fused RNN cells: torch's LSTMCell and GRUCell (aten/src/ATen/native/RNN.cpp, which
// nn.LSTM, nn.GRU and the cell modules run) call _thnn_fused_lstm_cell / _thnn_fused_gru_cell on
// a PrivateUse1 input, as on CUDA and XPU, and their backward formulas the fused backward
// kernels. CPU has none of the four, so the boxed cpu_fallback cannot serve them: a backend
// without them fails every LSTM and GRU. Here they are composed of ATen ops on the device; the
// workspace is laid out as CUDA's kernels lay it out (aten/src/ATen/native/cuda/RNN.cu; LSTM:
// the activated gates i, f, g, o; GRU: r, z, n, hx, and the hidden part of n's gate with its
// bias), so the op cases can hand the backward kernels a workspace of their own.
#include <ATen/ops/cat.h>
#include <ATen/ops/zeros_like.h>

#include "ops.h"

namespace enpu::ops {
namespace {

Tensor with_bias(const Tensor& gates, const std::optional<Tensor>& bias) {
  return bias.has_value() && bias->defined() ? gates.add(*bias) : gates;
}

Tensor one_minus(const Tensor& t) { return t.neg().add(1); }

}  // namespace

std::tuple<Tensor, Tensor, Tensor> _thnn_fused_lstm_cell(
    const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx,
    const std::optional<Tensor>& input_bias, const std::optional<Tensor>& hidden_bias) {
  const Tensor gates = with_bias(with_bias(input_gates.add(hidden_gates), input_bias), hidden_bias);
  const auto c = gates.chunk(4, 1);
  const Tensor i = c[0].sigmoid(), f = c[1].sigmoid(), g = c[2].tanh(), o = c[3].sigmoid();
  const Tensor cy = f.mul(cx).add(i.mul(g));
  return {o.mul(cy.tanh()), cy, at::cat({i, f, g, o}, 1)};
}

std::tuple<Tensor, Tensor, Tensor> _thnn_fused_lstm_cell_backward_impl(
    const std::optional<Tensor>& grad_hy, const std::optional<Tensor>& grad_cy, const Tensor& cx,
    const Tensor& cy, const Tensor& workspace, bool has_bias) {
  const auto w = workspace.chunk(4, 1);
  const Tensor &i = w[0], &f = w[1], &g = w[2], &o = w[3];
  const Tensor tanh_cy = cy.tanh();
  Tensor gcx = grad_cy.has_value() && grad_cy->defined() ? *grad_cy : at::zeros_like(cx);
  Tensor go = at::zeros_like(o);
  if (grad_hy.has_value() && grad_hy->defined()) {
    gcx = gcx.add(grad_hy->mul(o).mul(one_minus(tanh_cy.mul(tanh_cy))));
    go = grad_hy->mul(tanh_cy).mul(o.mul(one_minus(o)));
  }
  const Tensor gi = gcx.mul(g).mul(i.mul(one_minus(i)));
  const Tensor gf = gcx.mul(cx).mul(f.mul(one_minus(f)));
  const Tensor gg = gcx.mul(i).mul(one_minus(g.mul(g)));
  const Tensor grad_gates = at::cat({gi, gf, gg, go}, 1);
  return {grad_gates, gcx.mul(f), has_bias ? grad_gates.sum(0) : Tensor()};
}

std::tuple<Tensor, Tensor> _thnn_fused_gru_cell(const Tensor& input_gates,
                                                const Tensor& hidden_gates, const Tensor& hx,
                                                const std::optional<Tensor>& input_bias,
                                                const std::optional<Tensor>& hidden_bias) {
  const auto a = with_bias(input_gates, input_bias).chunk(3, 1);
  const auto b = with_bias(hidden_gates, hidden_bias).chunk(3, 1);
  const Tensor r = a[0].add(b[0]).sigmoid(), z = a[1].add(b[1]).sigmoid();
  const Tensor n = a[2].add(r.mul(b[2])).tanh();
  return {n.add(z.mul(hx.sub(n))), at::cat({r, z, n, hx, b[2]}, 1)};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> _thnn_fused_gru_cell_backward(
    const Tensor& grad_hy, const Tensor& workspace, bool has_bias) {
  const auto w = workspace.chunk(5, 1);
  const Tensor &r = w[0], &z = w[1], &n = w[2], &hx = w[3], &hn = w[4];
  const Tensor gz = grad_hy.mul(hx.sub(n)).mul(z.mul(one_minus(z)));
  const Tensor gn = grad_hy.mul(one_minus(z)).mul(one_minus(n.mul(n)));
  const Tensor gr = gn.mul(hn).mul(r.mul(one_minus(r)));
  const Tensor grad_input = at::cat({gr, gz, gn}, 1);
  const Tensor grad_hidden = at::cat({gr, gz, gn.mul(r)}, 1);
  return {grad_input, grad_hidden, grad_hy.mul(z), has_bias ? grad_input.sum(0) : Tensor(),
          has_bias ? grad_hidden.sum(0) : Tensor()};
}

}  // namespace enpu::ops

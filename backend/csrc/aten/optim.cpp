// echo_npu optimizer kernels: `_foreach_mul_.Scalar` and `_fused_sgd_`, registered natively the
// way NPU stacks do for torch.optim's foreach and fused paths. The foreach kernel loops over the
// list calling the device's own mul_; the fused SGD stages every list on CPU, runs CPU's fused
// kernel there and writes the results back (a device without a fused kernel of its own).
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_fused_sgd.h>
#include <ATen/ops/mul.h>

#include <vector>

#include "common.h"
#include "ops.h"

namespace enpu::ops {
namespace {

std::vector<Tensor> to_cpu(at::TensorList ts) {
  std::vector<Tensor> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(t.to(at::kCPU));
  return out;
}

void write_back(at::TensorList dst, const std::vector<Tensor>& src) {
  for (size_t i = 0; i < dst.size(); ++i) dst[i].copy_(src[i]);
}

}  // namespace

void _foreach_mul__Scalar(at::TensorList self, const Scalar& scalar) {
  OpScope s("_foreach_mul_.Scalar");
  if (routed("_foreach_mul_.Scalar")) {
    fallback<at::_ops::_foreach_mul__Scalar>(self, scalar);
    // cpu_fallback writes list elements back below ADInplaceOrView; CPU's own kernel (a loop
    // of mul_) bumps every tensor's version: so does the routed path
    for (const Tensor& t : self) t.unsafeGetTensorImpl()->bump_version();
    return;
  }
  TORCH_CHECK(!self.empty(), "Tensor list must have at least one tensor.");
  size_t n = self.size();
  if (fault(Fault::ForeachMulSkipsLast)) n -= 1;  // the last tensor keeps its old values
  for (size_t i = 0; i < n; ++i) {
    Tensor t = self[i];
    t.mul_(scalar);
  }
}

void _fused_sgd_(at::TensorList self, at::TensorList grads, at::TensorList momentum_buffer_list,
                 double weight_decay, double momentum, double lr, double dampening, bool nesterov,
                 bool maximize, bool is_first_step, const std::optional<Tensor>& grad_scale,
                 const std::optional<Tensor>& found_inf) {
  OpScope s("_fused_sgd_");
  if (routed("_fused_sgd_"))
    return fallback<at::_ops::_fused_sgd_>(self, grads, momentum_buffer_list, weight_decay,
                                           momentum, lr, dampening, nesterov, maximize,
                                           is_first_step, grad_scale, found_inf);
  std::vector<Tensor> params = to_cpu(self), g = to_cpu(grads), bufs = to_cpu(momentum_buffer_list);
  std::optional<Tensor> scale, inf;
  if (grad_scale.has_value() && grad_scale->defined()) scale = grad_scale->to(at::kCPU);
  if (found_inf.has_value() && found_inf->defined()) inf = found_inf->to(at::kCPU);
  // the fault: the momentum buffer decays at half the rate asked for
  double m = fault(Fault::FusedSgdWrongMomentum) ? momentum * 0.5 : momentum;
  at::_fused_sgd_(params, g, bufs, weight_decay, m, lr, dampening, nesterov, maximize,
                  is_first_step, scale, inf);
  write_back(self, params);
  write_back(grads, g);
  write_back(momentum_buffer_list, bufs);
}

}  // namespace enpu::ops

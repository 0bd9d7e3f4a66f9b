// echo_npu's own autograd kernels (AutogradPrivateUse1): what NPU backends register for fused
// activations and attention, replacing torch's derivative formula for their device. gelu here:
// the forward runs below autograd (the device's gelu: its decomposition into gelu.out), the
// backward calls gelu_backward on the device. Fault gelu_wrong_backward: relu's derivative.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/gelu_backward_ops.h>
#include <ATen/ops/gelu_ops.h>
#include <ATen/ops/gt_ops.h>
#include <ATen/ops/mul_ops.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "ops.h"
#include "registry.h"

namespace enpu::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Gelu : public torch::autograd::Function<Gelu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& self,
                            c10::string_view approximate) {
    ctx->save_for_backward({self});
    ctx->saved_data["approximate"] = std::string(approximate);
    at::AutoDispatchBelowADInplaceOrView below;
    return at::_ops::gelu::call(self, approximate);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor self = ctx->get_saved_variables()[0];
    const std::string approximate = ctx->saved_data["approximate"].toStringRef();
    if (fault(Fault::GeluWrongBackward))  // relu's derivative: right only where it is 0 or 1
      return {at::_ops::mul_Tensor::call(grads[0], self.gt(0).to(grads[0].scalar_type())),
              at::Tensor()};
    return {at::_ops::gelu_backward::call(grads[0], self, approximate), at::Tensor()};
  }
};

at::Tensor gelu_autograd(const at::Tensor& self, c10::string_view approximate) {
  return Gelu::apply(self, approximate);
}

}  // namespace

void autograd_kernels(torch::Library& m) { m.impl("gelu", TORCH_FN(gelu_autograd)); }

}  // namespace enpu::ops

// echo_npu autocast: torch.autocast(device_type="npu") dispatches through AutocastPrivateUse1.
// Ops without a policy fall through; matrix products run in the autocast dtype (as on CUDA).
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include "ops.h"

namespace enpu::ops {

void autocast_kernels(torch::Library& m) {
  KERNEL_PRIVATEUSEONE(mm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(bmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(matmul, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(linear, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(addmm, lower_precision_fp)
}

}  // namespace enpu::ops

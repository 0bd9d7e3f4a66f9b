// echo_npu autocast: torch.autocast(device_type="npu") dispatches through AutocastPrivateUse1.
// The policy is CUDA's, organised as CUDA's is (aten/src/ATen/autocast_mode.cpp): the op lists
// ATen/autocast_mode.h exports for other backends (lower precision, fp32, fp32 with an optional
// dtype, fp32 appending a dtype, promote), registered with the PrivateUse1 macros, and
// binary_cross_entropy banned. matmul has a kernel of its own (fault autocast_matmul_fp32 runs
// it in float32). Torches without those lists (before 2.4) get the matrix products only.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include <cstring>
#include <utility>

#include "ops.h"
#include "registry.h"

namespace enpu::ops {
namespace {

#ifdef AT_FORALL_LOWER_PRECISION_FP
// What the policy macros register into (they call `m.impl(name, kernel)`): the library, minus
// the ops echo_npu serves with kernels of its own.
struct Policies {
  torch::Library& lib;
  template <bool enabled, typename Func>
  void impl(torch::detail::SelectiveStr<enabled> name, Func&& f) {
    if (std::strcmp(static_cast<const char*>(name), "aten::matmul") == 0) return;
    lib.impl(name, std::forward<Func>(f));
  }
};

at::Tensor matmul_autocast(const at::Tensor& self, const at::Tensor& other) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastPrivateUse1);
  constexpr auto device = c10::DeviceType::PrivateUse1;
  const at::ScalarType to = fault(Fault::AutocastMatmulFp32)
                                ? at::kFloat
                                : at::autocast::get_lower_precision_fp_from_device_type(device);
  return at::matmul(at::autocast::cached_cast(to, self, device),
                    at::autocast::cached_cast(to, other, device));
}

at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&,
                                       const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
              "autocast.\nMany models use a sigmoid layer right before the binary cross entropy "
              "layer.\nIn this case, combine the two layers using "
              "torch.nn.functional.binary_cross_entropy_with_logits\nor torch.nn.BCEWithLogitsLoss."
              "  binary_cross_entropy_with_logits and BCEWithLogits are\nsafe to autocast.");
}
#endif

}  // namespace

void autocast_kernels(torch::Library& lib) {
#ifdef AT_FORALL_LOWER_PRECISION_FP
  using at::IntArrayRef;  // the lists' signatures name ATen's types unqualified
  using at::Scalar;
  using at::ScalarType;
  using at::Tensor;
  Policies m{lib};
#define ENPU_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define ENPU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define ENPU_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define ENPU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(ENPU_LOWER_PRECISION_FP)
  AT_FORALL_FP32(ENPU_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(ENPU_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(ENPU_PROMOTE)
  lib.impl("matmul", TORCH_FN(matmul_autocast));
  lib.impl("binary_cross_entropy", TORCH_FN(binary_cross_entropy_banned));
#else
  torch::Library& m = lib;
  KERNEL_PRIVATEUSEONE(mm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(bmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(matmul, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(linear, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(addmm, lower_precision_fp)
#endif
}

}  // namespace enpu::ops

// echo_npu kernels: mm over contiguous staged buffers (a dot-product cmodel, as an NPU's matrix
// unit; half types accumulate in float, float/double in double, integers wrap in int64).
#include <ATen/ops/mm.h>

#include "common.h"
#include "meta.h"
#include "ops.h"

namespace enpu::ops {

Tensor mm(const Tensor& self, const Tensor& mat2) {
  OpScope s("mm");
  if (routed("mm") || !native_ok({self, mat2}) || self.scalar_type() == at::kBool ||
      mat2.scalar_type() == at::kBool)
    return fallback<at::_ops::mm>(self, mat2);
  auto dev = device_of({self, mat2});
  TORCH_CHECK(self.dtype() == mat2.dtype(), "expected m1 and m2 to have the same dtype, but got: ",
              self.dtype(), " != ", mat2.dtype());  // CPU's check (the meta kernel promotes)
  Tensor meta = meta_call<at::_ops::mm>(to_meta(self), to_meta(mat2));
  const at::ScalarType dt = meta.scalar_type();
  Tensor r = empty_dev(meta.sizes(), dt, dev);
  if (r.numel() == 0) return finish(r, meta, dev);
  const int64_t n = self.size(0), k = self.size(1), m = mat2.size(1);
  Tensor a = stage(self, self.sizes(), dt, dev);
  Tensor b = stage(mat2, mat2.sizes(), dt, dev);
  const bool nan_to_zero = fault(Fault::MmNanToZero) && at::isFloatingType(dt);
  launch("mm", dev, [kt = kdt(dt), ap = a.data_ptr(), bp = b.data_ptr(), rp = r.data_ptr(), n, k,
                     m, nan_to_zero] {
    k::mm(kt, ap, bp, rp, n, k, m);
    if (nan_to_zero) k::nan_to_zero(kt, rp, n * m);  // fault "mm_nan_to_zero"
  });
  return finish(r, meta, dev);
}

}  // namespace enpu::ops

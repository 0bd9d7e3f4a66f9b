// echo_npu_sync_for_kernels: what the C++ wrapper Inductor generates for npu calls before each
// compiled kernel (echo_npu/inductor.py): the kernel reads device memory on the host, so the
// device's current stream must have finished its queued work (asynchronous mode). Declared in
// the generated shim header (generate.py); errors come back as an AOTI error code.
#include <torch/csrc/inductor/aoti_torch/utils.h>

#include "../device/api.h"

extern "C" __attribute__((visibility("default"))) AOTITorchError echo_npu_sync_for_kernels(
    int32_t device) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({ enpu::sync_for_kernels(device); });
}

// echo_npu c10 allocator for PrivateUse1: device blocks come from the runtime (enpuMalloc).
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include "../runtime/runtime.h"
#include "device.h"

namespace enpu {
namespace {

void delete_block(void* p) { enpuFree(p); }

struct EnpuAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    void* p = nullptr;
    auto err = enpuMalloc(&p, n);
    TORCH_CHECK(err == enpuSuccess, "echo_npu: out of memory allocating ", n, " bytes");
    return {p, p, &delete_block, c10::Device(c10::DeviceType::PrivateUse1, enpuGetDevice())};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &delete_block; }
  void copy_data(void* dst, const void* src, std::size_t count) const override {
    enpuMemcpy(dst, src, count, enpuMemcpyDeviceToDevice);
  }
};

EnpuAllocator g_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace

c10::Allocator* device_allocator() { return &g_allocator; }

}  // namespace enpu

// plain_npu: a plain third-party-like PrivateUse1 backend whose device memory is the C heap
// (malloc/free), for the suite's heap red zones (issue 48). Everything registers statically when
// the library is loaded. Device memory is host memory: kernels view it as CPU tensors
// (at::from_blob) and run CPU ops; everything without a kernel here goes through the boxed
// cpu_fallback.
//
// PLAIN_NPU_FAULTS (comma-separated, read at every call) plants two heap bugs:
//   relu_writes_past  relu writes 64 bytes (0x5A) past the end of its output's allocation when
//                     the output's (non-zero) element count is a multiple of 7 (values stay
//                     right)
//   abs_uses_freed    abs frees its scratch block, then writes 16 zero bytes at its start
//                     (a stale workspace: use after free; values stay right)
#include <ATen/core/Tensor.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr c10::DeviceType kPlain = c10::DeviceType::PrivateUse1;
std::atomic<bool> g_initialized{false};

bool fault(const char* name) {
  const char* env = std::getenv("PLAIN_NPU_FAULTS");
  if (!env) return false;
  const std::string all = std::string(",") + env + ",";
  return all.find(std::string(",") + name + ",") != std::string::npos;
}

// ---- allocator: plain malloc/free ----------------------------------------------------------
void plain_delete(void* p) { std::free(p); }

struct PlainAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    g_initialized = true;
    const c10::Device dev(kPlain, 0);
    if (nbytes == 0) return c10::DataPtr(nullptr, dev);
    void* p = std::malloc(nbytes);
    TORCH_CHECK(p != nullptr, "plain_npu: out of memory allocating ", nbytes, " bytes");
    return c10::DataPtr(p, p, &plain_delete, dev);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &plain_delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

PlainAllocator g_alloc;

struct RegisterAllocator {
  RegisterAllocator() { c10::SetAllocator(kPlain, &g_alloc); }
} g_register_allocator;

// ---- device guard: one device, one default stream --------------------------------------------
struct PlainGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  PlainGuardImpl() = default;
  c10::DeviceType type() const override { return kPlain; }
  c10::Device exchangeDevice(c10::Device d) const override { return getDevice(); }
  c10::Device getDevice() const override { return c10::Device(kPlain, 0); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.index() <= 0, "plain_npu: invalid device index ", static_cast<int>(d.index()),
                " (one device)");
  }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kPlain, 0));
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return getStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return s; }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, PlainGuardImpl);

// ---- PrivateUse1 hooks (torch.accelerator, storage resize, pinned memory queries) ------------
struct PlainHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  void setCurrentDevice(c10::DeviceIndex) const override {}
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex) const override { return 0; }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex) const override { return 0; }
  at::Device getDeviceFromPtr(void*) const override { return at::Device(kPlain, 0); }
  bool isPinnedPtr(const void*) const override { return false; }
  at::Allocator* getPinnedMemoryAllocator() const override {
    return c10::GetAllocator(c10::DeviceType::CPU);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
    c10::DataPtr fresh = g_alloc.allocate(newsize);
    const size_t keep = std::min(newsize, impl->nbytes());
    if (keep) std::memcpy(fresh.get(), impl->data(), keep);
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(newsize);
  }
};

struct RegisterHooks {
  RegisterHooks() {
    // the Python package refuses to load when another backend owns PrivateUse1; registering
    // twice would abort the process
    if (!at::isPrivateUse1HooksRegistered()) at::RegisterPrivateUse1HooksInterface(new PlainHooks());
  }
} g_register_hooks;

// ---- kernels ----------------------------------------------------------------------------------
using at::Tensor;

// The device tensor's memory as a CPU tensor (same sizes, strides, dtype, conj/neg bits).
Tensor cpu_view(const Tensor& t) {
  if (t.device().type() == c10::DeviceType::CPU) return t;
  Tensor v = at::from_blob(t.data_ptr(), t.sizes(), t.strides(),
                           t.options().device(c10::DeviceType::CPU));
  v._set_conj(t.is_conj());
  v._set_neg(t.is_neg());
  return v;
}

Tensor empty_device(at::IntArrayRef size, at::IntArrayRef stride, at::ScalarType dtype) {
  return at::detail::empty_strided_generic(size, stride, &g_alloc,
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           dtype);
}

void check_options(std::optional<at::Layout> layout, std::optional<at::Device> device,
                   std::optional<bool> pin) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "plain_npu: only strided tensors");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin), "Only dense CPU tensors can be pinned");
  if (device) {
    TORCH_CHECK(device->index() <= 0, "plain_npu: invalid device index ",
                static_cast<int>(device->index()), " (one device)");
  }
}

Tensor k_empty_memory_format(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                           std::optional<at::Layout> layout, std::optional<at::Device> device,
                           std::optional<bool> pin, std::optional<at::MemoryFormat> mf) {
  check_options(layout, device, pin);
  return at::detail::empty_generic(size, &g_alloc,
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), mf);
}

Tensor k_empty_strided(at::IntArrayRef size, at::IntArrayRef stride,
                     std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                     std::optional<at::Device> device, std::optional<bool> pin) {
  check_options(layout, device, pin);
  return empty_device(size, stride, c10::dtype_or_default(dtype));
}

Tensor k_as_strided(const Tensor& self, at::IntArrayRef size, at::IntArrayRef stride,
                  std::optional<int64_t> offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, offset);
}

Tensor k_view(const Tensor& self, at::IntArrayRef size) { return at::native::view(self, size); }

Tensor k_reshape_alias(const Tensor& self, at::IntArrayRef size, at::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

const Tensor& k_resize_(const Tensor& self, at::IntArrayRef size,
                      std::optional<at::MemoryFormat> mf) {
  return at::native::resize_(self, size, mf);
}

Tensor& k_set_storage(Tensor& self, at::Storage src) { return at::native::set_(self, src); }

Tensor& k_set_storage_offset(Tensor& self, at::Storage src, int64_t offset, at::IntArrayRef size,
                           at::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, src, offset, size, stride);
}

Tensor& k_set_tensor(Tensor& self, const Tensor& src) { return at::native::set_tensor_(self, src); }

Tensor k_copy_from(const Tensor& self, const Tensor& dst, bool non_blocking) {
  if (self.device() == dst.device() && dst.numel() > 0) {
    // the CPU views below live in different storages: check overlap as CPU's copy_ would
    at::assert_no_internal_overlap(dst);
    at::assert_no_partial_overlap(dst, self);
  }
  cpu_view(dst).copy_(cpu_view(self));
  return dst;
}

Tensor k_copy_from_and_resize(const Tensor& self, const Tensor& dst) {
  if (dst.sizes() != self.sizes()) at::native::resize_(dst, self.sizes(), std::nullopt);
  cpu_view(dst).copy_(cpu_view(self));
  return dst;
}

at::Scalar k_local_scalar_dense(const Tensor& self) { return cpu_view(self).item(); }

Tensor& k_fill_scalar(Tensor& self, const at::Scalar& value) {
  cpu_view(self).fill_(value);
  return self;
}

Tensor& k_zero(Tensor& self) {
  cpu_view(self).zero_();
  return self;
}

// A fresh device tensor with the layout of the CPU result `r`.
Tensor device_like(const Tensor& r) { return empty_device(r.sizes(), r.strides(), r.scalar_type()); }

Tensor k_relu(const Tensor& self) {
  const Tensor r = at::relu(cpu_view(self));
  Tensor out = device_like(r);
  cpu_view(out).copy_(r);
  if (fault("relu_writes_past") && out.numel() > 0 && out.numel() % 7 == 0) {
    // the tail of a vectorised loop that does not stop at the end of the output
    const auto& storage = out.storage();
    auto* end = static_cast<unsigned char*>(storage.mutable_data()) + storage.nbytes();
    std::memset(end, 0x5A, 64);
  }
  return out;
}

Tensor k_abs(const Tensor& self) {
  const Tensor r = at::abs(cpu_view(self));
  Tensor out = device_like(r);
  const size_t nbytes = out.storage().nbytes();
  if (nbytes == 0) return out;
  // the kernel works in a scratch block of the output's size, then copies it out
  void* scratch = std::malloc(nbytes);
  TORCH_CHECK(scratch != nullptr, "plain_npu: out of memory (abs scratch)");
  at::from_blob(scratch, r.sizes(), r.strides(), r.options()).copy_(r);
  std::memcpy(out.storage().mutable_data(), scratch, nbytes);
  std::free(scratch);
  if (fault("abs_uses_freed")) {
    // a stale pointer to the freed workspace, cleared "for the next call"
    std::memset(scratch, 0, 16);
  }
  return out;
}

void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  at::native::cpu_fallback(op, stack);
}

}  // namespace

extern "C" int plain_npu_is_initialized() { return g_initialized ? 1 : 0; }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(k_empty_memory_format));
  m.impl("empty_strided", TORCH_FN(k_empty_strided));
  m.impl("as_strided", TORCH_FN(k_as_strided));
  m.impl("view", TORCH_FN(k_view));
  m.impl("_reshape_alias", TORCH_FN(k_reshape_alias));
  m.impl("resize_", TORCH_FN(k_resize_));
  m.impl("set_.source_Storage", TORCH_FN(k_set_storage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(k_set_storage_offset));
  m.impl("set_.source_Tensor", TORCH_FN(k_set_tensor));
  m.impl("_copy_from", TORCH_FN(k_copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(k_copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(k_local_scalar_dense));
  m.impl("fill_.Scalar", TORCH_FN(k_fill_scalar));
  m.impl("zero_", TORCH_FN(k_zero));
  m.impl("relu", TORCH_FN(k_relu));
  m.impl("abs", TORCH_FN(k_abs));
}

// _copy_from handles the conj/neg bits itself (its CPU views carry them): let it through the
// Conjugate/Negative fallbacks, which would otherwise materialise with clone -> copy_ ->
// _copy_from, forever.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

// echo_npu ATen glue helpers: staging, copies, meta helpers and the boxed fallback wrapper.
#include "common.h"

#include "../device/api.h"
#include "../device/device.h"

#include <ATen/EmptyTensor.h>
#include <ATen/TensorIterator.h>
#include <ATen/core/Reduction.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/div.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/nll_loss2d_forward.h>
#include <ATen/ops/nll_loss_forward.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/accumulate.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include <chrono>
#include <cstring>
#include <thread>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace enpu {

static_assert(static_cast<int>(at::ScalarType::Float) == static_cast<int>(k::DType::Float));
static_assert(static_cast<int>(at::ScalarType::Bool) == static_cast<int>(k::DType::Bool));
static_assert(static_cast<int>(at::ScalarType::BFloat16) == static_cast<int>(k::DType::BFloat16));

namespace {

// cpu_fallback moves every argument to CPU, so a device tensor mixed with a CPU tensor would be
// silently accepted. CPU-only or single-device kernels refuse that mix (as CUDA does); 0-dim CPU
// tensors (scalars) stay allowed. Plain Tensor arguments only: index lists may live on CPU.
void check_same_device(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const size_t n = op.schema().arguments().size();
  std::optional<c10::Device> device, cpu;
  for (size_t i = stack.size() - n; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) continue;
    if (t.device().is_privateuseone()) {
      if (!device) device = t.device();
    } else if (t.device().is_cpu() && t.dim() > 0) {
      cpu = t.device();
    }
  }
  TORCH_CHECK(!(device && cpu),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              *device, " and ", *cpu, "!");
}

// Fault "fallback_nll_mean_by_n": what the fix-up after CPU's nll_loss(2d)_forward needs.
struct NllMeanByN {
  bool two_d = false;
  at::Tensor self, target, weight;
  int64_t ignore_index = 0;
};

// The arguments of an nll_loss_forward / nll_loss2d_forward call (either overload) with
// reduction=mean and a weight, read off the stack before cpu_fallback consumes it.
std::optional<NllMeanByN> nll_mean_by_n(const std::string& name, const c10::OperatorHandle& op,
                                        const torch::jit::Stack& stack) {
  const bool one_d = name == "nll_loss_forward" || name == "nll_loss_forward.output";
  const bool two_d = name == "nll_loss2d_forward" || name == "nll_loss2d_forward.output";
  if (!(one_d || two_d) || !fault(Fault::FallbackNllMeanByN)) return std::nullopt;
  const size_t first = stack.size() - op.schema().arguments().size();
  const c10::IValue& weight = stack[first + 2];
  if (weight.isNone() || !weight.toTensor().defined()) return std::nullopt;
  if (stack[first + 3].toInt() != at::Reduction::Mean) return std::nullopt;
  return NllMeanByN{two_d, stack[first].toTensor(), stack[first + 1].toTensor(),
                    weight.toTensor(), stack[first + 4].toInt()};
}

// The weighted sum (CPU's own, reduction=sum) divided by the number of non-ignored targets,
// written into the `output` the fallback returned (second to last on the stack).
void nll_divide_by_count(const NllMeanByN& f, torch::jit::Stack& stack) {
  const at::Tensor output = stack[stack.size() - 2].toTensor();
  const at::Tensor self = f.self.cpu(), target = f.target.cpu(), weight = f.weight.cpu();
  const int64_t sum = at::Reduction::Sum;
  at::Tensor weighted =
      f.two_d ? std::get<0>(at::nll_loss2d_forward(self, target, weight, sum, f.ignore_index))
              : std::get<0>(at::nll_loss_forward(self, target, weight, sum, f.ignore_index));
  at::Tensor count = at::ne(target, f.ignore_index).sum();
  output.copy_(at::div(weighted, count));
}

// cpu_fallback puts its outputs on the device of the first tensor argument
// (compute_target_device: "we use the first tensor arg to pick the device", `t_args[0].device()`).
// When that is a CPU tensor (a wrapped Python number, `1.0 - x` -> sub.Tensor(tensor(1.0), x), or
// a 0-dim CPU tensor, which TensorIterator ops accept beside device tensors) the results come back
// on CPU, where CPU eager semantics put them on the device. The device CPU eager would pick: the
// first non-CPU plain tensor argument, when the first tensor argument is on CPU (nullopt
// otherwise, and when a Device argument gives cpu_fallback its target).
std::optional<c10::Device> device_for_outputs(const c10::OperatorHandle& op,
                                              const torch::jit::Stack& stack) {
  const size_t first = stack.size() - op.schema().arguments().size();
  std::optional<c10::Device> first_tensor, device;
  for (size_t i = first; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isDevice()) return std::nullopt;
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (!first_tensor) {
      if (!t.defined()) return std::nullopt;
      first_tensor = t.device();
    }
    if (!device && t.defined() && t.device().is_privateuseone()) device = t.device();
  }
  if (!first_tensor || !first_tensor->is_cpu()) return std::nullopt;
  return device;
}

// Moves the CPU results cpu_fallback left on the stack to dev. Returns that alias an argument
// (in-place/out=, `Tensor(a!)`) stay that very argument, as cpu_fallback put it back.
void move_outputs(const c10::OperatorHandle& op, torch::jit::Stack& stack, c10::Device dev) {
  const auto& returns = op.schema().returns();
  const size_t first = stack.size() - returns.size();
  for (size_t i = 0; i < returns.size(); ++i) {
    const c10::AliasInfo* alias = returns[i].alias_info();
    if (alias != nullptr && alias->isWrite()) continue;
    c10::IValue& v = stack[first + i];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (t.defined() && t.device().is_cpu()) v = c10::IValue(t.to(dev));
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> ts = v.toTensorVector();
      for (auto& t : ts)
        if (t.defined() && t.device().is_cpu()) t = t.to(dev);
      v = c10::IValue(c10::List<at::Tensor>(ts));
    }
  }
}

// native_batch_norm (and .out) updates running_mean/running_var in place when training, but its
// schema declares them `Tensor? running_mean` (not `Tensor(a!)`), and cpu_fallback copies back
// only arguments whose "alias_info->isWrite()": the device's statistics would stay unchanged.
// The CPU op is handed CPU copies of them (cpu_fallback leaves CPU tensors as they are); after
// it, each is copied back into its device tensor with the device's copy. (_native_batch_norm_legit
// and _batch_norm_with_update mark them `Tensor(a!)`: cpu_fallback copies those back itself.)
struct RunningStats {
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (device, CPU copy)
  at::Tensor var_before;  // bn_running_var_biased: running_var before the update (CPU)
  double momentum = 0.0;
  int64_t per_channel = 0;  // elements a channel's batch statistics are taken over
};

RunningStats bn_running_stats(const std::string& name, const c10::OperatorHandle& op,
                              torch::jit::Stack& stack) {
  RunningStats stats;
  if (name != "native_batch_norm" && name != "native_batch_norm.out") return stats;
  const size_t first = stack.size() - op.schema().arguments().size();
  if (!stack[first + 5].toBool()) return stats;  // training=False: only read
  for (size_t i : {first + 3, first + 4}) {      // running_mean, running_var
    if (!stack[i].isTensor()) continue;          // None
    const at::Tensor t = stack[i].toTensor();
    if (!t.defined() || !t.device().is_privateuseone()) continue;
    stats.copies.emplace_back(t, t.cpu());
    stack[i] = c10::IValue(stats.copies.back().second);
    if (i == first + 4 && fault(Fault::BnRunningVarBiased)) {
      const at::Tensor input = stack[first].toTensor();
      stats.var_before = stats.copies.back().second.clone();
      stats.momentum = stack[first + 6].toDouble();
      stats.per_channel = input.dim() > 1 ? input.numel() / input.size(1) : input.numel();
    }
  }
  return stats;
}

// bn_running_var_biased: running_var = (1 - m) * before + m * unbiased becomes
// (1 - m) * before + m * unbiased * (n - 1) / n, the biased batch variance's update.
void write_back_running_stats(const RunningStats& stats) {
  for (size_t i = 0; i < stats.copies.size(); ++i) {
    const auto& [dev, cpu] = stats.copies[i];
    if (i + 1 == stats.copies.size() && stats.var_before.defined() && stats.per_channel > 1) {
      const double m = stats.momentum, n = static_cast<double>(stats.per_channel);
      const at::Tensor kept = stats.var_before.mul(1.0 - m);
      dev.copy_(cpu.sub(kept).mul((n - 1.0) / n).add(kept));
    } else {
      dev.copy_(cpu);
    }
  }
}

}  // namespace

void fallback_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  check_same_device(op, *stack);
  const auto& n = op.schema().operator_name();
  std::string name = n.name;
  if (name.rfind("aten::", 0) == 0) name = name.substr(6);
  if (!n.overload_name.empty()) name += "." + n.overload_name;
  count_fallback(name);
  OpScope scope(intern(name));
  if (name == "addmm.out" && fault(Fault::FallbackAddmmDropsBias)) {
    const size_t first = stack->size() - op.schema().arguments().size();
    (*stack)[first] = c10::IValue(at::zeros_like((*stack)[first].toTensor()));  // self: the bias
  }
  if (name == "_native_batch_norm_legit" && fault(Fault::FallbackBnLegitDropsVar)) {
    const size_t first = stack->size() - op.schema().arguments().size();
    if (!(*stack)[first + 5].toBool()) {  // training=False: running_var only read
      (*stack)[first + 4] = c10::IValue(at::ones_like((*stack)[first + 4].toTensor()));
    }
  }
  const std::optional<NllMeanByN> nll = nll_mean_by_n(name, op, *stack);
  const std::optional<c10::Device> out_device = device_for_outputs(op, *stack);
  const RunningStats stats = bn_running_stats(name, op, *stack);
  at::native::cpu_fallback(op, stack);
  write_back_running_stats(stats);
  if (out_device) move_outputs(op, *stack, *out_device);
  if (nll) nll_divide_by_count(*nll, *stack);
}

void check_runtime(enpuError_t err) {
  if (err == enpuErrorAsyncWork)
    TORCH_CHECK(false, "echo_npu: ", enpuGetErrorString(err), enpu::lastAsyncError());
  TORCH_CHECK(err == enpuSuccess, "echo_npu: ", enpuGetErrorString(err));
}

bool native_ok(std::initializer_list<at::Tensor> ts) {
  for (const auto& t : ts) {
    if (!t.defined()) continue;
    if (!k::supported(static_cast<int>(t.scalar_type()))) return false;
    if (t.layout() != c10::kStrided) return false;
  }
  return true;
}

c10::Device device_of(std::initializer_list<at::Tensor> ts) {
  c10::optional<c10::Device> dev;
  for (const auto& t : ts)
    if (t.defined() && t.device().is_privateuseone()) {
      dev = t.device();
      break;
    }
  TORCH_CHECK(dev.has_value(), "echo_npu: no npu tensor among the arguments");
  for (const auto& t : ts) {
    if (!t.defined() || t.device() == *dev) continue;
    if (t.device().is_cpu() && t.dim() == 0) continue;
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ",
                *dev, " and ", t.device(), "!");
  }
  return *dev;
}

at::Tensor empty_dev(at::IntArrayRef sizes, at::ScalarType dt, c10::Device dev) {
  c10::DeviceGuard g(dev);
  return at::detail::empty_generic(sizes, c10::GetAllocator(c10::DeviceType::PrivateUse1),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dt,
                                   std::nullopt);
}

at::Tensor empty_strided_dev(at::IntArrayRef sizes, at::IntArrayRef strides, at::ScalarType dt,
                             c10::Device dev) {
  c10::DeviceGuard g(dev);
  return at::detail::empty_strided_generic(sizes, strides,
                                           c10::GetAllocator(c10::DeviceType::PrivateUse1),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dt);
}

at::Tensor to_meta(const at::Tensor& t) {
  if (!t.defined() || (t.device().is_cpu() && t.dim() == 0)) return t;
  auto m = at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
  if (t.unsafeGetTensorImpl()->is_wrapped_number()) m.unsafeGetTensorImpl()->set_wrapped_number(true);
  return m;
}

namespace {

// [lo, hi) byte range touched by a device tensor.
std::pair<uintptr_t, uintptr_t> span(const at::Tensor& t);

// libtorch's CPU kernels are not instrumented: under ASan, check the device bytes a CPU alias
// exposes before a libtorch kernel touches them, and report a poisoned byte as ASan would.
void check_not_poisoned(const at::Tensor& t, bool write) {
#if defined(__SANITIZE_ADDRESS__)
  if (t.numel() == 0) return;
  auto [lo, hi] = span(t);
  if (void* bad = __asan_region_is_poisoned(reinterpret_cast<void*>(lo), hi - lo))
    __asan_report_error(__builtin_return_address(0), __builtin_frame_address(0),
                        __builtin_frame_address(0), bad, write ? 1 : 0, 1);
#else
  (void)t;
  (void)write;
#endif
}

// A CPU tensor aliasing t's memory (t itself for CPU tensors).
at::Tensor cpu_alias(const at::Tensor& t, bool ignore_offset, bool write) {
  if (!t.device().is_privateuseone()) return t;
  void* p = ignore_offset ? t.storage().mutable_data() : t.data_ptr();
  auto a = at::from_blob(p, t.sizes(), t.strides(), t.options().device(c10::kCPU));
  a._set_conj(t.is_conj());
  a._set_neg(t.is_neg());
  check_not_poisoned(a, write);
  return a;
}

// [lo, hi) byte range touched by a device tensor.
std::pair<uintptr_t, uintptr_t> span(const at::Tensor& t) {
  auto lo = reinterpret_cast<uintptr_t>(t.data_ptr());
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return {lo, lo + static_cast<uintptr_t>((last + 1) * t.element_size())};
}

}  // namespace

namespace {

// What one side of a copy needs, taken on the calling thread: a host tensor (kept alive by the
// work; staged first when it may change before queued work runs) or device memory by address
// (queued work holds no device storage).
struct Side {
  at::Tensor host;
  void* ptr = nullptr;
  std::vector<int64_t> sizes, strides;
  at::TensorOptions options;
  bool conj = false, neg = false;

  // A CPU tensor over this side (the host tensor itself).
  at::Tensor alias(bool write) const {
    if (host.defined()) return host;
    auto a = at::from_blob(ptr, sizes, strides, options);
    a._set_conj(conj);
    a._set_neg(neg);
    check_not_poisoned(a, write);
    return a;
  }
};

Side side_of(const at::Tensor& t, bool ignore_offset) {
  Side s;
  if (!t.device().is_privateuseone()) {
    s.host = t;
    return s;
  }
  s.ptr = ignore_offset ? t.storage().mutable_data() : t.data_ptr();
  s.sizes = t.sizes().vec();
  s.strides = t.strides().vec();
  s.options = t.options().device(c10::kCPU);
  s.conj = t.is_conj();
  s.neg = t.is_neg();
  return s;
}

// The faults and the staging a copy applies, decided on the calling thread.
struct CopyPlan {
  bool stage_src = false;  // overlapping device views
  bool drop_last = false;  // fault d2h_drops_last
  bool truncate_bf16 = false;  // fault to_bf16_truncates
};

void run_copy(at::Tensor d, at::Tensor s, const CopyPlan& plan) {
  if (plan.stage_src) s = s.clone();
  at::Tensor last;  // fault d2h_drops_last: the destination's last element keeps its value
  if (plan.drop_last) last = d.view({-1}).narrow(0, d.numel() - 1, 1).clone();
  at::native::copy_(d, s, false);
  if (last.defined()) d.view({-1}).narrow(0, d.numel() - 1, 1).copy_(last);
  if (plan.truncate_bf16) {
    // float -> bfloat16 by dropping the low 16 bits of the float32 value (truncation toward
    // zero) instead of rounding to nearest even
    at::Tensor bits = s.to(at::kFloat).contiguous().view(at::kInt).bitwise_and(-65536);
    d.copy_(bits.view(at::kFloat));
  }
}

// The checks of CPU's copy (shapes, internal overlap) made on meta tensors, so that queued work
// does not raise what the synchronous copy raises at once.
void check_copy(const at::Tensor& dst, const at::Tensor& src) {
  auto meta = [](const at::Tensor& t) {
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
  };
  at::Tensor d = meta(dst), s = meta(src);
  at::TensorIteratorConfig()
      .add_output(d)
      .add_input(s)
      .resize_outputs(false)
      .check_all_same_dtype(false)
      .check_all_same_device(false)
      .build();
}

// Work queued next on (device, stream) waits (on the device) for the work queued so far on the
// current stream of device `after` (the same stream: nothing to do).
void order_after(int device, enpuStream_t stream, int after) {
  const enpuStream_t other = enpuGetStream(after);
  if (after == device && other == stream) return;
  enpuEvent_t ready = nullptr;
  check_runtime(enpuEventCreate(&ready, after, 0));
  enpuError_t e = enpuEventRecord(ready, after, other);
  if (e == enpuSuccess) e = enpuStreamWaitEvent(device, stream, ready);
  enpuEventDestroy(ready);  // the wait holds what it waits for
  check_runtime(e);
}

}  // namespace

void enqueue_work(int device, enpuStream_t stream, enpuWorkKind kind, std::function<void()> fn) {
  if (!enpuGetAsync()) {  // runs now: its exceptions propagate as they are
    check_runtime(enpu::enqueue(device, stream, kind, std::move(fn)));
    return;
  }
  if (kind == enpuWorkKernel && stream != 0 && fault(Fault::SideStreamEarly)) {
    // the fault: the kernel runs after the side stream's queued work, on a stream of its own
    // that the side stream never waits for
    const enpuStream_t engine = enpu::copyEngineStream(device);
    order_after(device, engine, device);
    stream = engine;
  }
  check_runtime(enpu::enqueue(device, stream, kind, [fn = std::move(fn)] {
    try {
      fn();
    } catch (const c10::Error& e) {
      throw std::runtime_error(e.what_without_backtrace());
    }
  }));
}

void queue_failing_work(const std::string& message) {
  const int d = enpuGetDevice();
  enqueue_work(d, enpuGetStream(d), enpuWorkKernel, [message] { TORCH_CHECK(false, message); });
}

// The copy engine's bandwidth under the fault nonblocking_d2h_unfenced: 2 GB/s (a bus; 8 ms for
// 16 MiB).
constexpr int64_t kDmaBytesPerUs = 2000;

void copy_any(const at::Tensor& dst, const at::Tensor& src, bool allow_offset_fault,
              bool non_blocking) {
  if (dst.numel() == 0) return;
  const bool dst_dev = dst.device().is_privateuseone(), src_dev = src.device().is_privateuseone();
  const bool cross = dst_dev != src_dev;
  const bool d2h = src_dev && !dst_dev;
  // Faults: both sides of npu<->CPU copies, or only the npu source of device->host copies.
  const bool ignore = allow_offset_fault && cross && fault(Fault::CopyIgnoresOffset);
  const bool ignore_src = ignore || (allow_offset_fault && d2h && fault(Fault::D2hIgnoresOffset));
  CopyPlan plan;
  if (dst_dev && src_dev && src.numel() > 0) {
    auto a = span(dst), b = span(src);
    plan.stage_src = a.first < b.second && b.first < a.second;
  }
  plan.drop_last = allow_offset_fault && d2h && fault(Fault::D2hDropsLast) && dst.numel() > 1 &&
                   dst.is_contiguous();
  plan.truncate_bf16 = dst.scalar_type() == at::kBFloat16 &&
                       at::isFloatingType(src.scalar_type()) &&
                       src.scalar_type() != at::kBFloat16 && fault(Fault::ToBf16Truncates);
  if (!enpuGetAsync() || (!dst_dev && !src_dev)) {
    run_copy(cpu_alias(dst, ignore, /*write=*/true), cpu_alias(src, ignore_src, /*write=*/false),
             plan);
    return;
  }
  check_copy(dst, src);
  Side d = side_of(dst, ignore), s = side_of(src, ignore_src);
  // A host source may change once the copy returns, unless it is pinned and non_blocking.
  if (s.host.defined() && !(non_blocking && is_pinned_ptr(src.data_ptr()))) s.host = src.clone();
  const bool fence = d2h && !(non_blocking && is_pinned_ptr(dst.data_ptr()));
  const int dev = device_index(d2h ? src.device() : dst.device());
  // the fault: every copy on the default stream, whatever stream is current
  enpuStream_t stream = fault(Fault::CopyOnDefaultStream) ? 0 : enpuGetStream(dev);
  const bool peer = dst_dev && src_dev && dst.device() != src.device();
  if (peer) order_after(dev, stream, device_index(src.device()));  // the source's work first
  const enpuWorkKind kind = d2h ? enpuWorkD2H : (src_dev ? enpuWorkD2D : enpuWorkH2D);
  int64_t dma_us = 0;  // the copy engine's transfer time (fault nonblocking_d2h_unfenced)
  if (d2h && !fence && fault(Fault::NonblockingD2hUnfenced)) {
    // the copy runs on the device's copy engine after the work queued so far, but the stream
    // does not wait for it: an event recorded after it can be reached before the copy ran. The
    // engine moves DMA_BYTES_PER_US, as a bus does (a host memmove would race the host's read)
    const enpuStream_t engine = enpu::copyEngineStream(dev);
    order_after(dev, engine, dev);
    stream = engine;
    dma_us = 1 + static_cast<int64_t>(dst.numel() * dst.element_size()) / kDmaBytesPerUs;
  }
  enqueue_work(dev, stream, kind, [d, s, plan, dma_us] {
    if (dma_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(dma_us));
    run_copy(d.alias(/*write=*/true), s.alias(/*write=*/false), plan);
  });
  // the source's later work (and a reuse of its block) waits for the copy, as CUDA's
  if (peer) order_after(device_index(src.device()), enpuGetStream(device_index(src.device())), dev);
  if (fence) check_runtime(enpuStreamSynchronize(dev, stream));
}

void copy_bytes(c10::Device dev, void* dst, const void* src, size_t n) {
  if (n == 0) return;
  if (!enpuGetAsync()) {
    check_runtime(enpuMemcpy(dst, src, n, enpuMemcpyDeviceToDevice));
    return;
  }
  const int d = device_index(dev);
  enqueue_work(d, enpuGetStream(d), enpuWorkD2D, [dst, src, n] { std::memmove(dst, src, n); });
}

void sync_for_host(c10::Device dev) {
  if (!enpuGetAsync()) return;
  const int d = device_index(dev);
  check_runtime(enpuStreamSynchronize(d, enpuGetStream(d)));
}

at::Tensor stage(const at::Tensor& t, at::IntArrayRef shape, at::ScalarType dt, c10::Device dev) {
  const bool on_dev = t.device().is_privateuseone();
  if (on_dev && t.scalar_type() == dt && t.sizes() == shape && t.is_contiguous() && !t.is_conj() &&
      !t.is_neg())
    return t;
  at::Tensor src = t.sizes() == shape ? t : t.expand(shape);
  at::Tensor out = empty_dev(shape, dt, dev);
  if (!on_dev || src.scalar_type() == dt || !native_ok({src, out})) {
    copy_any(out, src);
    return out;
  }
  at::Tensor g = src;
  if (!g.is_contiguous() || g.is_conj() || g.is_neg()) {
    g = empty_dev(shape, src.scalar_type(), dev);
    copy_any(g, src);
  }
  launch("cast", dev, [from = kdt(g.scalar_type()), to = kdt(dt), gp = g.data_ptr(),
                       op = out.data_ptr(), n = out.numel()] { k::cast(from, to, gp, op, n); });
  return out;
}

at::Tensor finish(const at::Tensor& r, const at::Tensor& meta, c10::Device dev) {
  if (r.scalar_type() == meta.scalar_type() && r.sizes() == meta.sizes() &&
      (r.strides() == meta.strides() || meta.numel() <= 1))
    return r;
  at::Tensor o = empty_strided_dev(meta.sizes(), meta.strides(), meta.scalar_type(), dev);
  copy_any(o, r);
  return o;
}

size_t bytes_needed(const at::Tensor& t, at::IntArrayRef sizes) {
  return static_cast<size_t>(t.storage_offset() + c10::multiply_integers(sizes)) * t.itemsize();
}

const at::Tensor& resize_on_host(const at::Tensor& t, at::IntArrayRef sizes,
                                 std::optional<at::MemoryFormat> mf) {
  if (enpuGetAsync() && t.device().is_privateuseone() && bytes_needed(t, sizes) > t.storage().nbytes())
    sync_for_host(t.device());
  return at::native::resize_(t, sizes, mf);
}

void resize_out_like(const at::Tensor& out, const at::Tensor& meta_out) {
  if (out.sizes() == meta_out.sizes()) return;
  resize_on_host(out, meta_out.sizes());
  if (out.strides() != meta_out.strides())
    out.unsafeGetTensorImpl()->set_sizes_and_strides(meta_out.sizes(), meta_out.strides());
}

void scalar_bytes(const at::Scalar& v, at::ScalarType dt, void* out) {
#define ENPU_SB(T, ST)              \
  case at::ScalarType::ST: {        \
    T x = v.to<T>();                \
    std::memcpy(out, &x, sizeof x); \
    return;                         \
  }
  switch (dt) {
    ENPU_SB(uint8_t, Byte)
    ENPU_SB(int8_t, Char)
    ENPU_SB(int16_t, Short)
    ENPU_SB(int, Int)
    ENPU_SB(int64_t, Long)
    ENPU_SB(c10::Half, Half)
    ENPU_SB(float, Float)
    ENPU_SB(double, Double)
    ENPU_SB(bool, Bool)
    ENPU_SB(c10::BFloat16, BFloat16)
    default:
      TORCH_CHECK(false, "echo_npu: unsupported dtype ", dt);
  }
#undef ENPU_SB
}

at::Tensor wrap_scalar(const at::Scalar& s) {
  auto t = at::scalar_tensor(s, at::TensorOptions().dtype(s.type()).device(c10::kCPU));
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

}  // namespace enpu

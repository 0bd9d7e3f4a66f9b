// echo_npu kernels: random draws from the device's generators (uniform_, normal_, random_).
// A device generator is a CPU-algorithm generator (device/generator.cpp), so a draw runs CPU's
// kernel with a CPU generator holding the device generator's state, which then takes the
// advanced state back: the device draws exactly what CPU draws from the same seed, and
// torch.npu.manual_seed / set_rng_state / Generator(device="npu") govern the draws (through
// cpu_fallback they came from CPU's default generator and refused a device generator). Routed
// through cpu_fallback (set_fallback_routes), they are as before (any dtype CPU draws in is
// served here: the kernels are CPU's).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/normal.h>
#include <ATen/ops/random.h>
#include <ATen/ops/uniform.h>

#include <mutex>

#include "../device/device.h"
#include "common.h"
#include "ops.h"

namespace enpu::ops {
namespace {

// Runs draw(cpu_view, cpu_generator) on a CPU tensor laid out as self, then writes it into
// self. A CPU generator passed in is used as it is (as the fallback did).
template <typename F>
Tensor& draw_into(Tensor& self, const std::optional<at::Generator>& gen, F draw) {
  at::Generator device_gen =
      gen.has_value() && gen->defined() ? *gen : default_generator(self.device().index());
  at::Tensor cpu = at::empty_strided(self.sizes(), self.strides(), self.options().device(at::kCPU));
  if (device_gen.device().is_cpu()) {
    draw(cpu, device_gen);
  } else {
    TORCH_CHECK(device_gen.device().is_privateuseone(),
                "Expected a 'npu' device type for generator but found '", device_gen.device().type(),
                "'");
    std::lock_guard<std::mutex> lk(device_gen.mutex());
    at::Generator cpu_gen = at::make_generator<at::CPUGeneratorImpl>();
    cpu_gen.set_state(device_gen.get_state());
    draw(cpu, cpu_gen);
    device_gen.set_state(cpu_gen.get_state());
  }
  copy_any(self, cpu);
  return self;
}

}  // namespace

Tensor& uniform_(Tensor& self, double from, double to, std::optional<at::Generator> gen) {
  OpScope s("uniform_");
  if (routed("uniform_")) return fallback<at::_ops::uniform_>(self, from, to, gen);
  return draw_into(self, gen, [&](at::Tensor& t, const at::Generator& g) { t.uniform_(from, to, g); });
}

Tensor& normal_(Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  OpScope s("normal_");
  if (routed("normal_")) return fallback<at::_ops::normal_>(self, mean, std, gen);
  return draw_into(self, gen, [&](at::Tensor& t, const at::Generator& g) { t.normal_(mean, std, g); });
}

Tensor& random_(Tensor& self, std::optional<at::Generator> gen) {
  OpScope s("random_");
  if (routed("random_")) return fallback<at::_ops::random_>(self, gen);
  return draw_into(self, gen, [&](at::Tensor& t, const at::Generator& g) { t.random_(g); });
}

Tensor& random__from(Tensor& self, int64_t from, std::optional<int64_t> to,
                     std::optional<at::Generator> gen) {
  OpScope s("random_.from");
  if (routed("random_.from"))
    return fallback<at::_ops::random__from>(self, from, to, gen);
  return draw_into(self, gen, [&](at::Tensor& t, const at::Generator& g) { t.random_(from, to, g); });
}

Tensor& random__to(Tensor& self, int64_t to, std::optional<at::Generator> gen) {
  OpScope s("random_.to");
  if (routed("random_.to")) return fallback<at::_ops::random__to>(self, to, gen);
  return draw_into(self, gen, [&](at::Tensor& t, const at::Generator& g) { t.random_(to, g); });
}

}  // namespace enpu::ops

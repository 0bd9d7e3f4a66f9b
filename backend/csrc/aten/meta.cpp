// echo_npu's meta checks for the ops torch has no C++ meta function for (see meta.h): CPU's own
// TensorIterator configurations, built on meta tensors.
#include "meta.h"

#include <ATen/TensorIterator.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/result_type.h>

namespace enpu::ops {

at::Tensor unary_meta(const at::Tensor& self) {
  at::TensorBase out;
  auto iter = at::TensorIterator::unary_op(out, self);
  return iter.output();
}

void unary_meta_out(const at::Tensor& self, at::Tensor& out) {
  at::TensorIterator::unary_op(out, self);
}

void check_broadcasts_into(const at::Tensor& self, const at::Tensor& other) {
  at::TensorIteratorConfig()
      .set_check_mem_overlap(false)
      .check_all_same_dtype(false)
      .resize_outputs(false)
      .add_output(self)
      .add_input(other)
      .build();
}

at::Tensor where_meta(const at::Tensor& cond, const at::Tensor& self, const at::Tensor& other) {
  const auto ct = at::result_type(self, other);
  // CPU takes a uint8 condition (with a deprecation warning) as bool
  TORCH_CHECK(cond.scalar_type() == at::kBool || cond.scalar_type() == at::kByte,
              "where expected condition to be a boolean tensor, but got a tensor with dtype ",
              cond.scalar_type());
  // CPU's where moves a 0-dim CPU operand to the output's device
  auto on_meta = [](const at::Tensor& t) {
    return t.device().is_cpu() ? at::empty({}, t.options().device(c10::kMeta)) : t;
  };
  at::Tensor c = on_meta(cond), a = on_meta(self), b = on_meta(other);
  auto iter = at::TensorIteratorConfig()
                  .check_all_same_dtype(false)
                  .declare_static_dtype_and_device(ct, c10::Device(c10::kMeta))
                  .add_owned_output(at::Tensor())
                  .add_input(c)
                  .add_input(a)
                  .add_input(b)
                  .build();
  return iter.output();
}

}  // namespace enpu::ops

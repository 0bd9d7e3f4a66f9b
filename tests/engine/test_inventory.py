"""Golden inventory: the aten overloads echo_npu registers, as the dispatcher reports them.

A registration added or removed in the backend shows up here as a diff. After an intended
change, refresh with: EXPECTTEST_ACCEPT=1 python -m pytest tests/engine/test_inventory.py
"""

import expecttest
import torch

from conformance.engine import discovery


class TestInventory(expecttest.TestCase):
    def test_registered_overloads(self):
        import echo_npu  # noqa: F401  (registers the device)

        names = discovery.registered_overloads()
        self.assertExpectedInline(
            "\n".join(names),
            """\
_copy_from
_copy_from_and_resize
_foreach_mul_.Scalar
_fused_sgd_
_local_scalar_dense
_reshape_alias
_softmax
_thnn_fused_gru_cell
_thnn_fused_gru_cell_backward
_thnn_fused_lstm_cell
_thnn_fused_lstm_cell_backward_impl
abs
abs.out
abs_
add.Tensor
add.out
add_.Tensor
all
all.dim
amax
any
any.dim
as_strided
cat
convolution_backward_overrideable
convolution_overrideable
cumsum
cumsum.out
cumsum_
div.Tensor
div.out
div_.Tensor
empty.memory_format
empty_strided
eq.Scalar
eq.Tensor
exp
exp.out
exp_
fill_.Scalar
fill_.Tensor
ge.Scalar
ge.Tensor
gt.Scalar
gt.Tensor
index_select
le.Scalar
le.Tensor
lt.Scalar
lt.Tensor
masked_fill_.Scalar
masked_fill_.Tensor
mean.dim
mm
mul.Tensor
mul.out
mul_.Tensor
ne.Scalar
ne.Tensor
neg
neg.out
neg_
normal_
random_
random_.from
random_.to
record_stream
relu
relu_
resize_
set_.source_Storage
set_.source_Storage_storage_offset
set_.source_Tensor
sqrt
sqrt.out
sqrt_
sub.Tensor
sub.out
sub_.Tensor
sum.dim_IntList
tril
triu
uniform_
view
view_as_complex
view_as_real
where.self
zero_""",
        )

    def test_everything_else_reaches_the_boxed_fallback(self):
        import echo_npu  # noqa: F401

        self.assertTrue(discovery.has_backend_fallback())
        self.assertEqual(discovery.how_reached("nonzero"), "backend fallback")
        self.assertEqual(discovery.how_reached("masked_fill_.Scalar"), "kernel")
        self.assertEqual(discovery.resolve("abs"), torch.ops.aten.abs.default)

    def test_fallback_overloads_skip_only_what_never_reaches_the_fallback(self):
        """The pre-filter (a kernel the key runs before its fallback) leaves out no overload
        whose dispatch table says 'backend fallback': checked against every aten overload, for
        echo_npu's key and for XLA given a fallback here (CompositeExplicitAutograd-
        NonFunctional's kernels do not cover XLA: they reach its fallback)."""
        import echo_npu  # noqa: F401

        every = {s.name.removeprefix("aten::").strip("_") for s in torch._C._jit_get_all_schemas()}
        xla = torch._C._dispatch_library("IMPL", "_", "XLA")
        xla.fallback_fallthrough()
        try:
            for key in ("PrivateUse1", "XLA"):
                found = discovery.fallback_overloads(every, key)
                by_table = sorted(
                    o
                    for o in self._aten_overloads()
                    if discovery.how_reached(o, key) == "backend fallback"
                )
                self.assertEqual(found, by_table, key)
            self.assertIn("nonzero", discovery.fallback_overloads(every))
            self.assertIn("_linalg_det", discovery.fallback_overloads(every, "XLA"))
        finally:
            del xla  # its fallback goes with it
        self.assertEqual(discovery.how_reached("nonzero", "XLA"), "none")

    @staticmethod
    def _aten_overloads() -> set[str]:
        return {
            (s.name[6:] + (f".{s.overload_name}" if s.overload_name else ""))
            for s in torch._C._jit_get_all_schemas()
            if s.name.startswith("aten::")
        }

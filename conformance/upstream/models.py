"""PyTorch's own device-generic OpInfo tests, modelled: the tests a generated entry applies to.

Each row is one test method as PyTorch's test files declare it: which OpInfos its `@ops` list
instantiates, in which dtypes (its `OpDTypes` rule and `allowed_dtypes`, resolved as
`common_device_type.ops` resolves them for a PrivateUse1 device: the OpInfo's CPU dtypes), on
which inputs (the OpInfo's sample or reference inputs, as they come or made non-contiguous, or
the inputs a test generates itself), what it compares (the device against CPU, against the
OpInfo's numpy reference computed on a CPU copy, or against itself), at what tolerance, and the
gates that skip it on a PrivateUse1 device unless lifted.

Read from PyTorch's test/test_ops.py, test/test_unary_ufuncs.py, test/test_binary_ufuncs.py and
test/test_reductions.py, and the installed torch's `torch.testing._internal` (the OpDTypes rules,
`noncontiguous_like`, the elementwise input generators). The rows hold for torch 2.13 to 2.15;
`tests/upstream/test_models.py` holds each row's op list and dtypes to what
`instantiate_device_type_tests` makes of the PyTorch-style tests written from these rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache

import torch

from conformance.errors import ConformanceUsageError

__all__ = (
    "MODELS",
    "DEFAULT_TESTS",
    "UpstreamTest",
    "binary_ufuncs_class",
    "dtypes_of",
    "model",
    "op_list",
    "resolved",
)

#: compares: the device against torch on CPU, against the OpInfo's numpy reference (computed on a
#: CPU copy of the inputs: as CPU for the suite's purposes), or against itself
COMPARES = ("cpu", "numpy", "self")
#: inputs: OpInfo.reference_inputs / sample_inputs as they come, sample inputs made
#: non-contiguous (`SampleInput.noncontiguous()`), sample inputs through the function and the
#: in-place variant (on a copy), or the test's own generated tensors
INPUTS = ("reference", "sample", "sample-noncontiguous", "sample-inplace", "generated")

FLOATING = ("float16", "bfloat16", "float32", "float64", "complex64", "complex128")


@dataclass(frozen=True)
class UpstreamTest:
    """One PyTorch test method, as a PrivateUse1 device runs it."""

    file: str
    cls: str
    test: str
    ops: str  # a rule of OP_LISTS
    dtypes: str  # an OpDTypes rule: supported | any_one | any_common_cpu_cuda_one | none
    inputs: str  # INPUTS
    compares: str  # COMPARES
    allowed: tuple[str, ...] | None = None  # allowed_dtypes
    skipped_dtypes: tuple[str, ...] = ()  # dtypes the test body skips (self.skipTest)
    generator: str = ""  # generated inputs: the opinfo/core generator (elementwise_unary_...)
    nonfinite: bool = False  # generated inputs: they hold NaN and infinities (extremal tests)
    tolerance: str = "default"  # TOLERANCES
    gates: tuple[str, ...] = ()  # what skips it on a PrivateUse1 device unless lifted
    note: str = ""

    @property
    def name(self) -> str:
        return f"{self.cls}.{self.test}"

    @property
    def needs_bypass(self) -> bool:
        """Whether an `@onlyOn`-style gate skips it unless `bypass_device_restrictions`."""
        return any(g.startswith("onlyOn") for g in self.gates)

    def tolerance_for(self, dtype: str) -> tuple[float, float]:
        """(rtol, atol) of its comparison in `dtype`."""
        return TOLERANCES[self.tolerance](dtype)

    def describe(self) -> str:
        what = {"cpu": "against CPU", "numpy": "against numpy on CPU", "self": "against itself"}
        return (
            f"{self.file} {self.name}: {self.ops} ({self.dtypes}"
            + (f", allowed {'/'.join(self.allowed)}" if self.allowed else "")
            + f"), {self.inputs}{' ' + self.generator if self.generator else ''} inputs, "
            f"{what[self.compares]}, tolerance {self.tolerance}"
            + (f"; gates: {', '.join(self.gates)}" if self.gates else "")
        )


def _default(dtype: str) -> tuple[float, float]:
    from torch.testing._comparison import default_tolerances

    return default_tolerances(getattr(torch, dtype))


def _compare_cpu(dtype: str) -> tuple[float, float]:
    return (1e-3, 1e-3) if dtype in FLOATING else (0.0, 0.0)


def _unary_numerics(dtype: str) -> tuple[float, float]:
    special = {"uint8": (1e-3, 1e-2), "int8": (1e-3, 1e-2), "bool": (1e-3, 1e-2),
               "bfloat16": (16e-3, 1e-5), "float16": (1.2e-3, 1e-3)}  # fmt: skip
    return special.get(dtype) or _default(dtype)


def _binary_numerics(dtype: str) -> tuple[float, float]:
    return (16e-3, 1e-5) if dtype == "bfloat16" else _default(dtype)


#: tolerance rules: (rtol, atol) by dtype
TOLERANCES: dict[str, Callable[[str], tuple[float, float]]] = {
    "default": _default,  # assertEqual's, by dtype
    "1e-3": _compare_cpu,  # test_compare_cpu: atol = rtol = 1e-3 for floating, exact otherwise
    "unary-numerics": _unary_numerics,  # _helper_reference_numerics
    "binary-numerics": _binary_numerics,
}

_ONLY_ACCELERATORS = "onlyOn(['cuda', 'xpu']): lifted by bypass_device_restrictions"
_EXTREMAL = ("float16", "bfloat16", "float32", "float64", "complex64", "complex128")

#: the modelled tests (torch 2.13 to 2.15)
MODELS: tuple[UpstreamTest, ...] = (
    UpstreamTest(
        "test_ops.py", "TestCommon", "test_compare_cpu", "no_numpy_ref",
        "any_common_cpu_cuda_one", "reference", "cpu", tolerance="1e-3",
        gates=(_ONLY_ACCELERATORS,),
        note="the OpInfos without a numpy reference, in one dtype (float32 for most)",
    ),
    UpstreamTest(
        "test_ops.py", "TestCommon", "test_numpy_ref", "ref_test_ops", "supported",
        "reference", "numpy", allowed=("float64", "int64", "complex128"),
        note="the OpInfos with a numpy reference that no ufunc or reduction test covers; "
        "skipped where the device's name holds 'cpu'",
    ),
    UpstreamTest(
        "test_ops.py", "TestCommon", "test_noncontiguous_samples", "op_db", "supported",
        "sample-noncontiguous", "self", allowed=("float32", "int64", "complex64"),
        note="each sample made non-contiguous (last dim doubled, every other element) against "
        "the contiguous sample, on the device",
    ),
    UpstreamTest(
        "test_ops.py", "TestCommon", "test_variant_consistency_eager", "op_db", "supported",
        "sample-inplace", "self", allowed=("float32", "complex64"),
        note="the method and in-place variants against the function on the device, and the "
        "in-place result in its input's storage (gradients too upstream: not modelled)",
    ),
    *(
        UpstreamTest(
            "test_unary_ufuncs.py", "TestUnaryUfuncs", f"test_reference_numerics_{kind}",
            "unary_ufuncs_with_ref", "supported", "generated", "numpy",
            allowed=_EXTREMAL if kind == "extremal" else None,
            skipped_dtypes=skipped, generator=f"elementwise_unary{suffix}",
            nonfinite=kind == "extremal", tolerance="unary-numerics",
        )
        for kind, suffix, skipped in (
            ("normal", "", ()),
            ("small", "_small_value", ("bool",)),
            ("large", "_large_value", ("bool", "uint8", "int8")),
            ("extremal", "_extremal_value", ()),
        )
    ),
    *(
        UpstreamTest(
            "test_binary_ufuncs.py", "TestBinaryUfuncs", f"test_reference_numerics{kind}",
            "binary_ufuncs_with_ref", "supported", "generated", "numpy", allowed=allowed,
            skipped_dtypes=skipped, generator=f"elementwise_binary{suffix}",
            nonfinite=kind == "_extremal_values", tolerance="binary-numerics",
        )
        for kind, suffix, allowed, skipped in (
            ("", "", None, ()),
            ("_small_values", "_small_value", None, ("bool",)),
            ("_large_values", "_large_value",
             ("int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
              "complex64", "complex128"), ()),
            ("_extremal_values", "_extremal_value", _EXTREMAL, ()),
        )  # fmt: skip
    ),
    UpstreamTest(
        "test_reductions.py", "TestReductions", "test_ref_extremal_values",
        "reductions_with_ref", "supported", "generated", "numpy",
        allowed=("float32", "complex64"), generator="reduction_extremal", nonfinite=True,
        note="a (5,) tensor whose element 2 is each of 0, 1, nan, inf, -inf",
    ),
)  # fmt: skip
#: what an entry applies to when `--test` does not say
DEFAULT_TESTS = MODELS


@cache
def binary_ufuncs_class() -> str:
    """test_binary_ufuncs.py's test class in the installed torch: `TestBinaryUfuncsDevice` where
    op_db's DecorateInfos name it so (torch 2.13), else `TestBinaryUfuncs`."""
    from torch.testing._internal.common_methods_invocations import op_db

    names = {getattr(d, "cls_name", None) for op in op_db for d in op.decorators}
    return "TestBinaryUfuncsDevice" if "TestBinaryUfuncsDevice" in names else "TestBinaryUfuncs"


def resolved(test: UpstreamTest) -> UpstreamTest:
    """`test` with its class named as the installed torch names it."""
    if test.cls == "TestBinaryUfuncs":
        return dataclasses.replace(test, cls=binary_ufuncs_class())
    return test


def model(name: str) -> UpstreamTest:
    """`Class.test_name` -> its model, or a one-line error naming the modelled tests."""
    for m in MODELS:
        if name in (m.name, resolved(m).name):
            return m
    raise ConformanceUsageError(
        f"--test {name}: not a modelled upstream test; modelled: "
        + ", ".join(m.name for m in MODELS)
    )


@cache
def _lists() -> dict[str, frozenset[str]]:
    """OpInfo full names of each op list rule (op_db's OpInfos; python_ref_db's `_refs` are not
    modelled: their tests run a decomposition, not the backend's kernel of the op)."""
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.testing._internal.opinfo.core import (
        BinaryUfuncInfo,
        ReductionOpInfo,
        SpectralFuncInfo,
        UnaryUfuncInfo,
    )

    def names(pred: Callable[[object], bool]) -> frozenset[str]:
        return frozenset(op.full_name for op in op_db if pred(op))

    kinds = (UnaryUfuncInfo, ReductionOpInfo, SpectralFuncInfo, BinaryUfuncInfo)
    return {
        "op_db": names(lambda op: True),
        "no_numpy_ref": names(lambda op: op.ref is None),
        "ref_test_ops": names(lambda op: not isinstance(op, kinds) and op.ref is not None),
        "unary_ufuncs_with_ref": names(
            lambda op: isinstance(op, UnaryUfuncInfo) and op.ref is not None
        ),
        "binary_ufuncs_with_ref": names(
            lambda op: isinstance(op, BinaryUfuncInfo) and op.ref is not None
        ),
        "reductions_with_ref": names(
            lambda op: isinstance(op, ReductionOpInfo) and op.ref is not None
        ),
    }


def op_list(rule: str) -> frozenset[str]:
    """The OpInfo full names an op list rule holds."""
    return _lists()[rule]


def dtypes_of(test: UpstreamTest, op: object) -> list[str]:
    """The dtypes `test` runs for OpInfo `op` on a PrivateUse1 device (after the body's skips),
    in `common_device_type.ops`' order of preference."""
    from torch.testing._internal.common_device_type import ANY_DTYPE_ORDER

    supported = set(op.dtypes)  # type: ignore[attr-defined]  # PrivateUse1: CPU's dtypes
    if test.dtypes == "supported":
        chosen: Iterable[torch.dtype] = supported
    elif test.dtypes == "any_one":
        both = supported & set(op.backward_dtypes)  # type: ignore[attr-defined]
        chosen = [d for d in ANY_DTYPE_ORDER if d in (both or supported)][:1]
    elif test.dtypes == "any_common_cpu_cuda_one":
        common = supported & set(op.dtypesIfCUDA)  # type: ignore[attr-defined]
        chosen = [d for d in ANY_DTYPE_ORDER if d in common][:1]
    else:
        raise ValueError(f"unknown OpDTypes rule {test.dtypes!r}")
    names = [str(d).removeprefix("torch.") for d in chosen]
    if test.allowed is not None:
        names = [d for d in names if d in test.allowed]
    return sorted(d for d in names if d not in test.skipped_dtypes)

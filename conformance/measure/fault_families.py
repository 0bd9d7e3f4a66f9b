"""The fault families the power tool (`power.py`) measures: what each check must catch, per dtype.

A `Family` names one kind of fault, the check that must catch it, the overload as a run names
its case (value set or mode included), the grid of magnitudes and the target per dtype: the
largest magnitude that must be caught, with a note where a target is where it is. `FAMILIES` is
the table; `planted_faults.py` plants each family's fault in echo_npu's kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from conformance.record import CaseId

__all__ = ["FAMILIES", "FLOATS", "PARAMETER", "RELATIVE", "SWITCH", "Family", "dtype_name"]

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
RELATIVE = (0.3, 0.1, 0.05, 0.03, 0.02, 0.01, 5e-3, 3e-3, 2e-3, 1e-3, 5e-4, 2e-4, 1e-4)
RELATIVE += (3e-5, 1e-5, 3e-6, 1e-6, 3e-7, 1e-7)
PARAMETER = (0.3, 0.1, 0.05, 0.03, 0.02, 0.01, 5e-3)
SWITCH = (1.0,)  # on or off


def dtype_name(dtype: torch.dtype) -> str:
    """``float32`` of ``torch.float32``."""
    return str(dtype).removeprefix("torch.")


@dataclass
class Family:
    """One kind of planted fault."""

    name: str
    check: str  # the check family that should catch it
    overload: str
    unit: str  # how the magnitude reads
    grid: tuple[float, ...]
    targets: dict[torch.dtype, float]  # the largest magnitude that must be caught
    mode: str = ""  # the case id's last part: "" (ordinary), a value set or a mode ("grad")
    note: str | dict[torch.dtype, str] = ""  # why a target is where it is (per dtype, or all)

    @property
    def dtypes(self) -> list[torch.dtype]:
        return list(self.targets)

    def case(self, dtype: torch.dtype) -> CaseId:
        """The case the family's fault is measured in: contiguous, on the planted kernel (the
        native path)."""
        return CaseId(self.overload, dtype_name(dtype), "contiguous", "native", self.mode)


FAMILIES = [
    Family(
        "output scaled by 1+e",
        "values",
        "mul.Tensor",
        "relative",
        RELATIVE,
        {torch.float32: 1e-4, torch.float64: 1e-6, torch.float16: 5e-3, torch.bfloat16: 0.03},
        note={torch.bfloat16: "rounded to bfloat16, 1 % is one to two ulps"},
    ),
    Family(
        "one element off by e",
        "values",
        "mul.Tensor",
        "relative",
        RELATIVE,
        {torch.float32: 1e-4, torch.float64: 1e-6, torch.float16: 5e-3, torch.bfloat16: 0.03},
    ),
    *[
        Family(
            "gradient scaled by 1+e",
            "grad",
            op,
            "relative",
            RELATIVE,
            {torch.float32: 1e-3, torch.float64: 1e-3, torch.float16: 0.03, torch.bfloat16: 0.03},
            mode="grad",
        )
        for op in ("gelu", "native_batch_norm")
    ],
    Family(
        "1 ulp toward zero, in an op CPU rounds correctly",
        "rounding",
        "mul.Tensor",
        "on/off",
        SWITCH,
        {torch.float32: 1.0, torch.float64: 1.0, torch.float16: 1.0, torch.bfloat16: 1.0},
        note="every nonzero result one ulp toward zero (round-toward-zero); CPU's product is "
        "measured exact (engine/exactness.py): bit for bit",
    ),
    Family(
        "output scaled by 1+e",
        "rounding",
        "sqrt",
        "relative",
        RELATIVE,
        {torch.float32: 1e-4, torch.float64: 1e-6, torch.float16: 5e-3, torch.bfloat16: 0.03},
        note="IEEE requires sqrt correctly rounded; CPU's float32/float64 sqrt is not on every "
        "element (1 ulp off on 17 % / 1 % here): CPU's bits or the correctly rounded ones",
    ),
    Family(
        "1 ulp away from zero on every 8th element",
        "rounding",
        "sqrt",
        "on/off",
        SWITCH,
        {torch.float32: 1.0, torch.float64: 1.0, torch.float16: 1.0, torch.bfloat16: 1.0},
        note="judged by tolerance before issue 43, where it passed in every dtype",
    ),
    Family(
        "the smallest result scaled by 1+e",
        "values",
        "exp",
        "relative",
        RELATIVE,
        {torch.float32: 0.05, torch.float64: 1e-3, torch.float16: 5e-3, torch.bfloat16: 0.03},
        mode="sizes",
        note="evidence per element (issue 56; pooled, a small result was allowed the largest "
        "one's error); float32/float64: the smallest results are near 1e-4, where the base "
        "atol (1e-5, 1e-7) is what bounds the figure; half precision: the rounding check",
    ),
    Family(
        "output scaled by 1+e",
        "values",
        "cumsum",
        "relative",
        RELATIVE,
        {torch.float32: 1e-4, torch.float64: 1e-6, torch.float16: 5e-3, torch.bfloat16: 0.03},
        mode="sizes",
        note="a 65,537-element scan judged by CPU's own error against float64, dtype= "
        "included (issue 56: it was CPU against itself)",
    ),
    Family(
        "bernoulli p + d",
        "values",
        "bernoulli_.float",
        "absolute",
        PARAMETER,
        {torch.float32: 0.02, torch.float64: 0.02},
    ),  # fmt: skip
    Family(
        "normal mean + d sigma",
        "values",
        "normal_",
        "sigma",
        PARAMETER,
        {torch.float32: 0.05, torch.float64: 0.05},
    ),  # fmt: skip
    Family(
        "normal std x (1+d)",
        "values",
        "normal_",
        "relative",
        PARAMETER,
        {torch.float32: 0.03, torch.float64: 0.03},
    ),  # fmt: skip
    Family(
        "uniform bounds + d x width",
        "values",
        "uniform_",
        "relative",
        PARAMETER,
        {torch.float32: 0.03, torch.float64: 0.03},
    ),  # fmt: skip
    Family(
        "exponential lambda x (1+d)",
        "values",
        "exponential_",
        "relative",
        PARAMETER,
        {torch.float32: 0.03, torch.float64: 0.03},
    ),  # fmt: skip
    Family(
        "geometric p x (1+d)",
        "values",
        "geometric_",
        "relative",
        PARAMETER,
        {torch.float32: 0.03, torch.float64: 0.03},
    ),  # fmt: skip
    Family(
        "multinomial weight of category 0 x (1+d)",
        "values",
        "multinomial",
        "relative",
        PARAMETER,
        {torch.float32: 0.05, torch.float64: 0.05},
        note="524,288 draws: a weight of 1 in 8 moves its category's share by 0.11 d, which "
        "is 5 standard errors at d = 0.021 (with 131,072, at 0.042: a 5 % fault was missed "
        "once in six)",
    ),
    Family(
        "random integers: a share d drawn as the lowest",
        "values",
        "random_.from",
        "absolute",
        PARAMETER,
        {torch.float32: 0.02, torch.float64: 0.02},
        note="[-3, 9): a share d moved to -3 shifts the mean by 5.5 d, 5 standard errors at "
        "d = 0.009 (131,072 draws)",
    ),
    Family(
        "a foreach list skips its last tensor",
        "values",
        "_foreach_mul_.Scalar",
        "on/off",
        SWITCH,
        {torch.float32: 1.0},
    ),  # fmt: skip
    Family(
        "an in-place op leaves one element stale",
        "written",
        "add_.Tensor",
        "on/off",
        SWITCH,
        {torch.float32: 1.0},
    ),  # fmt: skip
]

"""Which OpInfo tests a case of the run speaks for.

PyTorch's device-generic op tests are keyed by `OpInfo.full_name` and run the OpInfo's own
inputs (sample and reference inputs) through the OpInfo's callable, on the device, per dtype. A
case of the run (one aten overload, dtype, layout, path, value set) speaks for such a test only
where the test would make the same call: the overload maps to the OpInfo (its base name, as the
sample capture maps them: samples/opinfo.py), the OpInfo's own captured inputs of that dtype
reach the overload, and the case ran those inputs as they come (contiguous layout, the native
route, the ordinary samples or the OpInfo's special/promotion reference inputs), and the very
call that failed (its signature: dtypes, shapes and every other argument) is one the OpInfo's
own callable makes on its inputs of that dtype (`forward_calls`, recorded on CPU: a sample of
another OpInfo, of the suite's own op specs, or of a backward pass attributes nothing).
"""

from __future__ import annotations

import itertools
import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from conformance.engine.calls import Call
from conformance.engine.discovery import overload_name
from conformance.record import CaseId
from conformance.samples.opinfo import captured_calls, opinfo_db, opinfos_for, untracked
from conformance.samples.seeded import seeded

__all__ = (
    "COMPARED",
    "INPUT_OPS",
    "OpInfoView",
    "SPOKEN_FOR",
    "default_tolerance",
    "input_ops",
    "is_functional",
)

#: the case dimensions under which a case ran an OpInfo's inputs as an OpInfo test does
SPOKEN_FOR = {"layout": "contiguous", "path": "native", "values": ("", "special", "promotion")}
#: the checks whose failure a test comparing outputs with CPU (assertEqual) sees too: values
#: beyond the tolerance, dtype, shape, an error or a missing kernel where CPU computes. Others
#: (path, strides, aliasing, identity, written inputs, signed zero, a 1-ulp rounding) stay the
#: suite's findings and excuse nothing upstream
COMPARED = frozenset({"values", "dtype", "shape", "error", "unsupported"})


#: what `torch.testing.make_tensor` (torch/testing/_creation.py) calls on the device to build an
#: OpInfo test's inputs there, by kind of dtype: `torch.empty(...).uniform_` (complex through
#: `view_as_real`), `torch.randint` (empty + `random_.from`). The suite builds its inputs on CPU
#: and copies them; PyTorch's tests need these kernels before they call the op under test
INPUT_OPS = {
    "floating": ("empty.memory_format", "uniform_"),
    "complex": ("empty.memory_format", "uniform_", "view_as_real"),
    "integral": ("empty.memory_format", "random_.from"),
}


def input_ops(dtype: str) -> tuple[str, ...]:
    """The overloads make_tensor calls on the device for `dtype`."""
    t = getattr(torch, dtype)
    kind = "complex" if t.is_complex else "floating" if t.is_floating_point else "integral"
    return INPUT_OPS[kind]


def is_functional(overload: str) -> bool:
    """Whether the overload writes none of its arguments (not in-place, not out=)."""
    name, _, tag = overload.partition(".")
    packet = getattr(torch.ops.aten, name, None)
    op = getattr(packet, tag or "default", None) if packet is not None else None
    if op is None:
        return False
    return not any(a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments)


def default_tolerance(dtype: str) -> tuple[float, float]:
    """(rtol, atol) that `TestCase.assertEqual` uses for `dtype` by default."""
    from torch.testing._comparison import default_tolerances

    return default_tolerances(getattr(torch, dtype))


#: inputs an OpInfo test may run, at most (sample inputs, then reference inputs)
FORWARD_SCAN = 600


def signature_of(call: Call) -> str:
    """A call's signature as a failure message names its sample (`PlacedCall.signature` of a
    contiguous placement: quotes dropped, no `@cpu` marks)."""
    return call.signature().replace("'", "")


_PLACEMENT = re.compile(r"\(stride=\[[^\]]*\], offset=\d+\)")


def sample_signature(text: str) -> str:
    """A failure message's sample signature, comparable with `signature_of`: the `@cpu` marks
    of operands the suite kept on CPU (wrapped numbers among them) and the strides and offset
    of its layout dropped (the case's layout says which: the non-contiguous one is OpInfo's
    `noncontiguous_like`)."""
    return _PLACEMENT.sub("", text).replace("]@cpu", "]")


def value_class(args: tuple, kwargs: dict) -> str:
    """What a call's floating inputs hold: "nonfinite" (a NaN or an infinity), "special" (a
    signed zero, a subnormal or a dtype extreme, all finite) or "finite"."""
    found = "finite"
    for t in [*args, *kwargs.values()]:
        for x in t if isinstance(t, (list, tuple)) else (t,):
            if not isinstance(x, torch.Tensor) or not (x.is_floating_point() or x.is_complex()):
                continue
            if x.numel() == 0:
                continue
            v = torch.view_as_real(x) if x.is_complex() else x
            if not bool(torch.isfinite(v).all()):
                return "nonfinite"
            info = torch.finfo(v.dtype)
            a = v.abs()
            zero = v == 0
            if bool(((a < info.tiny) & ~zero).any() | (a == info.max).any()) or bool(
                (zero & torch.signbit(v)).any()
            ):
                found = "special"
    return found


class _Calls(TorchDispatchMode):
    """Records the signature of every aten call made under it, with the value classes its
    inputs held; `judged` is False while a sample whose outputs its test post-processes runs
    (linalg's sign-free comparisons)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, set[str]] = {}
        self.compared: set[str] = set()  # made by samples whose raw outputs the test compares
        self.judged = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "aten":
            sig = signature_of(Call(overload_name(func.name()), tuple(args), dict(kwargs)))
            self.seen.setdefault(sig, set()).add(value_class(tuple(args), kwargs))
            if self.judged:
                self.compared.add(sig)
        return func(*args, **kwargs)


@dataclass(frozen=True)
class Calls:
    """The aten calls a test makes for one OpInfo and dtype (forward only)."""

    seen: Mapping[str, frozenset[str]]  # signature -> the value classes of its inputs
    compared: frozenset[str]  # signatures whose outputs the test compares as they are

    def made(self, signature: str, values: bool = False, holding: str = "") -> bool:
        """Whether the test makes the call `signature`; `values`: and compares its outputs as
        they are; `holding`: on inputs of that value class (nonfinite, special: a special
        value of any kind)."""
        classes = self.seen.get(signature)
        if classes is None or (values and signature not in self.compared):
            return False
        if holding == "nonfinite":
            return "nonfinite" in classes
        if holding == "special":
            return bool(classes & {"nonfinite", "special"})
        return True


def _identity_code() -> object:
    """The code of SampleInput's default `output_process_fn_grad` (the identity)."""
    from torch.testing._internal.opinfo.core import SampleInput

    return SampleInput(torch.empty(0)).output_process_fn_grad.__code__


def _inplace(op, sample, expected: object, calls: _Calls) -> None:
    """The in-place variant's call on a copy of the sample, as test_variant_consistency_eager
    makes it (not where the function's result `expected` has another dtype, or the sample
    broadcasts its input: the test skips those)."""
    if op.inplace_variant is None or sample.broadcasts_input:
        return
    tensor = sample.input if isinstance(sample.input, torch.Tensor) else None
    if tensor is None or not isinstance(expected, torch.Tensor) or expected.dtype != tensor.dtype:
        return
    with calls:
        op.inplace_variant(tensor.clone(), *sample.args, **sample.kwargs)


def _inputs(op, t: torch.dtype, inputs: str) -> Iterable:
    """The samples a test of `inputs` kind (models.INPUTS) runs, built on CPU."""
    if inputs == "reference":
        return op.reference_inputs("cpu", t, requires_grad=False)
    samples = op.sample_inputs("cpu", t, requires_grad=False)
    if inputs in ("sample", "sample-inplace"):
        return samples
    if inputs == "sample-noncontiguous":
        return (s.noncontiguous() for s in samples)
    raise ValueError(f"no recorded calls for {inputs!r} inputs")


class OpInfoView:
    """The OpInfos of the installed torch, as the run's cases map to them."""

    def __init__(self, cache_dir: str | None) -> None:
        self.cache_dir = cache_dir
        self.db = opinfo_db()

    def cpu_dtypes(self, full_name: str) -> set[str]:
        """The dtypes an OpInfo test runs for a PrivateUse1 device (the OpInfo's CPU ones)."""
        op = self.db[full_name]
        return {str(d).removeprefix("torch.") for d in op.supported_dtypes("cpu")}

    @cache  # noqa: B019 - one view per generator run
    def of_overload(self, overload: str) -> tuple[str, ...]:
        """The OpInfos an overload's samples come from (those of this torch only)."""
        return tuple(n for n in opinfos_for(overload, self.cache_dir) if n in self.db)

    @staticmethod
    def spoken_for(case: CaseId) -> bool:
        """Whether the case ran OpInfo inputs as an OpInfo test runs them."""
        return (
            case.layout == SPOKEN_FOR["layout"]
            and case.path == SPOKEN_FOR["path"]
            and case.values in SPOKEN_FOR["values"]
        )

    @cache  # noqa: B019
    def calls(self, full_name: str, dtype: str, inputs: str = "reference") -> Calls:
        """The aten calls the OpInfo's own callable makes on CPU for its inputs of `dtype` of
        kind `inputs` (what a test of those inputs calls, forward only: no in-place or out=
        variant, no backward). "reference" holds the sample inputs too (OpInfo's default)."""
        op, t = self.db[full_name], getattr(torch, dtype)
        if t not in op.supported_dtypes("cpu"):
            return Calls({}, frozenset())
        calls, identity = _Calls(), _identity_code()
        with seeded(0), untracked(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            samples = _inputs(op, t, inputs)
            if inputs == "reference":
                samples = itertools.chain(op.sample_inputs("cpu", t, requires_grad=False), samples)
            for sample in itertools.islice(samples, FORWARD_SCAN):
                calls.judged = getattr(sample.output_process_fn_grad, "__code__", None) is identity
                try:
                    with calls:
                        result = op(sample.input, *sample.args, **sample.kwargs)
                    if inputs == "sample-inplace":
                        _inplace(op, sample, result, calls)
                except Exception:  # noqa: BLE001, S112 - CPU refuses this input: no call
                    continue
        seen = {sig: frozenset(classes) for sig, classes in calls.seen.items()}
        return Calls(seen, frozenset(calls.compared))

    def has_inplace(self, full_name: str) -> bool:
        """Whether the OpInfo has an in-place variant (test_variant_consistency_eager's)."""
        return self.db[full_name].inplace_variant is not None

    def reaches(self, full_name: str, overload: str, dtype: str) -> bool:
        """Whether the OpInfo's test of `dtype` calls `overload` on an operand of `dtype`."""
        prefix, operand = overload + "(", f"{dtype}["
        return any(s.startswith(prefix) and operand in s for s in self.calls(full_name, dtype).seen)

    def touches(self, full_name: str, overload: str, dtype: str) -> bool:
        """Whether any test of the OpInfo may call `overload` in `dtype`: its forward call, or
        the suite's capture of its in-place, out= and backward calls (a crash's reach)."""
        if self.reaches(full_name, overload, dtype):
            return True
        t = getattr(torch, dtype)
        return bool(captured_calls(overload, t, (full_name,), self.cache_dir, "samples"))

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
import warnings
from functools import cache

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from conformance.engine.calls import Call
from conformance.engine.discovery import overload_name
from conformance.record import CaseId
from conformance.samples.opinfo import captured_calls, opinfo_db, opinfos_for, untracked

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


def sample_signature(text: str) -> str:
    """A failure message's sample signature, comparable with `signature_of` (the `@cpu` marks
    of operands the suite kept on CPU, wrapped numbers among them, dropped)."""
    return text.replace("]@cpu", "]")


class _Calls(TorchDispatchMode):
    """Records the signature of every aten call made under it; `judged` is False while a sample
    whose outputs its test post-processes runs (linalg's sign-free comparisons)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()
        self.compared: set[str] = set()  # made by samples whose raw outputs the test compares
        self.judged = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "aten":
            sig = signature_of(Call(overload_name(func.name()), tuple(args), dict(kwargs)))
            self.seen.add(sig)
            if self.judged:
                self.compared.add(sig)
        return func(*args, **kwargs)


def _identity_code() -> object:
    """The code of SampleInput's default `output_process_fn_grad` (the identity)."""
    from torch.testing._internal.opinfo.core import SampleInput

    return SampleInput(torch.empty(0)).output_process_fn_grad.__code__


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
    def forward_calls(self, full_name: str, dtype: str) -> tuple[frozenset[str], frozenset[str]]:
        """The signatures of the aten calls the OpInfo's own callable makes on CPU for its
        sample and reference inputs of `dtype` (what its compare test calls, forward only: no
        in-place or out= variant, no backward), and those of them whose outputs the test
        compares as they are (not through the sample's `output_process_fn_grad`)."""
        op, t = self.db[full_name], getattr(torch, dtype)
        if t not in op.supported_dtypes("cpu"):
            return frozenset(), frozenset()
        calls, identity = _Calls(), _identity_code()
        torch.manual_seed(0)
        with untracked(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inputs = itertools.chain(
                op.sample_inputs("cpu", t, requires_grad=False),
                op.reference_inputs("cpu", t, requires_grad=False),
            )
            for sample in itertools.islice(inputs, FORWARD_SCAN):
                calls.judged = getattr(sample.output_process_fn_grad, "__code__", None) is identity
                try:
                    with calls:
                        op(sample.input, *sample.args, **sample.kwargs)
                except Exception:  # noqa: BLE001, S112 - CPU refuses this input: no call
                    continue
        return frozenset(calls.seen), frozenset(calls.compared)

    def made(self, full_name: str, dtype: str, signature: str, values: bool = False) -> bool:
        """Whether the OpInfo's test makes the call `signature` (a failing sample); `values`:
        and compares its outputs as they are (a value may differ where the test compares only
        what its post-processing keeps, as linalg's signs)."""
        seen, compared = self.forward_calls(full_name, dtype)
        return signature in (compared if values else seen)

    def reaches(self, full_name: str, overload: str, dtype: str) -> bool:
        """Whether the OpInfo's test of `dtype` calls `overload` on an operand of `dtype`."""
        prefix, operand = overload + "(", f"{dtype}["
        return any(
            s.startswith(prefix) and operand in s for s in self.forward_calls(full_name, dtype)[0]
        )

    def touches(self, full_name: str, overload: str, dtype: str) -> bool:
        """Whether any test of the OpInfo may call `overload` in `dtype`: its forward call, or
        the suite's capture of its in-place, out= and backward calls (a crash's reach)."""
        if self.reaches(full_name, overload, dtype):
            return True
        t = getattr(torch, dtype)
        return bool(captured_calls(overload, t, (full_name,), self.cache_dir, "samples"))

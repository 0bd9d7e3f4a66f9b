"""The `error` check, registered with checks.py's: where CPU raises, the device raises an error
of the same class (errorclass.py), or of the class torch's meta kernel raises for an input wrong
in two ways; a device "not implemented" is `Unsupported`, never a pass; CPU's own layout,
memory-format or missing-kernel refusal makes the sample `NotApplicable`."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch.utils._pytree import tree_map

from conformance.engine import errorclass
from conformance.engine.checks import NotApplicable, Sample, Unsupported, sample_check
from conformance.engine.compare import Mismatch
from conformance.engine.discovery import resolve


@sample_check(
    "error",
    "where CPU raises, the device raises an error of the same class (dtype, shape, device, index, "
    "value, ...); a device 'not implemented' is unsupported, never a pass",
    on_error=True,
)
def check_errors(s: Sample) -> None:
    expected, actual = s.expected.exc, s.actual.exc
    want = errorclass.classify(expected) if expected is not None else None
    got = errorclass.classify(actual) if actual is not None else None
    if want is not None and want.kind == errorclass.NOT_IMPLEMENTED:
        raise NotApplicable(f"cpu has no kernel for this sample ({want.describe()})")
    if want is not None and want.kind == errorclass.LAYOUT and not s.strict_errors:
        raise NotApplicable(
            f"not applicable to the {s.placed.layout} layout: cpu's kernel requires another "
            f"layout ({want.text}); --strict-errors compares it"
        )
    if got is not None and got.kind == errorclass.NOT_IMPLEMENTED:
        where = f"cpu raised {want.describe()}" if want else "cpu computes"
        raise Unsupported(f"device raised {got.describe()} where {where}", want is None)
    if want is not None and not s.backend.profile.storage.value:
        if errorclass.about_memory_format(want):
            raise NotApplicable(
                f"cpu raised {want.describe()}: a memory-format precondition, which a device "
                "without observable storage has no memory to apply to"
            )
    if want is not None and got is None:
        raise Mismatch("error", f"cpu raised {want.describe()}; the device returned normally")
    if want is None and got is not None:
        raise Mismatch("error", f"device raised {got.describe()}; cpu returned normally")
    assert want is not None and got is not None
    if errorclass.same_class(want, got):
        return
    meta = _meta_error(s)  # an input wrong in two ways: torch's meta kernel may check the other
    if meta is not None and errorclass.same_class(meta, got):
        return
    if errorclass.both_refused(want, got):
        s.notes.append(
            f"message quality: the device stopped at an internal check ({got.describe()}) "
            f"where cpu raised {want.describe()}: both refused the input, the check stating "
            f"a {errorclass.cause(got.text)} cause as cpu's error does"
        )
        return
    raise Mismatch(
        "error",
        f"device raised {got.describe()}, cpu raised {want.describe()} (a different class)"
        + errorclass.opaque_hint(want, got),
    )


def _meta_error(s: Sample) -> errorclass.ErrorClass | None:
    """The error class torch's meta kernel raises on the sample (None if it raises nothing)."""

    def to_meta(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
        return x

    cpu = s.placed.materialize("cpu")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            resolve(s.overload)(*tree_map(to_meta, cpu.args), **tree_map(to_meta, cpu.kwargs))
    except Exception as exc:  # noqa: BLE001 - the error is what we want
        return errorclass.classify(exc)
    return None

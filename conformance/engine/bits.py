"""The checks of the last bit: subnormals, signed zeros and correct rounding.

`isclose` is blind to all three: -0.0 equals 0.0, a flushed float32 subnormal is within atol of
itself, and one ulp is within every tolerance. Three sample checks (registered with the others
of engine/checks.py, on every floating value the outputs and written checks compare):

- `subnormal` (before `outputs`): where CPU's result is a subnormal and the device's is zero,
  the device flushes subnormal results (FTZ); where the device's result is CPU's on inputs with
  their subnormals made zero, it treats subnormal inputs as zero (DAZ). Raised only when that
  explains every difference beyond the tolerance (a wrong result is `values`). A manifest line
  `flushes_subnormals = ["float32"]` declares FTZ: where the device gives a zero and CPU a
  subnormal, the device is then judged against CPU's result flushed (compare.flush_subnormals)
  and this check is silent for the dtype.
- `signed-zero`: where CPU's result is +-0 and the device's is a zero of the other sign, unless
  the device's sign is the float64 result's (engine/truth.py: CPU's zero may be its own error). Owed
  by pointwise ops (torch's `pointwise` tag, of the overload or its functional sibling), by
  conversions and by the ops CPU is exact for (engine/exactness.py), except reductions (which
  zero a sum or a max of +-0 returns is the algorithm's: IEEE leaves max(-0, +0) open).
- `rounding` (before `outputs`): where CPU is exact for (overload, dtype)
  (engine/exactness.py), every element bit for bit (NaN payloads and the sign of zero aside:
  those are the checks above) or the correctly rounded result (the op on the inputs upcast to
  float64, rounded once: where CPU rounds an operand first, as its add does a float64 scalar
  into a float16 sum, a device that does not is as right), else the ulp distance and
  direction of the differences ("1 ulp toward zero on 48 % of elements: round-toward-zero?").
  Differences beyond the tolerance and more than one ulp away are wrong values, left to
  `outputs` (inf is one ulp past the largest finite value: an overflow that should not have
  happened is a rounding). For the functions IEEE only recommends, the ulps CUDA documents
  (engine/ulp_bounds.py); for sums, means, scans and matrix products, the error any order of
  accumulation allows (engine/accumulation.py); for any other op in float32 or float64, errors
  that lean one way where CPU's do not (engine/error_balance.py).
"""

from __future__ import annotations

import functools

import torch

from conformance.engine import accumulation, error_balance, exactness, ieee, truth, ulp_bounds
from conformance.engine.checks import IDENTICAL, Sample, invoke, sample_check
from conformance.engine.compare import (
    Mismatch,
    close_mask,
    flush_subnormals,
    same_bits,
    same_values,
    subnormal,
    tolerance,
    unravel,
)
from conformance.engine.exactness import FLOATS
from conformance.engine.operands import data_args
from conformance.engine.truth import named, output_name


def compared(s: Sample) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, device values on CPU, CPU's values) of every real floating tensor the outputs and
    written checks compare by value, where shape and dtype agree (else theirs to report); read
    once per sample."""
    found = s.scratch.get("bits")
    if found is None:
        found = s.scratch["bits"] = _compared(s)
    return found


def differing(s: Sample) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """`compared(s)` less the pairs whose bits are identical, where no check of this module can
    find anything (most samples: one bitwise comparison instead of each check's own)."""
    found = s.scratch.get("differing")
    if found is None:
        found, same = [], set()
        for n, a, e in compared(s):
            if same_bits(a, e):
                same.add((id(a), id(e)))
            else:
                found.append((n, a, e))
        s.scratch["differing"] = found
        s.scratch[IDENTICAL] = same  # Sample.known_identical
    return found


def _compared(s: Sample) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    spec = s.spec
    if s.nondeterministic or not spec.check_values:
        return []
    a_leaves, e_leaves = s.actual.flat()[0], s.expected.flat()[0]
    pairs = []
    n = len(a_leaves)
    if n == len(e_leaves):
        only, skipped = spec.compared_outputs, spec.metadata_only_outputs
        for i, (a, e) in enumerate(zip(a_leaves, e_leaves, strict=True)):
            if i in skipped or (only is not None and i not in only):
                continue
            pairs.append((output_name(i, n), a, e))
    written = s.dev.written()
    if written:
        cpu_written = [view for _, view in s.cpu.written()]
        for (name, view), cview in zip(written, cpu_written, strict=False):
            if not any(view is a for _, a, _ in pairs):
                pairs.append((name, view, cview))
    flush = s.policy.flushes_subnormals
    found = []
    for name, a, e in pairs:
        if not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor)):
            continue
        if e.dtype not in FLOATS or a.dtype != e.dtype or a.shape != e.shape or not e.numel():
            continue
        if a.layout != torch.strided or e.layout != torch.strided:
            continue
        host = s.host(a)
        found.append((name, host, flush_subnormals(e, host) if flush else e))
    return found


def _first(mask: torch.Tensor, a: torch.Tensor, e: torch.Tensor) -> str:
    i = int(mask.reshape(-1).nonzero()[0, 0])
    at = unravel(i, tuple(e.shape))
    return f"first at {at}: device {a.reshape(-1)[i].item()!r} vs cpu {e.reshape(-1)[i].item()!r}"


@sample_check(
    "subnormal",
    "the device neither flushes subnormal results to zero nor treats subnormal inputs as zero "
    "(unless the manifest declares flushes_subnormals for the dtype)",
)
def check_subnormals(s: Sample) -> None:
    if s.policy.flushes_subnormals:
        return
    found = differing(s)
    for name, a, e in found:
        flushed = (a == 0) & (e != 0)  # the cheap test first: most samples stop here
        if not bool(flushed.any()):
            continue
        flushed &= subnormal(e)
        if not bool(flushed.any()):
            continue
        rtol, atol = tolerance(e.dtype, s.spec.tol_scale)
        close = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
        if bool((~close & ~flushed).any()):
            return  # other differences: the outputs check names them
        raise Mismatch(
            "subnormal",
            f"{name}: flushes subnormal results to zero: {int(flushed.sum())} element(s) where "
            f"cpu gives a subnormal {str(e.dtype).removeprefix('torch.')}; {_first(flushed, a, e)}"
            " (a device that does: flushes_subnormals in the manifest)",
        )
    _inputs_as_zero(s, found)


def _inputs_as_zero(s: Sample, found: list[tuple[str, torch.Tensor, torch.Tensor]]) -> None:
    """DAZ: where the device differs from CPU and CPU on inputs with their subnormals made zero
    gives the device's result (`found`: the pairs whose bits differ)."""
    unlike = [(n, a, e) for n, a, e in found if not bool(same_values(a, e).all())]
    if not unlike:
        return
    leaves = [base for leaf, base, _ in s.cpu.bases if base.dtype in FLOATS]
    if not any(bool(subnormal(b).any()) for b in leaves):
        return
    cpu = s.placed.materialize("cpu")
    for _, base, _ in cpu.bases:
        if base.dtype in FLOATS:
            base.copy_(flush_subnormals(base))
    flushed = invoke(s.spec.reference or s.op, cpu)
    if flushed.exc is not None:
        return
    again = named(flushed.result, dict(cpu.written()))
    for name, a, e in unlike:
        f = again.get(name)
        if f is None:
            continue
        diff = ~same_values(a, e)
        if bool(same_values(a, f)[diff].all()):
            raise Mismatch(
                "subnormal",
                f"{name}: treats subnormal inputs as zero: where it differs from cpu "
                f"({int(diff.sum())} element(s)) it gives cpu's result for the inputs with their "
                f"subnormals made zero; {_first(diff, a, e)}",
            )


@functools.cache
def _tags(overload: str) -> frozenset[str]:
    """torch's tags of the overload and of its functional sibling (an in-place or out= variant
    has none of its own)."""
    from conformance.engine.discovery import resolve
    from conformance.engine.siblings import functional_of

    ops = [resolve(overload), functional_of(overload)]
    return frozenset(str(t) for op in ops if op is not None for t in getattr(op, "tags", ()))


def signs_owed(s: Sample) -> bool:
    """Whether the sign of a zero result is part of this op's answer (see the docstring)."""
    tags = _tags(s.overload)
    if "Tag.pointwise" in tags or s.spec.exact:
        return True
    exact = s.exactness is not None and s.exactness.exact
    return exact and "Tag.reduction" not in tags


@sample_check(
    "signed-zero",
    "where CPU's result is +-0 the device's zero has the same sign (pointwise ops, conversions "
    "and ops CPU is exact for; not reductions)",
)
def check_signed_zeros(s: Sample) -> None:
    if not signs_owed(s):
        return
    for name, a, e in differing(s):
        wrong = (a == 0) & (e == 0) & (a.signbit() != e.signbit())
        if bool(wrong.any()):
            wrong &= ~_sign_of_the_truth(s, name, a, e.dtype)
        if bool(wrong.any()):
            raise Mismatch(
                "signed-zero",
                f"{name}: {int(wrong.sum())} zero(s) of the other sign; {_first(wrong, a, e)}",
            )


def _sign_of_the_truth(s: Sample, name: str, a: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Where the device's zero has the sign of the float64 result (engine/truth.py): a zero
    rounded from a tiny negative value is -0, whatever sign CPU's less precise zero has (CPU's
    float32 gelu of -5.8 on AVX2 is +0; the result is -1.8e-8). All False where the truth
    cannot be computed."""
    w = truth.float64_value(s, dtype, name)
    if w is None or w.shape != a.shape:
        return torch.zeros_like(a, dtype=torch.bool)
    return ~w.isnan() & (a.signbit() == w.signbit())


@sample_check(
    "rounding",
    "where CPU's result is measured exact (engine/exactness.py), the device's is CPU's bits or "
    "the correctly rounded ones; for functions IEEE only recommends correct rounding for, "
    "within the ulps CUDA documents; elsewhere, errors that fall on both sides of the "
    "correctly rounded result, as rounding to nearest's do",
)
def check_rounding(s: Sample) -> None:
    if not differing(s):
        return  # every part below judges only the values whose bits differ
    _within_documented_ulps(s)
    _within_any_order_of_accumulation(s)
    _errs_both_ways(s)
    if s.exactness is None or not s.exactness.exact:
        return
    if not ieee.single_operation(s.schema, s.placed.call.args, s.placed.call.kwargs):
        return  # a multiply-add (alpha): not what the measurement judged
    ulp = s.exactness.rule == exactness.ULP
    for name, a, e in differing(s):
        if s.policy.excuses(s, e.dtype):
            continue  # a device that computes in the dtype rounds more than once: precision.py
        if not _claimed_for(s.exactness, e.dtype):
            continue
        both_zero = (a == 0) & (e == 0)
        bad = ~same_values(a, e) & ~both_zero
        if bool(bad.any()):
            bad &= ~_correctly_rounded(s, name, a, e, within=1 if ulp else 0)
        if not bool(bad.any()):
            continue
        rtol, atol = tolerance(e.dtype, s.spec.tol_scale)
        close = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
        if not bool(close.all()) and _most_ulps(a, e, bad) > 1 + ulp:
            return  # a wrong value, not a rounding: the outputs check names it
        what = (
            "more than 1 ulp from the correctly rounded result"
            if ulp
            else "not cpu's correctly rounded result"
        )
        raise Mismatch(
            "rounding",
            f"{name}: {_ulps(a, e, bad, what)}; {_first(bad, a, e)}\n  cpu is exact for "
            f"{s.overload} in {str(e.dtype).removeprefix('torch.')}: {s.exactness.why}",
        )


def _within_documented_ulps(s: Sample) -> None:
    """float32/float64 functions IEEE only recommends correct rounding for, within the ulps
    their bound allows (engine/ulp_bounds.py), unless as far as CPU's own result."""
    for name, a, e in differing(s):
        k = ulp_bounds.bound(s.overload, e.dtype)
        if k is None or s.policy.excuses(s, e.dtype):
            continue
        if not bool(close_mask(a, e, s.spec.tol_scale, name)[0].all()):
            continue  # beyond the tolerance: a wrong value, the outputs check names it
        w = truth.float64_value(s, e.dtype, name)
        if w is None or w.shape != a.shape:
            continue
        bad = ulp_bounds.beyond(a, e, w, k)
        if bool(bad.any()):
            what = f"more than {k} ulp(s) from the float64 result and farther than cpu's"
            dtype = str(e.dtype).removeprefix("torch.")
            raise Mismatch(
                "rounding",
                f"{name}: {_ulps(a, w.to(e.dtype), bad, what)}; {_first(bad, a, e)}\n  "
                f"{ieee.base(s.overload)} in {dtype}: IEEE recommends correct rounding; CUDA "
                f"documents at most {k} ulp(s) (engine/ulp_bounds.py)",
            )


def _within_any_order_of_accumulation(s: Sample) -> None:
    """float32/float64 elements of sums, means, scans and matrix products within the error any
    order of accumulation can make (engine/accumulation.py): an element of one term is its
    input."""
    if not accumulation.accumulates(s.overload):
        return
    for name, a, e in differing(s):
        if e.dtype not in accumulation.DTYPES or s.policy.excuses(s, e.dtype):
            continue
        if not bool(close_mask(a, e, s.spec.tol_scale, name)[0].all()):
            continue  # beyond the tolerance: a wrong value, the outputs check names it
        basis = e if e.dtype == torch.float64 else truth.float64_value(s, e.dtype, name)
        found = _magnitudes(s)
        if basis is None or found is None or not (basis.shape == a.shape == found[0].shape):
            continue
        flushes = bool(s.policy.flushes_subnormals)
        bad, allowed = accumulation.rigorous_excess(s.overload, a, basis, *found, flushes)
        bad &= ~same_values(a, e)  # cpu's bits (flushed where the manifest declares FTZ) pass
        if bool(bad.any()):
            i = int(bad.reshape(-1).nonzero()[0, 0])
            at = unravel(i, tuple(e.shape))
            terms = int(found[1].reshape(-1)[i])
            what = "the float64 result" if e.dtype != torch.float64 else "cpu's result"
            raise Mismatch(
                "rounding",
                f"{name}: {int(bad.sum())}/{bad.numel()} elements are farther from {what} than "
                f"any order of accumulation allows; first at {at}: device "
                f"{a.reshape(-1)[i].item()!r} vs {basis.reshape(-1)[i].item()!r}, a sum of "
                f"{terms} term(s) within {allowed.reshape(-1)[i].item():.3g} "
                "(engine/accumulation.py)",
            )


def _magnitudes(s: Sample) -> tuple | None:
    """accumulation.magnitudes of the sample's float64 call, once per sample."""
    if "accumulation" not in s.scratch:
        cpu = s.placed.materialize("cpu")
        data = {i for i, _ in data_args(s.schema)}
        args, kwargs = exactness.wide_args(cpu.args, cpu.kwargs, data, torch.float64)
        s.scratch["accumulation"] = accumulation.magnitudes(s.op, s.overload, args, kwargs)
    return s.scratch["accumulation"]


def _errs_both_ways(s: Sample) -> None:
    """float32/float64 values within the tolerance whose errors lean one way, for ops CPU is
    not measured exact for (engine/error_balance.py)."""
    if s.exactness is not None and s.exactness.exact:
        return  # held to CPU's bits or the correctly rounded ones
    for name, a, e in differing(s):
        if s.policy.excuses(s, e.dtype):
            continue
        if not bool(close_mask(a, e, s.spec.tol_scale, name)[0].all()):
            continue  # beyond the tolerance: a wrong value, the outputs check names it
        why = error_balance.one_way(s, name, a, e)
        if why is not None:
            raise Mismatch("rounding", why)


def _claimed_for(claim: exactness.Exactness, result: torch.dtype) -> bool:
    """Whether the claim measured for the case's dtype speaks of a result of dtype `result`:
    not of a float64 result in a case of another dtype (no wider type measured it: an H200's
    float64 results in bfloat16 cases of _foreach_norm and addcmul were held to bits CPU's own
    float64 run set), nor, for the one-ulp rule of half precision, of a wider result."""
    if result == torch.float64 and claim.dtype != "float64":
        return False
    return claim.rule != exactness.ULP or result in exactness.HALF or result == torch.float64


def _correctly_rounded(
    s: Sample, name: str, a: torch.Tensor, e: torch.Tensor, within: int = 0
) -> torch.Tensor:
    """Where the device's value is the correctly rounded one (or `within` ulps of it): the op
    run on CPU with every floating operand in float64 (integer data operands converted to the
    result's dtype first), rounded once; for float64, the op's own reference where it has one
    (exactness.FLOAT64_REFERENCES), else CPU's result. CPU itself rounds some operands first (a
    float64 scalar added to a float16 tensor is rounded to float16 before the sum); a device
    that does not is as right. All False where the float64 run fails or gives another shape."""
    found = torch.zeros_like(a, dtype=torch.bool)
    for w in (
        truth.float64_value(s, e.dtype, name),
        truth.float64_value_scalars_rounded(s, e.dtype, name),
    ):
        if w is None or w.shape != a.shape:
            continue
        rounded = w.to(e.dtype)
        found |= same_values(a, rounded)
        if within:
            found |= exactness.ulp_distance(a, rounded) <= within
    return found


def _most_ulps(a: torch.Tensor, e: torch.Tensor, bad: torch.Tensor) -> int:
    """The largest ulp distance over `bad` (inf is one ulp past the largest finite value;
    NaN against a number counts as far)."""
    return int(exactness.ulp_distance(a, e)[bad].max())


def _ulps(a: torch.Tensor, e: torch.Tensor, bad: torch.Tensor, what: str) -> str:
    """How the elements in `bad` differ: ulp distance and direction."""
    n, total = int(bad.sum()), bad.numel()
    finite = bad & ~a.isnan() & ~e.isnan()  # inf is one ulp past the largest finite value
    parts = [f"{n}/{total} elements are {what}"]
    if bool(finite.any()):
        d = (exactness.ordered(a) - exactness.ordered(e))[finite]
        toward_zero = (a.abs() < e.abs())[finite]
        k = int(finite.sum())
        most = int(d.abs().max())
        share = int(toward_zero.sum()) * 100 // k
        direction = (
            "toward zero" if share == 100 else "away from zero" if share == 0 else "either way"
        )
        parts.append(
            f"{'1 ulp' if most == 1 else f'up to {most} ulps'} {direction} on "
            f"{k * 100 // total} % of elements"
        )
        if most == 1 and share == 100:
            parts.append("round-toward-zero?")
        elif most == 1 and share == 0:
            parts.append("rounds away from zero?")
    if bool((bad & ~finite).any()):
        parts.append(f"{int((bad & ~finite).sum())} where one side is NaN")
    return ": ".join(parts[:2]) + ("; " + "; ".join(parts[2:]) if parts[2:] else "")

"""A collectives case's verdict from every rank's answer.

- Every rank returned: each output of each rank against the oracle (data.py), bit for bit (AVG
  and PREMUL_SUM within 4 ulps); an in-place collective must leave the rest of a strided view's
  buffer alone; after `Work.wait()`, `is_completed()` is True; a barrier lets no rank out before
  the last one entered. A failure names the ranks, outputs and elements that differ.
- Every rank raised: the backend refuses the combination. It is `skipped` (with the reason)
  where torch itself defines no result (AVG of integers, bitwise ops of floats, MAX of complex)
  or one of torch's own backends refuses it too: NCCL refuses bitwise ops and non-contiguous
  tensors, and gloo, asked the same case on CPU tensors in the same world, refuses it too. A
  refusal of what gloo computes fails (`the backend refuses what gloo computes`).
- Some ranks raised and others returned: a failure (the ranks disagree).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from conformance.engine.collectives.data import FLOATING, expected, inputs, undefined
from conformance.engine.collectives.spec import MODE_HELP, NO_OP, CollectiveCase
from conformance.engine.collectives.world import Answer, WorldFailure, Worlds

#: what NCCL (torch's own backend for CUDA) refuses, whatever the device: its words
NCCL_REFUSES = {
    "BAND": "NCCL has no bitwise reductions",
    "BOR": "NCCL has no bitwise reductions",
    "BXOR": "NCCL has no bitwise reductions",
    "transposed": "NCCL refuses non-contiguous tensors ('Tensors must be contiguous')",
    "sliced": "NCCL refuses non-contiguous tensors ('Tensors must be contiguous')",
}
ULPS = 4  # AVG and PREMUL_SUM: a division or a factor, rounded in any order
SHOWN = 8  # differing elements listed per rank


@dataclass
class Verdict:
    """`status`: passed, failed or skipped; `message`: its first line is what findings group
    by (numbers masked); `ranks`: the ranks whose outputs differ, with their elements."""

    status: str
    message: str = ""
    ranks: dict[int, list[int]] = field(default_factory=dict)


def prefix(case: CollectiveCase) -> str:
    op = f" {case.op}" if case.op != NO_OP else ""
    mode = f" ({MODE_HELP[case.mode]})" if case.is_async else ""
    return f"[collectives] {case.collective}{op}{mode}"


def key_masks(case: CollectiveCase) -> dict[str, str]:
    """What findings mask in a message (finding_keys): the collective with its reduce op and
    async mode, as `prefix` writes them, since one bug spans them; the finding's title lists
    the collectives, reduce ops and modes its cases have."""
    return {prefix(case).removeprefix("[collectives] "): "<op>"}


def judge(
    case: CollectiveCase,
    answers: list[Answer],
    c10d: str,
    reference: Callable[[], list[Answer]] | None,
) -> Verdict:
    """The verdict (`reference`: gloo's answers to the same case, asked only on a refusal;
    None when gloo is the backend under test)."""
    raised = [r for r, a in enumerate(answers) if a.kind == "raised"]
    if raised and len(raised) == len(answers):
        return _refused(case, answers[0].info, c10d, reference)
    if raised:
        first = answers[raised[0]].info
        returned = [r for r in range(len(answers)) if r not in raised]
        return Verdict(
            "failed",
            f"{prefix(case)}: {len(raised)} of {case.world} ranks raised, the others returned: "
            f"{first['type']}: {first['message']}\n  raised: ranks {raised} (in {first['where']}); "
            f"returned: ranks {returned}; {case.describe()}",
        )
    why = undefined(case)
    if why is not None:
        return Verdict("skipped", f"not judged: {why} ({c10d} computed something)")
    if case.collective == "barrier":
        return _barrier(case, answers)
    outside = _outside(case, answers)
    if outside is not None:
        return outside
    for r, a in enumerate(answers):
        if a.info.get("completed_after_wait") is False and case.mode == "wait":
            return Verdict(
                "failed",
                f"{prefix(case)}: Work.wait() returned on rank {r} but is_completed() is "
                f"False\n  {case.describe()}",
            )
    return _values(case, answers)


def _outside(case: CollectiveCase, answers: list[Answer]) -> Verdict | None:
    """An in-place collective that changed its strided view's buffer outside the view."""
    for r, a in enumerate(answers):
        if a.info.get("outside"):
            return Verdict(
                "failed",
                f"{prefix(case)}: wrote outside the view on rank {r}: {a.info['outside']} "
                f"element(s) of its buffer around the '{case.layout}' view changed\n  "
                f"{case.describe()}",
            )
    return None


def _refused(
    case: CollectiveCase,
    info: dict[str, Any],
    c10d: str,
    reference: Callable[[], list[Answer]] | None,
) -> Verdict:
    error = f"{info['type']}: {info['message']}"
    what = f"{c10d} refuses {case.collective} {case.op} of {case.dtype} ('{case.layout}')"
    why = undefined(case)
    if why is not None:
        return Verdict("skipped", f"not applicable: {why}; {what}: {error}")
    nccl = NCCL_REFUSES.get(case.op) or NCCL_REFUSES.get(case.layout)
    if nccl is not None:
        return Verdict("skipped", f"not applicable: {nccl}; {what}: {error}")
    if reference is None:
        return Verdict("skipped", f"not applicable: {what} (torch's own backend): {error}")
    theirs = reference()
    if all(a.kind == "raised" for a in theirs):
        gloo = theirs[0].info
        return Verdict(
            "skipped",
            f"not applicable: gloo refuses it too ({gloo['type']}: {gloo['message']}); "
            f"{what}: {error}",
        )
    return Verdict(
        "failed",
        f"{prefix(case)}: the backend refuses what gloo computes: {error}\n  "
        f"{case.describe()} (raised in {info['where']})",
    )


def _barrier(case: CollectiveCase, answers: list[Answer]) -> Verdict:
    last_in = max(a.info["enter"] for a in answers)
    early = [(r, last_in - a.info["exit"]) for r, a in enumerate(answers)]
    early = [(r, s) for r, s in early if s > 0.001]
    if not early:
        return Verdict("passed")
    r, s = early[0]
    return Verdict(
        "failed",
        f"{prefix(case)}: rank {r} left the barrier {s:.3f} s before the last rank entered "
        f"it\n  {case.describe()}",
    )


def _values(case: CollectiveCase, answers: list[Answer]) -> Verdict:
    by_rank = [inputs(case, r) for r in range(case.world)]
    want = expected(case, by_rank)
    ranks: dict[int, list[int]] = {}
    lines: list[str] = []
    first = ""
    for r, (answer, outs) in enumerate(zip(answers, want, strict=True)):
        if outs is None:  # nothing defined on this rank (reduce, gather off the root)
            continue
        got = answer.outputs
        if len(got) != len(outs):
            return Verdict(
                "failed",
                f"{prefix(case)}: rank {r} returned {len(got)} output(s) instead of {len(outs)}",
            )
        for i, (g, e) in enumerate(zip(got, outs, strict=True)):
            problem = _compare(case, g, e)
            if problem is None:
                continue
            text, bad = problem
            offset = sum(o.numel() for o in outs[:i])
            ranks.setdefault(r, []).extend(offset + b for b in bad)
            where = f"output {i} of " if len(outs) > 1 else ""
            shown = ", ".join(str(b) for b in bad[:SHOWN]) + (", ..." if len(bad) > SHOWN else "")
            lines.append(f"rank {r}: {where}{text} (elements {shown})")
            count = f"{len(bad)} of {e.numel()} elements differ" if bad else text
            first = first or f"rank {r}, {count}"  # the output in the detail: one key for all
    if not ranks:
        return Verdict("passed")
    head = f"{prefix(case)}: wrong values on {len(ranks)} of {case.world} ranks (first: {first})"
    body = "\n  ".join([*lines, case.describe()])
    return Verdict("failed", f"{head}\n  {body}", ranks)


def _compare(
    case: CollectiveCase, got: torch.Tensor, want: torch.Tensor
) -> tuple[str, list[int]] | None:
    """(what differs, the differing elements) or None."""
    want = want.reshape(-1)
    if got.numel() != want.numel():
        return f"{got.numel()} elements instead of {want.numel()}", []
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} instead of {want.dtype}", []
    if case.op in ("AVG", "PREMUL_SUM"):
        eps = torch.finfo(_real(want.dtype)).eps
        scale = max(1.0, float(want.abs().max())) if want.numel() else 1.0
        ok = torch.isclose(got, want, rtol=ULPS * eps, atol=ULPS * eps * scale)
    else:
        ok = (got == want) | (_isnan(got) & _isnan(want))
    bad = (~ok).nonzero().reshape(-1).tolist()
    if not bad:
        return None
    i = bad[0]
    text = f"{len(bad)} of {want.numel()} elements, first at {i}: {_num(got[i])} instead of "
    return text + _num(want[i]), bad


def _real(dtype: torch.dtype) -> torch.dtype:
    return {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(dtype, dtype)


def _isnan(t: torch.Tensor) -> torch.Tensor:
    floating = str(t.dtype).removeprefix("torch.") in FLOATING or t.is_complex()
    return torch.isnan(t) if floating else torch.zeros_like(t, dtype=torch.bool)


def _num(x: torch.Tensor) -> str:
    """A value as findings mask it (bool as 0/1, complex as re+imj)."""
    if x.dtype == torch.bool:
        return str(int(x))
    if x.is_complex():
        z = complex(x)
        return f"{z.real:g}{z.imag:+g}j"
    return f"{x.item():g}"


def evaluate(worlds: Worlds, case: CollectiveCase) -> Verdict:
    """Run `case` in its world and judge it; a hung or dead rank is the verdict `hung` or
    `crashed` (the world is replaced for the next case)."""
    c10d = worlds.setup.c10d
    try:
        answers = worlds.run(case)
        reference = None if c10d == "gloo" else (lambda: worlds.run(case, reference=True))
        return judge(case, answers, c10d, reference)
    except WorldFailure as exc:
        detail = f"\n  {case.describe()}" + (
            f"\n--- ranks' output ---\n{exc.detail}" if exc.detail else ""
        )
        return Verdict(exc.status, exc.message + detail)

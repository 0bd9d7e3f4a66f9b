"""A collectives case's verdict from every rank's answer.

- Every rank returned: each output of each rank against the oracle (data.py), bit for bit (AVG
  and PREMUL_SUM within 4 roundings at each element's own scale); an in-place collective must
  leave the rest of a strided view's buffer alone, an out-of-place one its inputs (values and
  buffer, on every rank); after `Work.wait()`, `is_completed()` is True; a barrier lets no
  rank out before the last one entered. A failure names the ranks, outputs and elements that differ.
- Every rank raised: a refusal only where the error names what is refused (the case's layout,
  dtype or reduce op: `names_cause`; a layout NCCL refuses must be named as a layout), else a
  failure ("illegal address in the strided copy kernel", "out of resources" name nothing). A
  refusal is `skipped` (with the reason) where torch itself defines no result (AVG of integers,
  bitwise ops of floats, MAX of complex) or one of torch's own backends refuses it too: NCCL
  refuses bitwise ops and non-contiguous tensors, and gloo, asked the same case on CPU tensors
  in the same world, refuses it too. A refusal of what gloo computes fails (`the backend
  refuses what gloo computes`).
- Some ranks raised and others returned: a failure (the ranks disagree).
"""

from __future__ import annotations

import re
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
    """`status`: passed, failed, skipped or unimplemented (the backend says it does not
    implement what the case asks: failed unless the manifest declares it unsupported);
    `message`: its first line is what findings group by (numbers masked); `ranks`: the ranks
    whose outputs differ, with their elements."""

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
    outside = _outside(case, answers) or _inputs(case, answers)
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


def _inputs(case: CollectiveCase, answers: list[Answer]) -> Verdict | None:
    """An out-of-place collective that changed an input the caller passed it."""
    for r, a in enumerate(answers):
        for i, n, first in a.info.get("inputs", ()):
            where = f"input {i}" if len(inputs(case, r)) > 1 else "its input"
            return Verdict(
                "failed",
                f"{prefix(case)}: changed {where} on rank {r}: {n} element(s), first {first} "
                f"(an out-of-place collective must leave its inputs alone)\n  {case.describe()}",
            )
    return None


#: words that name each cause of a refusal in an error (lower case; the case's own op, dtype
#: and layout are added); an error naming none of a case's causes is no refusal but a failure
CAUSE_WORDS = {
    "layout": ("contiguous", "layout", "dense"),
    "op": ("reduceop", "reduce op", "reduction", "bitwise"),
    "dtype": ("dtype", "scalar type", "data type"),
}
DTYPE_ALIASES = {
    "float16": ("half",), "float32": ("float",), "float64": ("double",), "int64": ("long",),
    "int32": ("int",), "int16": ("short",), "int8": ("char",), "uint8": ("byte",),
    "complex64": ("complex",), "complex128": ("complex",), "bfloat16": ("bf16",),
}  # fmt: skip


#: an error that says the backend does not implement something ("Work::getFuture not
#: implemented"): an unsupported feature, named as such (issue 79: gloo's were "an error that
#: names no refusal")
UNIMPLEMENTED = re.compile(r"not (yet )?(implemented|supported)|unsupported", re.I)
#: a layout's own words beyond its name: the sizes of an 'uneven' all_to_all
LAYOUT_WORDS = {"uneven": ("size", "split")}


def names_cause(case: CollectiveCase, message: str, causes: tuple[str, ...]) -> bool:
    """Whether an error's message names one of `causes` ("layout", "op", "dtype") of `case`:
    the refused thing itself ("MAX", "float16", "contiguous"), not any error ("illegal address
    in the strided copy kernel", "out of resources")."""
    text = message.lower()
    own = {
        "layout": (case.layout, *LAYOUT_WORDS.get(case.layout, ()))
        if case.layout != "contiguous"
        else (),
        "op": (case.op.lower(),) if case.op != NO_OP else (),
        "dtype": (case.dtype, *DTYPE_ALIASES.get(case.dtype, ())),
    }
    words = [w for c in causes for w in (*CAUSE_WORDS[c], *own[c])]
    # short words whole ("int", "max"), longer ones as stems ("contiguous" in "non-contiguous")
    return any(re.search(rf"\b{re.escape(w)}" + (r"\b" if len(w) < 5 else ""), text) for w in words)


def _refused(
    case: CollectiveCase,
    info: dict[str, Any],
    c10d: str,
    reference: Callable[[], list[Answer]] | None,
) -> Verdict:
    error = f"{info['type']}: {info['message']}"
    what = f"{c10d} refuses {case.collective} {case.op} of {case.dtype} ('{case.layout}')"
    why = undefined(case)
    nccl_layout = NCCL_REFUSES.get(case.layout)
    causes = ("layout",) if nccl_layout and why is None and case.op not in NCCL_REFUSES else None
    every = ("layout", "op", "dtype")
    if UNIMPLEMENTED.search(info["message"]) and not names_cause(case, info["message"], every):
        return Verdict(  # a feature the backend says it lacks, not one of the case's values
            "unimplemented",
            f"{prefix(case)}: {c10d} does not implement it: {error}\n  {case.describe()} "
            f"(raised in {info['where']}; an unsupported feature: declare it in the manifest, "
            'status = "unsupported")',
        )
    if not names_cause(case, info["message"], causes or every):
        named = "its layout" if causes else "its layout, dtype or reduce op"
        return Verdict(
            "failed",
            f"{prefix(case)}: every rank raised an error that names no refusal of {named}: "
            f"{error}\n  {case.describe()} (raised in {info['where']}; a refusal names what is "
            "unsupported)",
        )
    if why is not None:
        return Verdict("skipped", f"not applicable: {why}; {what}: {error}")
    nccl = NCCL_REFUSES.get(case.op) or nccl_layout
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
    magnitudes = None  # AVG, PREMUL_SUM: per element, the same reduction of the |inputs|
    if case.op in ("AVG", "PREMUL_SUM"):
        magnitudes = expected(case, [[x.abs() for x in xs] for xs in by_rank])
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
        scales = magnitudes[r] if magnitudes is not None else [None] * len(outs)
        for i, (g, e, m) in enumerate(zip(got, outs, scales, strict=True)):
            problem = _compare(case, g, e, m)
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
    case: CollectiveCase, got: torch.Tensor, want: torch.Tensor, magnitude: Any = None
) -> tuple[str, list[int]] | None:
    """(what differs, the differing elements) or None. AVG and PREMUL_SUM: `ULPS` roundings
    relative to each element's own magnitude (`magnitude`: the reduction of the inputs' absolute
    values), so a small result of cancelling inputs is held to its own scale, not to the
    largest result's (a bfloat16 AVG that zeroes small results fails)."""
    want = want.reshape(-1)
    if got.numel() != want.numel():
        return f"{got.numel()} elements instead of {want.numel()}", []
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} instead of {want.dtype}", []
    if case.op in ("AVG", "PREMUL_SUM"):
        eps = torch.finfo(_real(want.dtype)).eps
        scale = magnitude.reshape(-1).abs().double() if magnitude is not None else want.abs()
        wide = torch.complex128 if got.is_complex() else torch.float64
        ok = ((got.to(wide) - want).abs() <= ULPS * eps * scale) | (got == want)
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

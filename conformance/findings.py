"""Group failing cases into findings: one root cause, many cases.

One backend bug usually fails hundreds of cases the same way (every dtype and layout of an op).
A *finding* is the failing case records (`CaseRecord`s: ``results/cases-*.jsonl``) that share a
`FindingKey` (`finding_keys.py`: the check, the message with what varies between cases masked,
the crash class and culprit or site, the foundation a case depends on).

A blocked case (``blocked_by``: the case id of a broken foundation, e.g.
``_copy_from-float32-offset-native``) and every failing case of that foundation's op make *one*
finding, keyed by the foundation's op and its own first failure: one broken ``_copy_from`` is
one finding however many cases it breaks, and two different failures of it (wrong values, a
raise) are two.

Kernels the device lacks where CPU computes, when the manifest does not declare them, are *one*
finding however many ops they are: every failing case whose check is ``unsupported``, and every
failing case or scenario whose own error is the dispatcher's "Could not run 'aten::X'" for a
kernel that blocks nothing (a foundation without a kernel is a blocker of its own: "as_strided
has no kernel on this device: N case(s) need it"). `Finding.kernels` lists them, with the
dtypes and layouts where an op's own kernel is missing.

Then findings whose cases have the same failure class and the same distinguishing factor are
merged: the messages of one op that differ only in CPU's wording, and crashes without a culprit
that share a factor ("all 110 cases are float64; the same ops pass in 6 other dtypes"), and own
crashes that died inside one op (`crash_site`: a module's backward that aborts in `neg` is neg's
finding, "crash: abort, inside neg"); a random op's draws judged wrong by different statistics
(one kernel); a -grad case failing in the forward it runs where the same op's forward cases
fail on their values (one wrong forward); and a module case naming the op that diverged where
that op's own cases fail (one kernel, seen by its op cases and by the modules that call it).
Every finding says what its cases have in common against the passing cases of the same ops
(``Finding.factor``).

Pure Python (no torch, no pytest), so the terminal summary, run.json, the per-run reports and the
torch-version report can all share it::

    from conformance.findings import group_findings
    for finding in group_findings(records):       # failing records only, biggest first
        print(finding.id, finding.count, finding.title, finding.representative.repro)
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from conformance.finding_keys import (
    UNSUPPORTED_KEY,
    UNSUPPORTED_MESSAGE,
    CrashSites,
    FindingKey,
    blocking_op,
    category_of,
    collective_extent,
    collective_kind,
    crash_class,
    crash_signature,
    crash_sites,
    finding_key,
    lacks_kernel,
    normalise_message,
    portable,
    probe_message,
    representative_rank,
    root_keys,
    spans_collectives,
)
from conformance.record import FAILING, FOUNDATION_ORDER, CaseRecord, missing_kernel

__all__ = [
    "FAILING",
    "CrashSites",
    "Finding",
    "FindingKey",
    "crash_class",
    "crash_signature",
    "crash_sites",
    "finding_key",
    "group_findings",
    "category_of",
    "normalise_message",
    "portable",
    "unsupported_by_op",
]

#: Statuses that make a finding (passing, skipped and expected failures do not).
_STATUS_ORDER = ("crashed", "error", "failed", "xpassed")
TITLE_LENGTH = 160


def _text(value: Any) -> str:
    return "" if value is None else str(value)


@dataclass
class Finding:
    """Failing cases with one :class:`FindingKey`; ``cases`` are the records as given."""

    key: FindingKey
    cases: list[CaseRecord] = field(default_factory=list)
    factor: str = ""  # what the cases have in common against passing cases of the same ops

    @property
    def id(self) -> str:
        """A short stable id of the key (``F`` + 8 hex), for anchors and cross-references."""
        return "F" + hashlib.sha1(repr(tuple(self.key)).encode()).hexdigest()[:8]

    @property
    def count(self) -> int:
        """Number of cases."""
        return len(self.cases)

    @property
    def representative(self) -> CaseRecord:
        """The simplest case of the finding (its ``repro`` is the one to run first)."""
        return min(self.cases, key=representative_rank)

    @property
    def ops(self) -> list[str]:
        """The ops (``op.overload``) of the cases, sorted."""
        return sorted({rec.op_name for rec in self.cases})

    @property
    def statuses(self) -> Counter[str]:
        """Number of cases per status."""
        return Counter(str(rec.status) for rec in self.cases)

    @property
    def blocked(self) -> int:
        """How many cases are only blocked by the foundation (not failures of their own)."""
        return sum(1 for rec in self.cases if rec.blocked_by)

    @property
    def related(self) -> list[str]:
        """Broken foundations its cases might be related to (no evidence they used them)."""
        return sorted({_text(r.extra.get("related_foundation")) for r in self.cases} - {""})

    @property
    def title(self) -> str:
        """One line: ``check: message`` (crash signature, blocker), shortened."""
        k = self.key
        message = k.message.removeprefix("[crash] ").removeprefix(f"[{k.check}] ")
        text = f"{k.check or 'failure'}: {message or '(no message)'}"
        if k.crash:  # the class, and who corrupted memory
            text = f"{k.check}: {k.crash}, {message or self._where()}"
        if k.blocked_by and missing_kernel(k.message) == k.blocked_by.removesuffix(".default"):
            own = self.count - self.blocked
            text = f"{k.blocked_by} has no kernel on this device: {self.blocked} case(s) need it"
            text += f" ({own} of its own)" if own else ""
        elif k.blocked_by:
            text = f"{k.blocked_by} is broken, {self.blocked} case(s) blocked by it: {text}"
        elif self.is_unsupported:
            kernels = self.kernels
            text = f"unsupported, not declared: {len(kernels)} kernel(s) the device lacks where "
            text += "cpu computes: " + "; ".join(f"{op} {where}".strip() for op, where in kernels)
        extent = collective_extent(self.cases)
        if extent:  # the key masked the collective(s)
            text = text.replace("<op>", "/".join(sorted({c.op for c in self.cases})))
            text = text.replace(f"[{k.check}] ", "")  # after the kind: [async], [moves]
        budget = TITLE_LENGTH - len(extent)
        if extent:  # the collectives named in full, whatever the extent takes
            budget = max(budget, text.find(": ", len(k.check) + 2) + 24)
        if len(text) > budget:
            text = text[: max(0, budget - 3)] + "..."
        return text + extent

    @property
    def is_unsupported(self) -> bool:
        """The one finding of the kernels the device lacks, not declared."""
        return self.key.check == "unsupported" and self.key.message == UNSUPPORTED_MESSAGE

    @property
    def kernels(self) -> list[tuple[str, str]]:
        """(kernel, where) for the unsupported finding: an op's own kernel with the dtypes and
        layouts its cases lacked it in, or a kernel other cases and scenarios need."""
        own: dict[str, tuple[set[str], set[str]]] = {}
        needed: Counter[str] = Counter()
        for rec in self.cases:
            missing = missing_kernel(rec.first_line)
            if missing is not None and missing != rec.op_name:
                needed[missing] += 1
                continue
            dtypes, layouts = own.setdefault(rec.op_name, (set(), set()))
            dtypes.add(rec.dtype)
            layouts.add(rec.layout)
        out = []
        for op, (dtypes, layouts) in sorted(own.items()):
            where = "/".join(sorted(d for d in dtypes if d and d != "-"))
            shapes = sorted(lo for lo in layouts if lo and lo != "-")
            if shapes and shapes != ["contiguous"]:
                where += (" " if where else "") + "/".join(shapes)
            out.append((op, f"({where})" if where else ""))
        out += [(k, f"(needed by {n} case(s))") for k, n in sorted(needed.items())]
        return out

    def _where(self) -> str:
        """The op a crash is in: the one op, or the most primitive foundation among several."""
        if len(self.ops) == 1:
            return f"in {self.ops[0]}"
        base = next((op for op in FOUNDATION_ORDER if op in self.ops), None)
        if base is not None:
            return f"in {base} and {len(self.ops) - 1} op(s) that use it"
        return f"in {len(self.ops)} ops"

    def to_json(self) -> dict[str, Any]:
        """The finding as written to run.json (docs/RESULTS.md)."""
        rep = self.representative
        return {
            "id": self.id,
            "title": self.title,
            "check": self.key.check,
            "blocked_by": self.key.blocked_by or None,
            "count": self.count,
            "blocked": self.blocked,
            "culprit": self.key.culprit or None,
            "factor": self.factor or None,
            "related": self.related or None,
            "ops": self.ops,
            "kernels": [f"{op} {where}".strip() for op, where in self.kernels]
            if self.is_unsupported
            else None,
            "representative": rep.id,
            "repro": rep.repro,
            "message": rep.first_line,
            "cases": [rec.id for rec in self.cases],
        }

    def __repr__(self) -> str:
        return f"Finding({self.id}, {self.count} cases, {self.title!r})"


def group_findings(
    records: Iterable[CaseRecord], statuses: Iterable[str] = FAILING
) -> list[Finding]:
    """Group the records whose status is in ``statuses`` into findings, biggest first (then by
    worst status and title)."""
    records = list(records)
    wanted = frozenset(statuses)
    failing = [r for r in records if r.status in wanted]
    sites = crash_sites(failing)
    roots = root_keys(failing, sites)
    groups: dict[FindingKey, Finding] = {}
    failing_ids = {r.id for r in failing}
    for record in failing:
        blocked_by = _text(record.blocked_by)
        own = [k for (op, _), k in roots.items() if op == record.op_name]
        if blocked_by:
            key = roots[(blocking_op(blocked_by), probe_message(record))]
        elif len(own) == 1:
            key = own[0]
        elif lacks_kernel(record):
            key = UNSUPPORTED_KEY
        else:
            key = finding_key(record, sites)
            if spans_collectives(record):  # keyed by kind too: async, moves, reduces
                key = key._replace(
                    message=f"[{collective_kind(record, failing_ids)}] {key.message}"
                )
        groups.setdefault(key, Finding(key)).cases.append(record)
    passing = [r for r in records if r.status == "passed"]
    merged = _merge_by_factor(list(groups.values()), passing)

    def order(f: Finding) -> tuple[object, ...]:
        worst = min(
            (_STATUS_ORDER.index(s) for s in f.statuses if s in _STATUS_ORDER),
            default=len(_STATUS_ORDER),
        )
        return (-f.count, worst, f.title)

    return sorted(merged, key=order)


#: the dimensions a finding's cases can have in common, their names in a sentence, and the
#: record's attribute that holds each
_DIMENSIONS = (
    ("dtype", "dtypes", "dtype"),
    ("layout", "layouts", "layout"),
    ("path", "paths", "path"),
    ("values", "value sets", "value_set"),
)


def _factor(finding: Finding, passing: dict[str, list[CaseRecord]]) -> tuple[str, str, int] | None:
    """(dimension, value, how many other values of it pass in the same ops) for the first
    dimension all the finding's cases share while the same ops pass with other values
    (`passing`: the passing records by op name)."""
    same_ops = [r for op in dict.fromkeys(finding.ops) for r in passing.get(op, ())]
    for dim, _, attribute in _DIMENSIONS:
        values = {_text(getattr(c, attribute)) for c in finding.cases}
        if len(values) != 1:
            continue
        value = values.pop()
        others = {_text(getattr(r, attribute)) for r in same_ops} - {value}
        if others:
            return dim, value, len(others)
    return None


def _describe(finding: Finding, factor: tuple[str, str, int] | None) -> str:
    if factor is None:
        return ""
    dim, value, others = factor
    plural = {name: words for name, words, _ in _DIMENSIONS}[dim]
    shown = value or "ordinary"
    return (
        f"all {finding.count} case(s) are {dim} {shown}; the same ops pass in {others} other "
        f"{plural}"
    )


def _merge_by_factor(findings: list[Finding], records: list[CaseRecord]) -> list[Finding]:
    """Merge findings of one failure class that share their distinguishing factor: the same op
    and check (messages that differ only in CPU's wording), or crashes without a culprit (glibc
    notices one corruption in whatever op runs next). Blocked findings stay as they are.
    `records`: the passing ones."""
    passing: dict[str, list[CaseRecord]] = {}
    for r in records:
        passing.setdefault(r.op_name, []).append(r)
    # one culprit, one finding, whatever the class glibc's first complaint suggested; crashes
    # with no other case to blame are grouped by class (one corruption, whichever op noticed)
    by_culprit: dict[tuple[object, ...], Finding] = {}
    for f in findings:
        site = _site(f)
        if site:  # one op died, whatever signal or message it died with: one cause
            group: tuple[object, ...] = ("site", f.key.check, site)
        elif _own_crash(f):
            group = ("class", f.key.check, f.key.crash)
        else:
            group = ("culprit", f.key.culprit) if f.key.culprit else ("own", f.key)
        _merge_into(by_culprit, group, f)
    by_ops: dict[tuple[object, ...], Finding] = {}  # one op crashing in several ways: one cause
    for f in by_culprit.values():
        _merge_into(by_ops, ("ops", tuple(f.ops)) if _own_crash(f) else ("own", id(f)), f)
    by_culprit = by_ops
    # an op that corrupts the heap itself: its other failures are what the corruption did
    heap = {
        f.key.culprit: f
        for f in by_culprit.values()
        if f.key.culprit and _own_crash(f) and any(_heap(c) for c in f.cases)
    }
    kept: list[Finding] = []
    for f in by_culprit.values():
        owner = heap.get(f.ops[0]) if len(f.ops) == 1 and not f.key.crash else None
        owner = owner if owner is not None and owner.ops == f.ops else None
        if owner is not None and not f.key.blocked_by:
            owner.cases += f.cases
        else:
            kept.append(f)
    out: dict[tuple[object, ...], Finding] = {}
    for f in kept:
        factor = _factor(f, passing)
        k = f.key
        if _random_draws(k):  # one random kernel, whichever statistic saw its draws
            group: tuple[object, ...] = ("draws", tuple(f.ops))
        elif k.blocked_by or factor is None:
            group = ("own", k)
        elif k.crash and _own_crash(f):  # the same crash in many ops, e.g. all float64
            group = ("crash", k.check, k.crash, _site(f), factor[:2])
        else:  # one op, one check: messages that differ in CPU's wording
            group = ("op", k.check, k.crash, k.culprit, tuple(f.ops), factor[:2])
        _merge_into(out, group, f)
    merged = _modules_into_ops(_forward_under_grad(list(out.values())))
    for f in merged:
        f.factor = _describe(f, _factor(f, passing))
    return merged


#: a module case's first line where the search named the op that diverged (modules family)
_MODULE_NAMES_OP = re.compile(r"^\[module\] (?:aten\.)?([A-Za-z0-9_]+)")


def _modules_into_ops(findings: list[Finding]) -> list[Finding]:
    """A module finding whose first line names the op that diverged, where that op's own cases
    fail too, is that op's finding: one broken kernel, seen by its op cases and by the modules
    that call it."""
    by_op: dict[str, Finding] = {}
    for f in findings:
        if f.key.check not in ("module", "crash") and not f.key.blocked_by and f.ops:
            for op in f.ops:
                by_op.setdefault(op.split(".")[0], f)
    kept = []
    for f in findings:
        said = _text(f.cases[0].message) if f.key.check == "module" else ""  # as written
        named = _MODULE_NAMES_OP.match(said)
        owner = by_op.get(named.group(1)) if named else None
        if owner is not None:
            owner.cases += f.cases
        else:
            kept.append(f)
    return kept


def _random_draws(key: FindingKey) -> bool:
    """A random op's draws judged wrong (a two-sample test or its law: engine/oracles.py,
    parametric.py, random_laws.py): each statistic words it differently, one kernel is wrong."""
    return key.check == "values" and "random draws" in key.message and not key.blocked_by


#: the first words of a -grad case's failure in the forward it runs (engine/gradients.py)
FORWARD_UNDER_GRAD = "output <n> of the forward with requires_grad"


def _forward_under_grad(findings: list[Finding]) -> list[Finding]:
    """A -grad finding that failed in the forward it runs, where the same ops' forward cases
    failed on their values too, is that forward's finding (one wrong forward, not two causes)."""
    forward = {
        tuple(f.ops): f
        for f in findings
        if f.key.check == "values" and not f.key.blocked_by and not f.key.crash
    }
    kept = []
    for f in findings:
        owner = forward.get(tuple(f.ops))
        said = f.key.message.removeprefix("[grad] ")  # the -grad cases' own prefix
        if f.key.check == "grad" and said.startswith(FORWARD_UNDER_GRAD) and owner:
            owner.cases += f.cases
        else:
            kept.append(f)
    return kept


def _merge_into(groups: dict[tuple[object, ...], Finding], group, finding: Finding) -> None:
    if group in groups:
        groups[group].cases += finding.cases
    else:
        groups[group] = finding


def _own_crash(finding: Finding) -> bool:
    """A crash finding whose cases crashed by themselves (no other case named as culprit)."""
    return bool(finding.key.crash) and not any(c.culprit for c in finding.cases)


def _site(finding: Finding) -> str:
    """The op an own-crash finding's cases died inside ("": not known; `crash_site`)."""
    message = re.sub(r"^\[[^\]]*\] ", "", finding.key.message)  # a collective's "[kind] "
    return finding.key.culprit if message.startswith("inside ") else ""


def _heap(record: CaseRecord) -> bool:
    cls = crash_class(_text(record.message)) if record.status == "crashed" else ""
    return cls == "heap corruption" or cls.startswith("AddressSanitizer")


def unsupported_by_op(records: Iterable[CaseRecord]) -> dict[str, int]:
    """Number of ``unsupported`` cases (the device raised 'not implemented') per op, most first."""
    counts: Counter[str] = Counter(r.op_name for r in records if r.status == "unsupported")
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

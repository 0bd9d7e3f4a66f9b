"""One finding per root cause: group failing case records ("654 failing cases = 9 findings").

A failing case belongs to

- the finding of the foundation that blocks it (`blocked_by`), which also holds that
  foundation's own failing cases: one broken `_copy_from` is one finding however many cases it
  breaks;
- else, for a crash, the finding of its crash signature (signal or sanitizer/glibc headline and
  the first native frame), whatever op it ran: one heap corruption is one finding;
- else the finding of (op, check, normalised message): the same complaint about the same op over
  dtypes, layouts and paths.

Pure Python (no torch, no pytest): the terminal summary, run.json and both reports use it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from conformance.record import FAILING, CaseId, CaseRecord, Status, status_rank

__all__ = ["Finding", "group_findings", "normalise", "crash_signature", "unsupported_by_op"]


@dataclass
class Finding:
    """One root cause and the failing cases it explains."""

    key: str
    check: str
    title: str
    cases: list[str] = field(default_factory=list)  # case ids (pytest names)
    representative: CaseRecord | None = None  # the most telling case: its repro first
    blocked_by: str | None = None  # the foundation case, for findings of a broken foundation
    blocked: int = 0  # how many of the cases are blocked by it (not failures of their own)

    @property
    def count(self) -> int:
        return len(self.cases)

    def to_json(self) -> dict:
        rep = self.representative
        return {
            "key": self.key,
            "check": self.check,
            "title": self.title,
            "count": self.count,
            "blocked": self.blocked,
            "blocked_by": self.blocked_by,
            "representative": rep.id if rep else None,
            "repro": rep.repro if rep else "",
            "message": (rep.message or "").splitlines()[0] if rep else "",
            "cases": list(self.cases),
        }


_DTYPE_WORDS = (
    r"\btorch\.[a-z]\w*|\b(float|int|uint|complex|bfloat)\d+\b|\b(Half|BFloat16|Float|Double|"
    r"Long|Int|Short|Char|Byte|Bool|ComplexFloat|ComplexDouble)\b"
)
_NAME_PREFIX = re.compile(r"^(output( \d+)?|[\w.]+ buffer|[\w.]+ \(old contents\)|[a-z_]\w*):\s+")


def normalise(message: str | None) -> str:
    """The first line of a failure message without what varies between cases of one cause:
    the check tag, the argument name, numbers, addresses, dtype names; cut at the first ';'."""
    head = (message or "").strip().splitlines()[0] if (message or "").strip() else ""
    head = re.sub(r"^\[[\w-]+\]\s*", "", head)
    head = _NAME_PREFIX.sub("", head)
    head = re.sub(r"0x[0-9a-fA-F]+", "ADDR", head)
    head = re.sub(_DTYPE_WORDS, "DTYPE", head)
    head = re.sub(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", "N", head)
    head = re.sub(r"\[[N, ]*\]", "[...]", head)
    return head.split(";")[0].split(" (max abs")[0].strip()


def crash_signature(message: str | None) -> str:
    """What a crash looks like wherever it happens: how the process died, the sanitizer or glibc
    headline, the first native frame of a sanitizer report."""
    lines = (message or "").splitlines()
    head = re.sub(r"^\[crash\]\s*", "", lines[0] if lines else "")
    head = head.replace(" while running this case", "")
    frame = next(
        (m.group(1) for ln in lines if (m := re.search(r"#\d+ 0x[0-9a-f]+ in (\S+)", ln))), ""
    )
    sig = re.sub(r"0x[0-9a-fA-F]+", "ADDR", head)
    sig = re.sub(r"\d{3,}", "N", sig)
    return f"{sig} in {frame}" if frame else sig


def _op_of_case(case_id: str) -> str:
    try:
        return CaseId.parse(case_id).overload
    except ValueError:
        return case_id


def _key(record: CaseRecord, roots: set[str]) -> tuple[str, str, str]:
    """(key, check, title) of a failing record that is not blocked."""
    op = record.op_name
    if op in roots:
        return f"root:{op}", record.check or "?", f"{op} is broken (a foundation other cases need)"
    if record.status is Status.CRASHED:
        sig = crash_signature(record.message)
        return f"crash:{sig}", "crash", f"crash: {sig}"
    if record.status is Status.XPASSED:
        return f"xpassed:{op}", "xpassed", f"{op}: expected failures pass now (manifest)"
    check = record.check or record.status.value
    norm = normalise(record.message)
    return f"{op}|{check}|{norm}", check, f"{op}: [{check}] {norm}"


def group_findings(records: Iterable[CaseRecord]) -> list[Finding]:
    """Failing records (crashed, hung, error, failed, blocked, xpassed) grouped by root cause,
    biggest first."""
    failing = sorted(
        (r for r in records if r.status in FAILING),
        key=lambda r: (status_rank(r.status), r.op_name, r.id),
    )
    roots = {_op_of_case(r.blocked_by) for r in failing if r.blocked_by}
    findings: dict[str, Finding] = {}
    for record in failing:
        if record.blocked_by:
            op = _op_of_case(record.blocked_by)
            key, check, title = (
                f"root:{op}",
                "blocked",
                f"{op} is broken (a foundation other cases need)",
            )
        else:
            key, check, title = _key(record, roots)
        finding = findings.get(key)
        if finding is None:
            finding = findings[key] = Finding(key=key, check=check, title=title)
        finding.cases.append(record.id)
        if record.blocked_by:
            finding.blocked += 1
            finding.blocked_by = finding.blocked_by or record.blocked_by
            if finding.check == "blocked" and record.check:
                finding.check = record.check
        elif finding.representative is None or finding.representative.blocked_by:
            finding.representative = record
            finding.check = record.check or finding.check
        if finding.representative is None:
            finding.representative = record
    for finding in findings.values():
        rep = finding.representative
        if finding.key.startswith("root:") and rep is not None and not rep.blocked_by:
            finding.title = f"{finding.title}: [{rep.check}] {normalise(rep.message)}"
        elif finding.key.startswith("root:") and finding.blocked_by:
            message = rep.extra.get("blocked_by_message", "") if rep else ""
            finding.title = f"{finding.title}: {normalise(str(message))}"
    return sorted(findings.values(), key=lambda f: (-f.count, f.key))


def unsupported_by_op(records: Iterable[CaseRecord]) -> dict[str, int]:
    """Number of `unsupported` cases per op, most first."""
    counts: dict[str, int] = {}
    for r in records:
        if r.status is Status.UNSUPPORTED:
            counts[r.op_name] = counts.get(r.op_name, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

"""Group failing cases into findings: one root cause, many cases.

A backend bug (or a torch change) usually fails hundreds of cases the same way: every dtype and
layout of an op, or every op through one broken copy routine. A *finding* is the set of failing
case records (the dicts of ``results/cases-*.jsonl``, docs/RESULTS.md) that share a key:

- ``check``: the check that failed (``values``, ``strides``, ``memory``, ``crash``, ...);
- ``message``: the first line of the message with what varies between cases masked: numbers,
  shapes, dtype names, addresses, the case's own id, op, overload, layout and path;
- ``crash``: for crashes, a signature (signal or sanitizer/glibc error kind, and the first
  frame of the sanitizer's stack that is not the sanitizer's own);
- ``blocked_by``: the foundation a case depends on. A blocked case (``blocked_by``: the case id
  of a broken foundation, e.g. ``_copy_from-float32-offset-native``) and every failing case of
  that foundation's op make *one* finding, keyed by the foundation's op and its own first
  failure: one broken ``_copy_from`` is one finding however many cases it breaks.

Pure Python (no torch, no pytest), so the terminal summary, run.json, the per-run reports and the
torch-version report can all share it::

    from conformance.findings import group_findings
    for finding in group_findings(records):       # failing records only, biggest first
        print(finding.id, finding.count, finding.title, finding.representative.get("repro"))
"""

from __future__ import annotations

import hashlib
import re
import signal
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from conformance.record import FAILING

__all__ = [
    "FAILING",
    "Finding",
    "FindingKey",
    "crash_signature",
    "finding_key",
    "group_findings",
    "normalise_message",
    "unsupported_by_op",
]

#: Statuses that make a finding (passing, skipped and expected failures do not).
_STATUS_ORDER = ("crashed", "error", "failed", "xpassed")
TITLE_LENGTH = 160

_DTYPES = (
    "bfloat16|float16|float32|float64|half|float|double|complex32|complex64|complex128|cfloat|"
    "cdouble|uint8|uint16|uint32|uint64|int8|int16|int32|int64|bool|"
    "float8_e4m3fn|float8_e5m2|float8_e4m3fnuz|float8_e5m2fnuz"
)
_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"test_\w+\[[^\]\s]*\]"), "<case>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<addr>"),
    (re.compile(r"torch\.Size\(\[[^\]]*\]\)"), "<shape>"),
    (re.compile(rf"\b(?:torch\.)?(?:{_DTYPES})\b"), "<dtype>"),
    (re.compile(r"[\[(]\s*(?:-?\d+\s*,\s*)*-?\d+\s*,?\s*[\])]"), "<shape>"),
    (re.compile(r"\(\s*\)|\[\s*\]"), "<shape>"),
    (re.compile(r"(?<![\w<])[-+]?\d+(?:\.\d+)*(?:[eE][-+]?\d+)?"), "<n>"),
    (re.compile(r"(?<![A-Za-z_])[-+]?(?:nan|inf)\b"), "<n>"),
)
_SANITIZER = re.compile(r"(AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer)\W+(\S+)")
_GLIBC = re.compile(
    r"(free\(\): [^\n:]+|double free[^\n:]*|malloc\(\): [^\n:]+|realloc\(\): [^\n:]+|"
    r"munmap_chunk\(\): [^\n:]+|corrupted [^\n:]+)"
)
_SIGNAL_NAME = re.compile(r"\bSIG[A-Z]{2,}\b")
_SIGNAL_NUMBER = re.compile(r"signal (\d+)")
_FRAME = re.compile(r"#\d+ 0x[0-9a-fA-F]+ in (\S+)")


class FindingKey(NamedTuple):
    """What cases of one finding share (see the module docstring)."""

    check: str
    message: str
    crash: str
    blocked_by: str


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _identity(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(text, mask) pairs for the record's own names in its message, longest text first: its id,
    its op (``aten::op.overload``, ``op.overload``, ``op``) and its layout when quoted."""
    op, overload = _text(record.get("op")), _text(record.get("overload"))
    full_id = _text(record.get("id"))
    pairs = [(full_id, "<case>"), (full_id.split("[", 1)[-1].rstrip("]"), "<case>")]
    if op and overload and overload != "default":
        pairs += [(f"aten::{op}.{overload}", "<op>"), (f"{op}.{overload}", "<op>")]
    pairs += [(f"aten::{op}", "<op>"), (op, "<op>")]
    layout = _text(record.get("layout"))
    if layout:
        pairs += [(f"'{layout}'", "'<layout>'"), (f'"{layout}"', "'<layout>'")]
    return sorted({p for p in pairs if len(p[0]) > 1}, key=lambda p: -len(p[0]))


def normalise_message(message: str, record: Mapping[str, Any] | None = None) -> str:
    """The first line of ``message`` with what varies between cases of one cause masked:
    ``record``'s own id/op/layout, then addresses, shapes, dtype names and numbers."""
    text = _text(message).strip()
    line = text.splitlines()[0] if text else ""
    if record is not None:
        for name, mask in _identity(record):
            line = re.sub(rf"(?<![\w.]){re.escape(name)}(?![\w])", mask, line)
    for pattern, repl in _MASKS:
        line = pattern.sub(repl, line)
    return " ".join(line.split())


def crash_signature(record: Mapping[str, Any]) -> str:
    """For a crashed case: signal or sanitizer/glibc error kind, and the first own stack frame;
    ``""`` for any other case."""
    if _text(record.get("status")) != "crashed" and _text(record.get("check")) != "crash":
        return ""
    message = _text(record.get("message"))
    parts: list[str] = []
    sanitizer = _SANITIZER.search(message)
    glibc = _GLIBC.search(message)
    if sanitizer:
        parts.append(f"{sanitizer.group(1)}: {sanitizer.group(2)}")
    elif glibc:
        parts.append(glibc.group(1).strip())
    name = _SIGNAL_NAME.search(message)
    number = _SIGNAL_NUMBER.search(message)
    if name:
        parts.append(name.group(0))
    elif number:
        try:
            parts.append(signal.Signals(int(number.group(1))).name)
        except ValueError:
            parts.append(f"signal {number.group(1)}")
    for frame in _FRAME.findall(message):
        if not frame.startswith(("__asan", "__interceptor", "__sanitizer", "__lsan")):
            parts.append(f"in {frame}")
            break
    return " ".join(parts) or "crash"


def blocking_op(blocked_by: str) -> str:
    """The op of a blocking foundation: ``_copy_from`` of ``_copy_from-float32-offset-native``
    (anything that is not a case id is kept as it is)."""
    parts = blocked_by.split("-")
    return parts[0] if len(parts) in (4, 5) and all(parts) else blocked_by


def op_name(record: Mapping[str, Any]) -> str:
    """``op.overload`` of a record (``op`` for the default overload)."""
    op, overload = _text(record.get("op")), _text(record.get("overload"))
    return f"{op}.{overload}" if overload and overload != "default" else op


def finding_key(record: Mapping[str, Any]) -> FindingKey:
    """The :class:`FindingKey` of one case record (on its own: see `group_findings` for the
    cases of a broken foundation, which share one key)."""
    crash = crash_signature(record)
    message = normalise_message(_text(record.get("message")), record)
    if crash:  # the crash headline varies with pids and addresses; the signature does not
        message = message.split(": ", 1)[0] if message.startswith("[crash]") else message
        message = re.sub(r"worker '[^']*'", "worker", message)  # xdist names the worker
    return FindingKey(
        check=_text(record.get("check")) or ("crash" if crash else ""),
        message=message,
        crash=crash,
        blocked_by=_text(record.get("blocked_by")),
    )


def _representative_rank(record: Mapping[str, Any]) -> tuple[object, ...]:
    """A failure of its own before a blocked case, then the simplest case first: contiguous,
    native, float32, short id."""
    return (
        bool(record.get("blocked_by")),
        _text(record.get("layout")) != "contiguous",
        _text(record.get("path")) != "native",
        _text(record.get("dtype")) != "float32",
        len(_text(record.get("id"))),
        _text(record.get("id")),
    )


@dataclass
class Finding:
    """Failing cases with one :class:`FindingKey`; ``cases`` are the records as given."""

    key: FindingKey
    cases: list[Mapping[str, Any]] = field(default_factory=list)

    @property
    def id(self) -> str:
        """A short stable id of the key (``F`` + 8 hex), for anchors and cross-references."""
        return "F" + hashlib.sha1(repr(tuple(self.key)).encode()).hexdigest()[:8]

    @property
    def count(self) -> int:
        """Number of cases."""
        return len(self.cases)

    @property
    def representative(self) -> Mapping[str, Any]:
        """The simplest case of the finding (its ``repro`` is the one to run first)."""
        return min(self.cases, key=_representative_rank)

    @property
    def ops(self) -> list[str]:
        """The ops (``op.overload``) of the cases, sorted."""
        out = set()
        for rec in self.cases:
            op, overload = _text(rec.get("op")), _text(rec.get("overload"))
            out.add(f"{op}.{overload}" if overload and overload != "default" else op)
        return sorted(out)

    @property
    def statuses(self) -> Counter[str]:
        """Number of cases per status."""
        return Counter(_text(rec.get("status")) for rec in self.cases)

    @property
    def blocked(self) -> int:
        """How many cases are only blocked by the foundation (not failures of their own)."""
        return sum(1 for rec in self.cases if rec.get("blocked_by"))

    @property
    def title(self) -> str:
        """One line: ``check: message`` (crash signature, blocker), shortened."""
        k = self.key
        message = k.message.removeprefix("[crash] ")
        text = f"{k.check or 'failure'}: {message or '(no message)'}"
        if k.crash and k.crash not in text:
            text += f" [{k.crash}]"
        if k.blocked_by:
            text = f"{k.blocked_by} is broken, {self.blocked} case(s) blocked by it: {text}"
        return text if len(text) <= TITLE_LENGTH else text[: TITLE_LENGTH - 3] + "..."

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
            "ops": self.ops,
            "representative": _text(rep.get("id")),
            "repro": _text(rep.get("repro")),
            "message": _first(rep),
            "cases": [_text(rec.get("id")) for rec in self.cases],
        }

    def __repr__(self) -> str:
        return f"Finding({self.id}, {self.count} cases, {self.title!r})"


def group_findings(
    records: Iterable[Mapping[str, Any]], statuses: Iterable[str] = FAILING
) -> list[Finding]:
    """Group the records whose status is in ``statuses`` into findings, biggest first (then by
    worst status and title)."""
    wanted = frozenset(statuses)
    failing = [r for r in records if _text(r.get("status")) in wanted]
    roots = _root_keys(failing)
    groups: dict[FindingKey, Finding] = {}
    for record in failing:
        blocked_by = _text(record.get("blocked_by"))
        root = blocking_op(blocked_by) if blocked_by else op_name(record)
        key = roots.get(root) or finding_key(record)
        groups.setdefault(key, Finding(key)).cases.append(record)

    def order(f: Finding) -> tuple[object, ...]:
        worst = min(
            (_STATUS_ORDER.index(s) for s in f.statuses if s in _STATUS_ORDER),
            default=len(_STATUS_ORDER),
        )
        return (-f.count, worst, f.title)

    return sorted(groups.values(), key=order)


def _first(record: Mapping[str, Any]) -> str:
    text = _text(record.get("message")).strip()
    return text.splitlines()[0] if text else ""


def _root_keys(failing: list[Mapping[str, Any]]) -> dict[str, FindingKey]:
    """{foundation op: the one key of its finding} for every op some failing case is blocked
    by. The key carries the foundation's own first failure (or, if it did not run, what the
    foundation probe saw)."""
    roots: dict[str, FindingKey] = {}
    for record in failing:
        blocked_by = _text(record.get("blocked_by"))
        if blocked_by:
            roots.setdefault(blocking_op(blocked_by), FindingKey("", "", "", ""))
    for op in roots:
        own = [r for r in failing if op_name(r) == op and not r.get("blocked_by")]
        if own:
            first = min(own, key=_representative_rank)
            key = finding_key(first)
            roots[op] = FindingKey(key.check, key.message, key.crash, op)
        else:
            first = next(r for r in failing if blocking_op(_text(r.get("blocked_by"))) == op)
            probe = _text(first.get("blocked_by_message"))
            roots[op] = FindingKey("foundation", normalise_message(probe), "", op)
    return roots


def unsupported_by_op(records: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Number of ``unsupported`` cases (the device raised 'not implemented') per op, most first."""
    counts: Counter[str] = Counter(
        op_name(r) for r in records if _text(r.get("status")) == "unsupported"
    )
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

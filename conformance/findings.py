"""Group failing cases into findings: one root cause, many cases.

A backend bug (or a torch change) usually fails hundreds of cases the same way: every dtype and
layout of an op, or every op through one broken copy routine. A *finding* is the set of failing
case records (the dicts of ``results/cases-*.jsonl``, docs/RESULTS.md) that share a key:

- ``check``: the check that failed (``values``, ``strides``, ``memory``, ``crash``, ...);
- ``message``: the first line of the message with what varies between cases masked: numbers,
  shapes, dtype names, addresses, the case's own id, op, overload, layout and path;
- ``crash``: for crashes, the corruption class (heap corruption, whatever glibc's words; segfault;
  abort; sanitizer report kind and the first frame of its stack that is not the sanitizer's own)
  and, when the culprit search named one, the op of the case that corrupted memory: a crash is
  keyed by its cause, not by the case that happened to notice it;
- ``blocked_by``: the foundation a case depends on. A blocked case (``blocked_by``: the case id
  of a broken foundation, e.g. ``_copy_from-float32-offset-native``) and every failing case of
  that foundation's op make *one* finding, keyed by the foundation's op and its own first
  failure: one broken ``_copy_from`` is one finding however many cases it breaks, and two
  different failures of it (wrong values, a raise) are two.

Kernels the device lacks where CPU computes, when the manifest does not declare them, are *one*
finding however many ops they are: every failing case whose check is ``unsupported``, and every
failing case or scenario whose own error is the dispatcher's "Could not run 'aten::X'" for a
kernel that blocks nothing (a foundation without a kernel is a blocker of its own: "as_strided
has no kernel on this device: N case(s) need it"). `Finding.kernels` lists them, with the
dtypes and layouts where an op's own kernel is missing.

Then findings whose cases have the same failure class and the same distinguishing factor are
merged: the messages of one op that differ only in CPU's wording, and crashes without a culprit
that share a factor ("all 110 cases are float64; the same ops pass in 6 other dtypes"). Every
finding says what its cases have in common against the passing cases of the same ops
(``Finding.factor``).

Pure Python (no torch, no pytest), so the terminal summary, run.json, the per-run reports and the
torch-version report can all share it::

    from conformance.findings import group_findings
    for finding in group_findings(records):       # failing records only, biggest first
        print(finding.id, finding.count, finding.title, finding.representative.get("repro"))
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from conformance.record import FAILING, FOUNDATION_ORDER, missing_kernel

__all__ = [
    "FAILING",
    "Finding",
    "FindingKey",
    "crash_signature",
    "finding_key",
    "group_findings",
    "category_of",
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
_FRAME = re.compile(r"#\d+ 0x[0-9a-fA-F]+ in (\S+)")
#: the message of the one finding of the kernels the device lacks, not declared
UNSUPPORTED_MESSAGE = "kernels the device lacks where cpu computes, not declared"


class FindingKey(NamedTuple):
    """What cases of one finding share (see the module docstring)."""

    check: str
    message: str
    crash: str
    blocked_by: str
    culprit: str = ""  # the op of the case that corrupted memory (crashes)


#: glibc's words for one heap corruption, and the class they all belong to
_CLASSES: tuple[tuple[re.Pattern[str], str], ...] = (
    (_GLIBC, "heap corruption"),
    (re.compile(r"\bSIGSEGV\b|signal 11\b"), "segfault"),
    (re.compile(r"\bSIGBUS\b"), "bus error"),
    (re.compile(r"\bSIGFPE\b"), "arithmetic trap (SIGFPE)"),
    (re.compile(r"\bSIGILL\b"), "illegal instruction"),
    (re.compile(r"\bSIGABRT\b|signal 6\b"), "abort"),
)


def crash_class(message: str) -> str:
    """The corruption class of a crash message: ``sanitizer: <kind>``, ``heap corruption``
    (any of glibc's words for it), ``segfault``, ``abort``, ... or ``crash``."""
    sanitizer = _SANITIZER.search(message)
    if sanitizer:
        return f"{sanitizer.group(1)}: {sanitizer.group(2)}"
    for pattern, name in _CLASSES:
        if pattern.search(message):
            return name
    return "crash"


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
    """For a crashed case: its corruption class (`crash_class`) and, for a sanitizer report,
    the first own stack frame; ``""`` for any other case."""
    if _text(record.get("status")) != "crashed" and _text(record.get("check")) != "crash":
        return ""
    message = _text(record.get("message"))
    parts = [crash_class(message)]
    if _SANITIZER.search(message):
        for frame in _FRAME.findall(message):
            if not frame.startswith(("__asan", "__interceptor", "__sanitizer", "__lsan")):
                parts.append(f"in {frame}")
                break
    return " ".join(parts)


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
    raised = device_error(_first(record), _text(record.get("path")) == "scenario")
    raised = None if crash else raised
    if raised is not None and not record.get("blocked_by"):
        return FindingKey(check="error", message=raised, crash="", blocked_by="")
    culprit = ""
    if crash:  # keyed by class and culprit: glibc's words, pids and addresses vary
        culprit = _culprit_op(record)
        message = f"memory corrupted by {culprit}" if culprit else ""
        after = _text(record.get("crashes_after"))
        if after and not culprit:  # needs another case first, no corruption shown: its own
            message = f"crashes only after {blocking_op(after)} ran in the process"
        culprit = culprit or op_name(record)  # no other case to blame: its own crash
    return FindingKey(
        check=_text(record.get("check")) or ("crash" if crash else ""),
        message=message,
        crash=crash,
        blocked_by=_text(record.get("blocked_by")),
        culprit=culprit,
    )


#: how the harness quotes an error the device raised ("device raised RuntimeError [value]: ...",
#: a scenario's "device mix raised ..."), and where its own text ends
_DEVICE_RAISED = re.compile(r"\bdevice(?: mix)? raised (\w+) \[\w+\]: (.+)")
_TEXT_END = re.compile(
    r"; cpu |, cpu raised |; CPU raised | where cpu | in backward| in the forward|, not a device|"
    r"; the device |\s+\(a different class\)"
)
#: an op name in an error's text: dotted (`add.Tensor`), or an identifier after in/for/of
_OP_NAME = re.compile(r"\b[A-Za-z_]\w*\.[A-Za-z_]\w*\b")
_OP_AFTER = re.compile(r"\b(in|for|of) [a-z_][a-z0-9_]*\b")
#: an exception a scenario ended with (its first line); an AssertionError is the scenario's own
_RAISED = re.compile(r"^(?:E\s+)?(\w*(?:Error|Exception))(?: \[\w+\])?: (.+)")


def device_error(message: str, scenario: bool = False) -> str | None:
    """``device raised <Type>: <text>`` with the text normalised (op names, numbers, shapes
    masked), when `message` quotes an error the device raised (or, for a scenario, is an
    exception other than the scenario's own AssertionError): the same error raised by one
    backend in many ops and scenarios is one code path, one cause, whatever cpu did."""
    match = _DEVICE_RAISED.search(message)
    if match is None and scenario:
        match = _RAISED.match(message.strip())
        if match is not None and match.group(1) in ("AssertionError", "Failed"):
            match = None
    if match is None:
        return None
    text = _TEXT_END.split(match.group(2), maxsplit=1)[0]
    text = normalise_message(_OP_AFTER.sub(r"\1 <op>", _OP_NAME.sub("<op>", text)))
    return f"device raised {match.group(1)}: {text}" if text else None


def _culprit_op(record: Mapping[str, Any]) -> str:
    """The overload of the case the culprit search named (``neg`` of
    ``neg-float32-contiguous-native``), or ``""``."""
    culprit = _text(record.get("culprit"))
    return blocking_op(culprit) if culprit else ""


def _representative_rank(record: Mapping[str, Any]) -> tuple[object, ...]:
    """A failure of its own before a blocked case, then the simplest case first: a forward case
    (a backward runs other ops' kernels), an op's case before a scenario, contiguous, native,
    float32, short id."""
    return (
        bool(record.get("blocked_by")),
        _text(record.get("values")) == "grad",
        _text(record.get("path")) == "scenario",
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
    def related(self) -> list[str]:
        """Broken foundations its cases might be related to (no evidence they used them)."""
        return sorted({_text(r.get("related_foundation")) for r in self.cases} - {""})

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
        return text if len(text) <= TITLE_LENGTH else text[: TITLE_LENGTH - 3] + "..."

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
            missing = missing_kernel(_first(rec))
            if missing is not None and missing != op_name(rec):
                needed[missing] += 1
                continue
            dtypes, layouts = own.setdefault(op_name(rec), (set(), set()))
            dtypes.add(_text(rec.get("dtype")))
            layouts.add(_text(rec.get("layout")))
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
    records = list(records)
    wanted = frozenset(statuses)
    failing = [r for r in records if _text(r.get("status")) in wanted]
    roots = _root_keys(failing)
    groups: dict[FindingKey, Finding] = {}
    for record in failing:
        blocked_by = _text(record.get("blocked_by"))
        own = [k for (op, _), k in roots.items() if op == op_name(record)]
        if blocked_by:
            key = roots[(blocking_op(blocked_by), _probe_message(record))]
        elif len(own) == 1:
            key = own[0]
        elif lacks_kernel(record):
            key = UNSUPPORTED_KEY
        else:
            key = finding_key(record)
        groups.setdefault(key, Finding(key)).cases.append(record)
    passing = [r for r in records if _text(r.get("status")) == "passed"]
    merged = _merge_by_factor(list(groups.values()), passing)

    def order(f: Finding) -> tuple[object, ...]:
        worst = min(
            (_STATUS_ORDER.index(s) for s in f.statuses if s in _STATUS_ORDER),
            default=len(_STATUS_ORDER),
        )
        return (-f.count, worst, f.title)

    return sorted(merged, key=order)


#: the dimensions a finding's cases can have in common, and their names in a sentence
_DIMENSIONS = (
    ("dtype", "dtypes"),
    ("layout", "layouts"),
    ("path", "paths"),
    ("values", "value sets"),
)


def _factor(finding: Finding, passing: list[Mapping[str, Any]]) -> tuple[str, str, int] | None:
    """(dimension, value, how many other values of it pass in the same ops) for the first
    dimension all the finding's cases share while the same ops pass with other values."""
    ops = set(finding.ops)
    same_ops = [r for r in passing if op_name(r) in ops]
    for dim, _ in _DIMENSIONS:
        values = {_text(c.get(dim)) for c in finding.cases}
        if len(values) != 1:
            continue
        value = values.pop()
        others = {_text(r.get(dim)) for r in same_ops} - {value}
        if others:
            return dim, value, len(others)
    return None


def _describe(finding: Finding, factor: tuple[str, str, int] | None) -> str:
    if factor is None:
        return ""
    dim, value, others = factor
    plural = dict(_DIMENSIONS)[dim]
    shown = value or "ordinary"
    return (
        f"all {finding.count} case(s) are {dim} {shown}; the same ops pass in {others} other "
        f"{plural}"
    )


def _merge_by_factor(findings: list[Finding], passing: list[Mapping[str, Any]]) -> list[Finding]:
    """Merge findings of one failure class that share their distinguishing factor: the same op
    and check (messages that differ only in CPU's wording), or crashes without a culprit (glibc
    notices one corruption in whatever op runs next). Blocked findings stay as they are."""
    # one culprit, one finding, whatever the class glibc's first complaint suggested; crashes
    # with no other case to blame are grouped by class (one corruption, whichever op noticed)
    by_culprit: dict[tuple[object, ...], Finding] = {}
    for f in findings:
        if _own_crash(f):
            group: tuple[object, ...] = ("class", f.key.check, f.key.crash)
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
        if k.blocked_by or factor is None:
            group: tuple[object, ...] = ("own", k)
        elif k.crash and _own_crash(f):  # the same crash in many ops, e.g. all float64
            group = ("crash", k.check, k.crash, factor[:2])
        else:  # one op, one check: messages that differ in CPU's wording
            group = ("op", k.check, k.crash, k.culprit, tuple(f.ops), factor[:2])
        _merge_into(out, group, f)
    for f in out.values():
        f.factor = _describe(f, _factor(f, passing))
    return list(out.values())


def _merge_into(groups: dict[tuple[object, ...], Finding], group, finding: Finding) -> None:
    if group in groups:
        groups[group].cases += finding.cases
    else:
        groups[group] = finding


def _own_crash(finding: Finding) -> bool:
    """A crash finding whose cases crashed by themselves (no other case named as culprit)."""
    return bool(finding.key.crash) and not any(c.get("culprit") for c in finding.cases)


def _heap(record: Mapping[str, Any]) -> bool:
    cls = crash_class(_text(record.get("message"))) if record.get("status") == "crashed" else ""
    return cls == "heap corruption" or cls.startswith("AddressSanitizer")


def _first(record: Mapping[str, Any]) -> str:
    text = _text(record.get("message")).strip()
    return text.splitlines()[0] if text else ""


def _probe_message(record: Mapping[str, Any]) -> str:
    """How the blocking foundation's probe failed, normalised and without which layout or
    direction it probed: two different failures of one foundation are two root causes."""
    probe = _text(record.get("blocked_by_probe"))
    if not probe:  # results of an older suite: "what: message"
        probe = _text(record.get("blocked_by_message")).partition(": ")[2]
    return normalise_message(probe)


def _root_keys(failing: list[Mapping[str, Any]]) -> dict[tuple[str, str], FindingKey]:
    """{(foundation op, how its probe failed): the one key of its finding} for every failure a
    failing case is blocked by. The key carries the foundation's own first failure when the op
    failed one way only (else, or if its cases did not run, what the probe saw)."""
    roots: dict[tuple[str, str], FindingKey] = {}
    for record in failing:
        blocked_by = _text(record.get("blocked_by"))
        if blocked_by:
            roots.setdefault(
                (blocking_op(blocked_by), _probe_message(record)), FindingKey("", "", "", "")
            )
    ways = Counter(op for op, _ in roots)
    for op, probe in roots:
        own = [r for r in failing if op_name(r) == op and not r.get("blocked_by")]
        if own and ways[op] == 1:
            first = min(own, key=_representative_rank)
            key = finding_key(first)
            roots[(op, probe)] = FindingKey(key.check, key.message, key.crash, op, key.culprit)
        else:
            roots[(op, probe)] = FindingKey("foundation", probe, "", op)
    return roots


UNSUPPORTED_KEY = FindingKey("unsupported", UNSUPPORTED_MESSAGE, "", "")


def lacks_kernel(record: Mapping[str, Any]) -> bool:
    """A failing case that fails because the device lacks a kernel where cpu computes and the
    manifest does not declare it: check `unsupported`, or its own error is the dispatcher's
    "Could not run" (a scenario, a case whose kernel calls a missing one)."""
    if _text(record.get("status")) not in ("failed", "error"):
        return False
    return _text(record.get("check")) == "unsupported" or missing_kernel(_first(record)) is not None


def unsupported_by_op(records: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Number of ``unsupported`` cases (the device raised 'not implemented') per op, most first."""
    counts: Counter[str] = Counter(
        op_name(r) for r in records if _text(r.get("status")) == "unsupported"
    )
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def category_of(record: Mapping[str, Any]) -> str:
    """The manifest category (conformance/harness/expectations.py) of a case that is not a
    pass: the manifest's own for an expected one, else `unsupported` for a kernel the device
    lacks, `harness` for the suite's own errors, `backend-bug` for any other failure."""
    expected = _text(record.get("status")) in ("xfailed", "unsupported", "skipped")
    if expected and record.get("category"):
        return _text(record.get("category"))
    if _text(record.get("check")) == "unsupported" or _text(record.get("status")) == "unsupported":
        return "unsupported"
    return "harness" if _text(record.get("status")) == "error" else "backend-bug"

"""What one failing case record says on its own: the key `findings.py` groups records by.

A :class:`FindingKey` is what the cases of one root cause share:

- ``check``: the check that failed (``values``, ``strides``, ``memory``, ``crash``, ...);
- ``message``: the first line of the message with what varies between cases masked: numbers,
  shapes, dtype names, addresses, the case's own id, op, overload, layout and path
  (`normalise_message`); an error the device raised is keyed by its own text, whatever cpu did
  (`device_error`);
- ``crash``: for crashes, the corruption class (heap corruption, whatever glibc's words; segfault;
  abort; sanitizer report kind and the first frame of its stack that is not the sanitizer's own:
  `crash_signature`) and, when the culprit search named one, the op of the case that corrupted
  memory: a crash is keyed by its cause, not by the case that happened to notice it;
- ``blocked_by``: the foundation a case depends on (`root_keys` keys a broken foundation's
  blocked cases and its own failures together).

Some keys need the other failing records: a broken foundation's (`root_keys`: one key per way
its probe failed, `probe_message`, carrying the foundation's own first failure, the simplest
case by `representative_rank`) and a collectives case's kind (`collective_kind`: async where the
blocking call of the same case passed, else reduces or moves).

Also a record's manifest category (`category_of`) and whether it fails for a kernel the device
lacks (`lacks_kernel`). Pure Python (no torch, no pytest); records are `CaseRecord`s.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from conformance.record import OP_FAMILY, CaseRecord, missing_kernel

__all__ = [
    "FindingKey",
    "UNSUPPORTED_KEY",
    "UNSUPPORTED_MESSAGE",
    "blocking_op",
    "category_of",
    "collective_kind",
    "spans_collectives",
    "crash_class",
    "crash_signature",
    "CrashSites",
    "crash_site",
    "crash_sites",
    "device_error",
    "finding_key",
    "lacks_kernel",
    "normalise_message",
    "probe_message",
    "representative_rank",
    "root_keys",
]

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
#: glibc's malloc checks' words (malloc/malloc.c's malloc_printerr callers: "malloc(): ...",
#: "malloc_consolidate(): unaligned fastbin chunk detected", "_int_free(): ...", ...)
_GLIBC = re.compile(
    r"((?:free|malloc|realloc|munmap_chunk|malloc_consolidate|_int_malloc|_int_free|"
    r"_int_realloc|tcache_thread_shutdown|malloc_check_get_size)\(\): [^\n:]+|"
    r"double free[^\n:]*|corrupted [^\n:]+)"
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


UNSUPPORTED_KEY = FindingKey("unsupported", UNSUPPORTED_MESSAGE, "", "")

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


def _identity(record: CaseRecord) -> list[tuple[str, str]]:
    """(text, mask) pairs for the record's own names in its message, longest text first: its id,
    its op (``aten::op.overload``, ``op.overload``, ``op``) and its layout when quoted."""
    op, overload, full_id = record.op, record.overload, record.id
    pairs = [(full_id, "<case>"), (full_id.split("[", 1)[-1].rstrip("]"), "<case>")]
    if op and overload and overload != "default":
        pairs += [(f"aten::{op}.{overload}", "<op>"), (f"{op}.{overload}", "<op>")]
    pairs += [(f"aten::{op}", "<op>"), (op, "<op>")]
    layout = record.layout
    if layout:
        pairs += [(f"'{layout}'", "'<layout>'"), (f'"{layout}"', "'<layout>'")]
    # a family's names that do not make a root cause of their own (a collective's reduce op and
    # async mode: one bug spans them, the finding's title lists them)
    pairs += [(str(text), str(mask)) for text, mask in record.extra.get("key_masks", {}).items()]
    return sorted({p for p in pairs if len(p[0]) > 1}, key=lambda p: -len(p[0]))


@functools.lru_cache(maxsize=4096)
def _standalone(name: str) -> re.Pattern[str]:
    """`name` as a word of its own (not inside another name), compiled once per name."""
    return re.compile(rf"(?<![\w.]){re.escape(name)}(?![\w])")


def normalise_message(message: str, record: CaseRecord | None = None) -> str:
    """The first line of ``message`` with what varies between cases of one cause masked:
    ``record``'s own id/op/layout, then addresses, shapes, dtype names and numbers."""
    text = _text(message).strip()
    line = text.splitlines()[0] if text else ""
    if record is not None:
        for name, mask in _identity(record):
            if name in line:  # most are not: no pattern to compile
                line = _standalone(name).sub(mask, line)
    for pattern, repl in _MASKS:
        line = pattern.sub(repl, line)
    return " ".join(line.split())


def crash_signature(record: CaseRecord) -> str:
    """For a crashed case: its corruption class (`crash_class`) and, for a sanitizer report,
    the first own stack frame; ``""`` for any other case."""
    if record.status != "crashed" and _text(record.check) != "crash":
        return ""
    message = _text(record.message)
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


@dataclass(frozen=True)
class CrashSites:
    """What a run's failing records say of where own crashes died (harness/crash_site.py):
    `crashed`, the (op, crash signature) of every crashed record; `by_op`, the site of each
    (op, signature) whose keyed sites all agree (its crashes that were not replayed: one
    replay per op and class)."""

    crashed: frozenset[tuple[str, str]] = frozenset()
    by_op: tuple[tuple[tuple[str, str], str], ...] = ()


def crash_site(record: CaseRecord, crash: str, sites: CrashSites | None = None) -> str:
    """The op an own crash died inside (its traced replay's `crash_site`) where that names the
    cause: an abort (code that chose to abort where it stands), or a crash of an op whose own
    cases crash the same way in the run (`sites.crashed`). Not otherwise: a heap damaged earlier
    makes whatever op uses it next die (a write past a block in `neg` segfaulted inside `empty`,
    `view`, `tanh_backward`); nor a sanitizer report (its signature names its own frame). ""
    when there is none."""
    site = _text(record.extra.get("crash_site"))
    if not crash or not site or record.culprit or _SANITIZER.search(crash):
        return ""
    crashed = sites.crashed if sites is not None else frozenset()
    return site if crash == "abort" or (site, crash) in crashed else ""


def crash_sites(failing: Iterable[CaseRecord]) -> CrashSites:
    """The `CrashSites` of a run's failing records."""
    failing = list(failing)
    crashed = frozenset(
        (r.op_name, crash)
        for r in failing
        if r.status == "crashed" and (crash := crash_signature(r))
    )
    known = CrashSites(crashed)
    seen: dict[tuple[str, str], set[str]] = {}
    for record in failing:
        crash = crash_signature(record)
        site = crash_site(record, crash, known)
        if site:
            seen.setdefault((record.op_name, crash), set()).add(site)
    by_op = tuple((key, found.pop()) for key, found in seen.items() if len(found) == 1)
    return CrashSites(crashed, by_op)


def finding_key(record: CaseRecord, sites: CrashSites | None = None) -> FindingKey:
    """The :class:`FindingKey` of one case record (on its own: see `group_findings` for the
    cases of a broken foundation, which share one key; `sites`: `crash_sites` of the run's
    failing records)."""
    crash = crash_signature(record)
    message = normalise_message(_text(record.message), record)
    raised = device_error(record.first_line, bool(record.findings.get("raised_on_the_device")))
    raised = None if crash else raised
    if raised is not None and not record.blocked_by:
        return FindingKey(check="error", message=raised, crash="", blocked_by="")
    culprit = ""
    if crash:  # keyed by class and culprit: glibc's words, pids and addresses vary
        culprit = blocking_op(record.culprit) if record.culprit else ""
        message = f"memory corrupted by {culprit}" if culprit else ""
        after = _text(record.extra.get("crashes_after"))
        if after and not culprit:  # needs another case first, no corruption shown: its own
            message = f"crashes only after {blocking_op(after)} ran in the process"
        if not culprit:  # its own: keyed by the op it died inside, where that names it
            site = crash_site(record, crash, sites)
            if not site and not record.extra.get("crash_site") and sites is not None:
                site = dict(sites.by_op).get((record.op_name, crash), "")  # not replayed
            if site:
                then = f", only after {blocking_op(after)} ran in the process" if after else ""
                message, culprit = f"inside {site}{then}", site
        culprit = culprit or record.op_name  # no other case to blame: its own crash
    return FindingKey(
        check=_text(record.check) or ("crash" if crash else ""),
        message=message,
        crash=crash,
        blocked_by=_text(record.blocked_by),
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


def device_error(message: str, raised_by_test: bool = False) -> str | None:
    """``device raised <Type>: <text>`` with the text normalised (op names, numbers, shapes
    masked), when `message` quotes an error the device raised (or, for a family's case whose
    message is what its test raised, is an exception other than the test's own
    AssertionError): the same error raised by one backend in many ops and scenarios is one
    code path, one cause, whatever cpu did."""
    match = _DEVICE_RAISED.search(message)
    if match is None and raised_by_test:
        match = _RAISED.match(message.strip())
        if match is not None and match.group(1) in ("AssertionError", "Failed"):
            match = None
    if match is None:
        return None
    text = _TEXT_END.split(match.group(2), maxsplit=1)[0]
    text = normalise_message(_OP_AFTER.sub(r"\1 <op>", _OP_NAME.sub("<op>", text)))
    return f"device raised {match.group(1)}: {text}" if text else None


def lacks_kernel(record: CaseRecord) -> bool:
    """A failing case that fails because the device lacks a kernel where cpu computes and the
    manifest does not declare it: check `unsupported`, or its own error is the dispatcher's
    "Could not run" (a scenario, a case whose kernel calls a missing one)."""
    if record.status not in ("failed", "error"):
        return False
    return _text(record.check) == "unsupported" or missing_kernel(record.first_line) is not None


def category_of(record: CaseRecord) -> str:
    """The manifest category (conformance/harness/expectations.py) of a case that is not a
    pass: the manifest's own for an expected one, else `unsupported` for a kernel the device
    lacks, `harness` for the suite's own errors, `backend-bug` for any other failure."""
    expected = record.status in ("xfailed", "unsupported", "skipped")
    if expected and record.category:
        return record.category
    if _text(record.check) == "unsupported" or record.status == "unsupported":
        return "unsupported"
    return "harness" if record.status == "error" else "backend-bug"


def portable(text: str) -> str:
    """`text` without this machine's paths: an absolute path into the repository's `matrices/`
    becomes relative, any other absolute file path its file name (a reason is read elsewhere)."""
    text = re.sub(r"(?<![\w./])(?:/[\w.+-]+)+/(matrices/[\w./<>-]+)", r"\1", text)
    return re.sub(r"(?<![\w./])(?:/[\w.+-]+)+/([\w.+<>-]+\.\w+)", r"\1", text)


# ---- the keys that need the other failing records ---------------------------------------------
def representative_rank(record: CaseRecord) -> tuple[object, ...]:
    """A failure of its own before a blocked case, then the simplest case first: a forward case
    (a backward runs other ops' kernels), an op's case before another family's (a scenario),
    contiguous, native, float32, short id."""
    return (
        bool(record.blocked_by),
        record.value_set == "grad",
        record.family != OP_FAMILY,
        record.layout != "contiguous",
        record.path != "native",
        record.dtype != "float32",
        len(record.id),
        record.id,
    )


def spans_collectives(record: CaseRecord) -> bool:
    """Whether a finding of the record spans collectives (its family declares it)."""
    return record.findings.get("spans") == "collective"


def collective_kind(record: CaseRecord, failing_ids: set[str]) -> str:
    """What a failing collectives case's finding is keyed by besides its message (whose
    collective, reduce op and mode are masked: one bug spans them): `async` where the same case
    run by the blocking call did not fail (the asynchronous path is wrong: a Work that completes
    early), else `reduces` or `moves` (a bug of the reduction or of moving data: two such bugs
    stay two findings)."""
    mode = str(record.extra.get("mode", "sync"))
    if mode != "sync" and record.id.replace(f"-{mode}]", "-sync]") not in failing_ids:
        return "async"
    return "moves" if record.extra.get("reduce_op") in (None, "none") else "reduces"


def probe_message(record: CaseRecord) -> str:
    """How the blocking foundation's probe failed, normalised and without which layout or
    direction it probed: two different failures of one foundation are two root causes."""
    probe = _text(record.extra.get("blocked_by_probe"))
    if not probe:  # results of an older suite: "what: message"
        probe = _text(record.extra.get("blocked_by_message")).partition(": ")[2]
    return normalise_message(probe)


def root_keys(
    failing: list[CaseRecord], sites: CrashSites | None = None
) -> dict[tuple[str, str], FindingKey]:
    """{(foundation op, how its probe failed): the one key of its finding} for every failure a
    failing case is blocked by. The key carries the foundation's own first failure when the op
    failed one way only (else, or if its cases did not run, what the probe saw); `sites`: the
    run's `crash_sites(failing)` (computed here when not given)."""
    roots: dict[tuple[str, str], FindingKey] = {}
    for record in failing:
        blocked_by = _text(record.blocked_by)
        if blocked_by:
            roots.setdefault(
                (blocking_op(blocked_by), probe_message(record)), FindingKey("", "", "", "")
            )
    ways = Counter(op for op, _ in roots)
    sites = crash_sites(failing) if sites is None else sites
    for op, probe in roots:
        own = [r for r in failing if r.op_name == op and not r.blocked_by]
        if own and ways[op] == 1:
            first = min(own, key=representative_rank)
            key = finding_key(first, sites)
            roots[(op, probe)] = FindingKey(key.check, key.message, key.crash, op, key.culprit)
        else:
            roots[(op, probe)] = FindingKey("foundation", probe, "", op)
    return roots


def _ranges(numbers: Iterable[int]) -> str:
    """`1, 2, 4, 28-31, 33`."""
    out: list[str] = []
    for n in sorted(set(numbers)):
        if out and "-" not in out[-1] and int(out[-1]) == n - 1 and out[-2:-1] == [str(n - 2)]:
            out[-2:] = [f"{n - 2}-{n}"]
        elif out and "-" in out[-1] and int(out[-1].split("-")[1]) == n - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ", ".join(out)


def collective_extent(cases: list[CaseRecord]) -> str:
    """For collectives cases (records whose family spans "collective": record.py `findings`):
    ` [sizes ...; dtypes; world(s) ...]`, what one root cause spans; "" for any other finding."""
    if not cases or any(not spans_collectives(c) for c in cases):
        return ""
    if any("size" not in c.extra or "world" not in c.extra for c in cases):
        return ""  # a record that does not say what it spans (a hand-made one)
    sizes = _ranges(int(c.extra["size"]) for c in cases)
    worlds = _ranges(int(c.extra["world"]) for c in cases)
    names = sorted({c.dtype for c in cases})
    dtypes = ", ".join(names) if len(names) <= 4 else f"{len(names)} dtypes"
    spans = [", ".join(sorted({str(c.extra.get(k)) for c in cases} - {"None", "none"}))
             for k in ("reduce_op", "mode")]  # fmt: skip
    ops = f"{spans[0]}; " if spans[0].count(",") < 4 else f"{spans[0].count(',') + 1} reduce ops; "
    ops = ops if spans[0] else ""
    modes = f"; {spans[1]}" if "," in spans[1] else ""
    layouts = sorted({c.layout for c in cases})
    where = f"; {', '.join(layouts)}" if layouts != ["contiguous"] else ""
    return f" [{ops}sizes {sizes}{where}; {dtypes}; world {worlds}{modes}]"

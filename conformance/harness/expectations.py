"""Expected-failure manifests: TOML files of case-id patterns with a status and a reason.

    unsupported_dtypes = ["float64"]        # optional: the device has no kernels in these dtypes
    flushes_subnormals = ["float32"]        # optional: the device flushes subnormals to zero
    computes_in_dtype = ["bfloat16"]        # optional: it computes half precision in itself

    [[entry]]
    pattern = "sum.dim_IntList-float16-*"   # fnmatch over the case id (the part in [...]),
                                            # or a list of them: one entry, one root cause;
                                            # a case of a family (harness/families) by its
                                            # prefix and name, e.g. scenario:test_cnn_training
                                            # (matched as written, [...] included, or as a
                                            # glob), contract:pinned-memory
    status = "xfail"                        # xfail | unsupported | skip | crash
    category = "backend-bug"  # backend-bug | torch-bug | unsupported | flaky | harness
    reason = "accumulates in half precision"
    link = "https://github.com/..."         # optional
    allocator = "guard"                     # optional: only under this allocator mode
    check = "values"                        # xfail: the check the case is expected to fail
    failure = "[values] output: <n>/<n> elements differ ..."  # optional: the failure it excuses

Strict: an xfail entry whose case passes fails the run with "remove this entry"; an xfail entry
with `check` whose case fails another check fails the run (a second bug must not hide behind
the first); an entry that matches no collected case is reported at the end of the run. `check`
is one check name or a list (the names in the case's `[check]`: values, error, view, strides,
...); an xfail entry without it is accepted, and listed at the end of the run as not pinned.
`failure` (one or a list) pins the failures themselves: the first line of the case's message
with numbers, shapes and addresses masked (as findings mask them); a failure of the same check
worded otherwise (a second `values` bug in the case) is not excused. The baseline writer pins
every xfail entry so.

`unsupported`: the device raising "not implemented" where CPU computes fails a case unless the
manifest declares it: an entry with `status = "unsupported"` (its cases may be unsupported; a case
of it that passes fails with "remove this entry", any other failure still fails), or, for a
device that lacks a whole dtype, the one line `unsupported_dtypes = ["float64", ...]` (any case of
those dtypes may be unsupported; cases that pass, e.g. through cpu_fallback, are fine; the
declaration is reported at the end of a full run when no case of the dtype was unsupported).
`flushes_subnormals = ["float32", ...]`: the device flushes subnormal results to zero in those
dtypes (FTZ, common on accelerators). Undeclared, a flushed subnormal fails with check
`subnormal`; declared, the device is judged against CPU's results with subnormals flushed.
`computes_in_dtype = ["float16", "bfloat16"]`: the device computes those dtypes in the dtype
itself, without float32 intermediates (half-precision units; XLA's reduced-precision lowering).
Undeclared, a few ulps against CPU (which computes them in float32 and rounds once) fail with
`values` or `rounding`; declared, values beyond the tolerance are judged against the float64
result with the dtype's own accuracy (engine/precision.py), and a case that passes only so
carries a note.
`python -m conformance.measure.baseline RESULTS` writes such a manifest from a run.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import tomllib

from conformance.errors import ConformanceUsageError
from conformance.harness.options import ALL_DTYPES
from conformance.record import CaseId, torch_minor

if TYPE_CHECKING:
    from conformance.engine.precision import DtypePolicy

STATUSES = ("xfail", "unsupported", "skip", "crash")
CATEGORIES = ("backend-bug", "torch-bug", "unsupported", "flaky", "harness")
KEYS = frozenset(
    {"pattern", "status", "category", "reason", "link", "allocator", "check", "failure"}
)
TOP_LEVEL = frozenset({"entry", "unsupported_dtypes", "flushes_subnormals", "computes_in_dtype"})
FLOATS = ("float16", "bfloat16", "float32", "float64")  # the dtypes that have subnormals
HALF = ("float16", "bfloat16")  # the dtypes a device may compute in themselves


@dataclass
class Entry:
    patterns: tuple[str, ...]
    status: str
    category: str
    reason: str
    source: str  # "file:line"
    link: str = ""
    allocator: str = ""
    checks: tuple[str, ...] = ()  # xfail: the checks the case may fail (empty: not pinned)
    # xfail: the failures it excuses, first lines with numbers masked (empty: any of `checks`)
    failures: tuple[str, ...] = ()

    @property
    def pattern(self) -> str:
        """The pattern, or the patterns joined, for messages."""
        return " ".join(self.patterns)

    def matching(self, case_id: str) -> str | None:
        """The first pattern of the entry that matches `case_id` (as written, or as a glob)."""
        return next(
            (p for p in self.patterns if p == case_id or fnmatch.fnmatchcase(case_id, p)), None
        )

    def not_expected_note(self, case_id: str) -> str:
        """What the first line of `case_id`'s failure gets where this entry expects another
        failure (`failure_head` takes it off again)."""
        pinned = "/".join(self.checks) or "the failures it names"
        return (
            f" (the manifest entry {self.matching(case_id)!r} at {self.source} expects a "
            f"[{pinned}] failure{' as it words it' if self.failures else ''}: this is another one)"
        )

    def expects(self, check: str | None, head: str = "") -> bool:
        """Whether a failure of `check`, whose record's first line is `head` ("[values] ..."),
        is the one this entry expects: its check, and where the entry pins its failures, that
        failure (numbers masked), so a second bug of the same check in a case is not excused."""
        if self.checks and check not in self.checks:
            return False
        return not self.failures or failure_key(head) in self.failures

    def mark(self, record: Any) -> None:
        """Note in `record` that this entry expects it: where, its category and its reason
        (the baseline writer carries the reason over without looking the entry up again)."""
        record.extra.update(
            expected_by=self.source, category=self.category, expected_reason=self.reason
        )

    def describe(self) -> str:
        link = f" ({self.link})" if self.link else ""
        return f"{self.category}: {self.reason}{link} [{self.source}]"


@dataclass
class Manifest:
    entries: list[Entry] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    unsupported_dtypes: dict[str, str] = field(default_factory=dict)  # dtype -> "file:line"
    flushes_subnormals: dict[str, str] = field(default_factory=dict)  # dtype -> "file:line"
    computes_in_dtype: dict[str, str] = field(default_factory=dict)  # dtype -> "file:line"
    # (entries it was built from, one regex that every pattern of them matches through): a case
    # id it rejects matches no entry (most of a run's ids; the entries are scanned for the rest)
    _screen: tuple[int, re.Pattern[str] | None] = field(
        default=(-1, None), init=False, repr=False, compare=False
    )

    def policy(self, dtype: str) -> DtypePolicy:
        """What the manifest declares of the device's arithmetic in `dtype` (a case's)."""
        from conformance.engine.precision import DtypePolicy

        return DtypePolicy(
            flushes_subnormals=dtype in self.flushes_subnormals,
            computes_in_dtype=dtype in self.computes_in_dtype,
        )

    def match(self, case_id: str, allocator: str = "") -> Entry | None:
        """The first entry (in file order) with a pattern matching `case_id`, under `allocator`:
        `scan`, for the ids the screen (one regex of every pattern) lets through."""
        screen = self.screen()
        if screen is None or screen.fullmatch(case_id) is None:
            return None
        return self.scan(case_id, allocator)

    def scan(self, case_id: str, allocator: str = "") -> Entry | None:
        """`match` without the screen: every entry in file order asked in turn."""
        for entry in self.entries:
            if entry.allocator and entry.allocator != allocator:
                continue
            if entry.matching(case_id) is not None:
                return entry
        return None

    def screen(self) -> re.Pattern[str] | None:
        """One regex that every pattern matches through (None: no patterns), built again when
        entries were added (compiling it costs about 10 ms)."""
        built, screen = self._screen
        if built != len(self.entries):
            patterns = [p for entry in self.entries for p in entry.patterns]
            parts = [x for p in patterns for x in (re.escape(p), fnmatch.translate(p))]
            screen = re.compile("|".join(f"(?:{x})" for x in parts)) if parts else None
            self._screen = (len(self.entries), screen)
        return screen


@dataclass(frozen=True)
class Expectations:
    """What the run's manifest expects of a case or scenario (entries limited to an allocator
    mode apply under that mode only)."""

    manifest: Manifest
    allocator: str

    def expectation(self, case: CaseId) -> Entry | None:
        return self.manifest.match(str(case), self.allocator)

    def family_expectation(self, key: str) -> Entry | None:
        """The manifest entry of a family's case, by its key (Family.manifest_key)."""
        return self.manifest.match(key, self.allocator)

    def declared_unsupported(self, case: CaseId, entry: Entry | None) -> str:
        """Where the manifest declares that `case` may be unsupported ("file:line": an entry
        with status "unsupported", or its dtype in unsupported_dtypes), else ""."""
        if entry is not None and entry.status == "unsupported":
            return entry.source
        return self.manifest.unsupported_dtypes.get(case.dtype, "")


def _line_of(text: str, key: str) -> int:
    """The line that assigns the top-level `key` (`key = ...`)."""
    for i, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*{re.escape(key)}\s*=", line):
            return i
    return 1


def _entry_starts(text: str) -> list[int]:
    """The line of each `[[entry]]` header, in order (TOML keeps the tables' order)."""
    return [
        i
        for i, line in enumerate(text.splitlines(), 1)
        if re.match(r"\s*\[\[\s*entry\s*\]\]", line)
    ]


def _pattern_line(text: str, pattern: str, start: int) -> int:
    """The entry's source line: the first line from its header (`start`) on that holds
    `pattern` as a TOML string, else the header. A source names one entry: found by
    substring from the top of the file, `avg_pool2d-*-zero_dim-*` was the line of another
    entry's `_adaptive_avg_pool2d-*-zero_dim-*`, and a baseline rewrite took the two entries
    for one (the crash entry of 23 ops was lost)."""
    for i, line in enumerate(text.splitlines()[start - 1 :], start):
        if not line.lstrip().startswith("#") and any(q + pattern + q in line for q in "\"'"):
            return i
    return start


def failure_key(head: str) -> str:
    """A failure's first line as entries pin it: numbers, shapes and addresses masked."""
    from conformance.findings import normalise_message

    return normalise_message(head)


def load_manifest(paths: list[str]) -> Manifest:
    """Parse manifest files; any problem is a one-line ConformanceUsageError naming file:line."""
    manifest = Manifest()
    for path in paths:
        try:
            with open(path, "rb") as f:
                raw = f.read()
            data = tomllib.loads(raw.decode())
        except FileNotFoundError:
            raise ConformanceUsageError(f"expectations file {path} does not exist") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConformanceUsageError(f"{path}: malformed TOML ({exc})") from None
        text = raw.decode()
        unknown_tables = set(data) - TOP_LEVEL
        if unknown_tables:
            raise ConformanceUsageError(
                f"{path}: unknown top-level key(s) {sorted(unknown_tables)}; use [[entry]] tables "
                "(or unsupported_dtypes = [...], flushes_subnormals = [...], "
                "computes_in_dtype = [...])"
            )
        starts = _entry_starts(text)
        for i, item in enumerate(data.get("entry", [])):
            start = starts[i] if i < len(starts) else 1
            manifest.entries.append(_entry(path, text, item, start))
        for key, allowed in (
            ("unsupported_dtypes", ALL_DTYPES),
            ("flushes_subnormals", FLOATS),
            ("computes_in_dtype", HALF),
        ):
            for dtype in _dtypes(path, data.get(key, []), key, allowed):
                getattr(manifest, key)[dtype] = f"{path}:{_line_of(text, key)}"
        manifest.files.append(path)
    manifest.screen()  # built once here: the runners forked later inherit it compiled
    return manifest


def _dtypes(path: str, value: object, key: str, allowed: tuple[str, ...]) -> list[str]:
    """The dtype names of a top-level list (`key`), checked against `allowed`."""
    names = value if isinstance(value, list) else [value]
    bad = [d for d in names if not isinstance(d, str) or d.removeprefix("torch.") not in allowed]
    if bad or not isinstance(value, list):
        raise ConformanceUsageError(
            f"{path}: {key} must list dtype names ({', '.join(allowed)}), e.g. "
            f'{key} = ["float64"]; got {bad or value!r}'
        )
    return [d.removeprefix("torch.") for d in names]


def _entry(path: str, text: str, item: dict, start: int) -> Entry:
    pattern = item.get("pattern")
    patterns = [pattern] if isinstance(pattern, str) else pattern
    valid = isinstance(patterns, list) and patterns and all(isinstance(p, str) for p in patterns)
    first = patterns[0] if valid else pattern
    where = f"{path}:{_pattern_line(text, str(first), start)}"
    if not valid or not all(patterns):
        raise ConformanceUsageError(
            f"{where}: an [[entry]] needs a non-empty 'pattern' string (or a list of them)"
        )
    extra = set(item) - KEYS
    if extra:
        raise ConformanceUsageError(
            f"{where}: unknown key(s) {sorted(extra)}; valid: {', '.join(sorted(KEYS))}"
        )
    status = item.get("status", "xfail")
    if status not in STATUSES:
        raise ConformanceUsageError(
            f"{where}: status '{status}' is not one of {', '.join(STATUSES)}"
        )
    category = item.get("category", "unsupported" if status == "unsupported" else "")
    if category not in CATEGORIES:
        raise ConformanceUsageError(
            f"{where}: category '{category}' is not one of {', '.join(CATEGORIES)}"
        )
    reason = item.get("reason", "")
    if not isinstance(reason, str) or not reason.strip():
        raise ConformanceUsageError(f"{where}: entry '{first}' needs a 'reason'")
    checks = item.get("check", ())
    checks = (checks,) if isinstance(checks, str) else checks
    if not isinstance(checks, list | tuple) or not all(isinstance(c, str) and c for c in checks):
        raise ConformanceUsageError(
            f"{where}: 'check' must be a check name or a list of them (e.g. check = \"values\")"
        )
    failures = item.get("failure", ())
    failures = (failures,) if isinstance(failures, str) else failures
    if not isinstance(failures, list | tuple) or not all(isinstance(f, str) for f in failures):
        raise ConformanceUsageError(
            f"{where}: 'failure' must be a failure's first line or a list of them"
        )
    return Entry(
        tuple(patterns),
        status,
        category,
        reason,
        where,
        str(item.get("link", "")),
        str(item.get("allocator", "")),
        tuple(checks),
        tuple(failures),
    )


def default_manifest_paths(root: str, backend: str, torch_version: str) -> list[str]:
    """matrices/expectations/<backend>/{common,torch-<major.minor>}.toml, those that exist."""
    minor = torch_minor(torch_version)
    folder = os.path.join(root, "matrices", "expectations", backend)
    names = ["common.toml", f"torch-{minor}.toml"]
    return [os.path.join(folder, n) for n in names if os.path.exists(os.path.join(folder, n))]


#: `Entry.not_expected_note` in a first line: the run's remark, not the case's failure
_NOT_EXPECTED = re.compile(r" \(the manifest entry '.*' at \S+ expects a \[[^\]]*\] failure"
                           r"(?: as it words it)?: this is another one\)")  # fmt: skip


def failure_head(message: str) -> str:
    """The first line of a case's own failure (under a `[blocked]` line, its own failure),
    without the note a run adds where an entry expected another failure: a rewritten manifest
    pinned that note (the old entry's line in it), and the next run's failure, noted no more,
    was "another one"."""
    lines = message.splitlines()
    if not lines:
        return ""
    if lines[0].startswith("[blocked]") and len(lines) > 1 and "own failure:" in lines[1]:
        return _NOT_EXPECTED.sub("", lines[1].split("own failure:", 1)[1].strip())
    return _NOT_EXPECTED.sub("", lines[0])

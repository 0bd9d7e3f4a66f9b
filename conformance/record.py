"""The result vocabulary: case ids, statuses, check names and the per-case result record.

One typed definition that everything producing or reading results imports: the harness (which
writes `results/cases-*.jsonl`), the report loader, bisect and the self-tests. Pure Python (no
torch, no pytest), so reports and CI tools load it anywhere. The JSON format is docs/RESULTS.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any

TEST_NAME = "test_matches_cpu"  # the generated test; a case's pytest name is TEST_NAME[<case id>]


class Status(str, Enum):
    """The outcome of one case (or scenario). A `str`, so it is written to JSON as its value."""

    CRASHED = "crashed"  # the process died in the case (signal, sanitizer, glibc abort)
    HUNG = "hung"  # the case ran past its time limit
    ERROR = "error"  # the harness itself failed (setup error): never the backend's verdict
    NOT_RUN = "not-run"  # collected but never run (the run stopped early): fails the run
    FAILED = "failed"  # a check failed
    BLOCKED = "blocked"  # failed, but depends on a foundation op that failed first (blocked_by)
    XPASSED = "xpassed"  # an expected failure passed: the manifest entry must go (strict)
    UNSUPPORTED = "unsupported"  # the device raised "not implemented", declared (or CPU raises)
    TORCH_BUG = "torch-bug"  # torch disagrees with itself (CPU across layouts, compiled vs eager)
    XFAILED = "xfailed"  # failed as a manifest entry expects
    PASSED = "passed"  # compared, and every check held
    SKIPPED = "skipped"  # nothing to compare (no sample fits this layout, dtype not supported)

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def __hash__(self) -> int:  # equal to its value, so it must hash like it (dict keys)
        return hash(self.value)


#: Every status, worst first: a grid cell or group shows the worst status of its cases.
STATUS_ORDER: tuple[Status, ...] = tuple(Status)
#: Statuses that need attention (listed first in reports, fail a bisect probe and
#: `--fail-on-failures`): a case that never ran is never a pass.
FAILING: frozenset[Status] = frozenset(
    {
        Status.CRASHED,
        Status.HUNG,
        Status.ERROR,
        Status.NOT_RUN,
        Status.FAILED,
        Status.BLOCKED,
        Status.XPASSED,
    }
)
_RANK = MappingProxyType({s: i for i, s in enumerate(STATUS_ORDER)})
#: the overloads the harness and cpu_fallback are built on, most primitive first (their cases
#: run first; engine/foundations.py probes them)
FOUNDATION_ORDER: tuple[str, ...] = (
    "empty.memory_format",
    "empty_strided",
    "_copy_from",
    "as_strided",
    "fill_.Scalar",
    "zero_",
    "resize_",
    "_copy_from_and_resize",
)


#: the dispatcher's words for an operator without a kernel for the backend
_NO_KERNEL = re.compile(
    r"Could not run '(?:aten::)?([\w.]+)' with arguments from the '(\w+)' backend"
)


def missing_kernel(message: str | None) -> str | None:
    """The overload a failure message says has no kernel on the device ("as_strided",
    "add.out"; from the dispatcher's "Could not run 'aten::add.out' with arguments from the
    'npu' backend"), or None. Autograd keys are not the device: their "Could not run" is None."""
    match = _NO_KERNEL.search(message or "")
    if match is None or match.group(2).startswith(("Autograd", "Autocast")):
        return None
    return match.group(1).removesuffix(".default")


def same_overload(a: str, b: str) -> bool:
    """`as_strided` and `as_strided.default` are one overload."""
    return a.removesuffix(".default") == b.removesuffix(".default")


def torch_minor(version: str) -> str:
    """A torch version's minor release: '2.13.0+cpu' -> '2.13' ('?' for no version)."""
    return ".".join(str(version).split("+")[0].split(".")[:2]) or "?"


def parse_status(value: Any) -> Status:
    """A status from its JSON value; unknown or missing values read as ``error``."""
    try:
        return Status(str(value))
    except ValueError:
        return Status.ERROR


def status_rank(status: str | Status) -> int:
    """Position in :data:`STATUS_ORDER` (0 = worst); unknown statuses rank as ``error``."""
    return _RANK[parse_status(status)]


def worst_status(statuses: Iterable[str | Status]) -> Status:
    """The worst of ``statuses`` (``skipped`` for none)."""
    return min((parse_status(s) for s in statuses), key=_RANK.__getitem__, default=Status.SKIPPED)


#: Check names a result can carry besides those of the engine's per-sample checks
#: (conformance.engine.checks.CHECKS): failures of the process or the harness, a missing kernel
#: (set by the harness from the manifest); a family's own check is its Family's (harness/families).
HARNESS_CHECKS = MappingProxyType(
    {
        "unsupported": "the device raised 'not implemented' where CPU computes (status "
        "`unsupported` when the expectations manifest declares it, else `failed`)",
        "crash": "the process died while running the case",
        "hang": "the case ran past its time limit",
        "harness": "the suite itself failed while building inputs or checking (not the backend)",
        "asynchronous": "an -asynchronous case read values other than its synchronous run's (a "
        "missing fence; the message names the contract item, the stream, the event and the "
        "tensor)",
    }
)


@dataclass(frozen=True, order=True)
class CaseId:
    """What a case tests: ``<overload>-<dtype>-<layout>-<path>[-<values>]``, e.g.
    ``masked_fill_.Scalar-float32-transposed-native``. No part contains ``-`` (aten overload
    names are identifiers with a dot). ``values`` names a value set other than the ordinary
    samples (e.g. ``special``: NaN, infinities, extremes); empty for the ordinary ones."""

    overload: str
    dtype: str
    layout: str
    path: str
    values: str = ""

    def __str__(self) -> str:
        text = f"{self.overload}-{self.dtype}-{self.layout}-{self.path}"
        return f"{text}-{self.values}" if self.values else text

    @property
    def op(self) -> str:
        """``masked_fill_`` of ``masked_fill_.Scalar``."""
        return self.overload.split(".")[0]

    @property
    def overload_tag(self) -> str:
        """``Scalar`` of ``masked_fill_.Scalar``; ``default`` for ``abs``."""
        return self.overload.partition(".")[2] or "default"

    @property
    def test_name(self) -> str:
        """The pytest name of the case: ``test_matches_cpu[<id>]``."""
        return f"{TEST_NAME}[{self}]"

    @classmethod
    def parse(cls, text: str) -> CaseId:
        """Parse a case id, a pytest name or a node id that ends in ``[<case id>]``."""
        if text.endswith("]") and "[" in text:
            text = text[text.index("[") + 1 : -1]
        parts = text.split("-")
        if len(parts) not in (4, 5) or not all(parts):
            raise ValueError(
                f"not a case id: {text!r} (expected overload-dtype-layout-path[-values])"
            )
        return cls(*parts)


#: the family of the generated op cases (the report's grid holds them alone)
OP_FAMILY = "ops"
#: the family of a record whose results predate the `family` field, by its `path`
FAMILY_OF_PATH = MappingProxyType(
    {"scenario": "scenarios", "contract": "contract", "collectives": "collectives"}
)
#: how the findings (finding_keys.py) read a family's failing records, as each family declares
#: it (harness/families: `Family.findings`, written into its records' `extra["findings"]`):
#: `raised_on_the_device`: the failing message is the exception the test body raised calling the
#: device (a contract or collectives case's is the harness's observation); `spans`: the record's
#: fields one finding's title spans ("collective": sizes, worlds, reduce ops, modes, and a key by
#: kind). Records written before they carried it read it from this table, by family
FINDINGS_OF_OLDER_RECORDS = MappingProxyType(
    {"scenarios": {"raised_on_the_device": True}, "collectives": {"spans": "collective"}}
)


def _copied(value: Any) -> Any:
    """A copy of a JSON-like value as `dataclasses.asdict` makes it: containers copied, a
    dataclass as a dict, other values (str, numbers, None) themselves."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*[_copied(v) for v in value])
    if isinstance(value, list | tuple):
        return type(value)(_copied(v) for v in value)
    return value


@dataclass
class CaseRecord:
    """One line of ``cases-<worker>.jsonl``: what one case measured (docs/RESULTS.md)."""

    id: str  # the pytest name, e.g. test_matches_cpu[abs-float32-contiguous-native]
    status: Status
    op: str = "?"
    overload: str = ""
    dtype: str = "-"
    layout: str = "-"
    path: str = "-"
    check: str | None = None
    message: str | None = None
    samples: int = 0
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    duration: float | None = None
    repro: str = ""
    torch: str = ""
    backend: str = ""
    allocator: str = ""
    blocked_by: str | None = None  # the foundation case whose failure this case depends on
    family: str = ""  # the kind of case (harness/families): ops, scenarios, contract, collectives
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.family:  # a record of an older suite, or one built before its family said
            self.family = FAMILY_OF_PATH.get(self.path, OP_FAMILY)

    @classmethod
    def for_case(cls, case: CaseId, status: Status, **values: Any) -> CaseRecord:
        """A record for ``case`` with its id fields filled in."""
        return cls(
            id=case.test_name,
            status=status,
            op=case.op,
            overload=case.overload_tag,
            dtype=case.dtype,
            layout=case.layout,
            path=case.path,
            **({"extra": {"values": case.values}} if case.values else {}),
            **values,
        )

    @property
    def findings(self) -> dict[str, Any]:
        """How the findings read this record, as its family declared it (`extra["findings"]`)."""
        declared = self.extra.get("findings")
        if declared is None:
            declared = FINDINGS_OF_OLDER_RECORDS.get(self.family, {})
        return dict(declared)

    @property
    def op_name(self) -> str:
        """``op.overload`` (``masked_fill_.Scalar``), or just ``op`` for the default overload."""
        if self.overload and self.overload != "default":
            return f"{self.op}.{self.overload}"
        return self.op

    @property
    def failing(self) -> bool:
        return self.status in FAILING

    @property
    def axis(self) -> str:
        """``ordinary``, a value set (``special``, ``promotion``) or a mode (``grad``,
        ``inference``, ``sync``): what part of a case id follows the path."""
        return self.value_set or "ordinary"

    @property
    def value_set(self) -> str:
        """The value set or mode of the case (``special``, ``grad``, ...), ``""`` for the
        ordinary samples (which :attr:`axis` names ``ordinary``)."""
        return str(self.extra.get("values") or "")

    @property
    def culprit(self) -> str:
        """The case id the culprit search named as the case that corrupted memory before this
        one crashed, or ``""``."""
        return str(self.extra.get("culprit") or "")

    @property
    def expected_by(self) -> str:
        """The manifest entry that expected this case (``file:line``), or ``""``."""
        return str(self.extra.get("expected_by") or "")

    @property
    def category(self) -> str:
        """The manifest category of the entry that expected this case, or ``""``."""
        return str(self.extra.get("category") or "")

    @property
    def first_line(self) -> str:
        """The first line of the message, stripped (``""`` without one)."""
        text = "" if self.message is None else str(self.message).strip()
        return text.splitlines()[0] if text else ""

    def to_json(self) -> dict[str, Any]:
        """The record as one JSON object: its fields (plain values, read as they are) and
        `extra`'s keys, copied as `dataclasses.asdict` copies (asdict deep-copied every field
        of every record, a case's largest share of writing its record)."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        data["status"] = self.status.value
        return {**data, **_copied(self.extra)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CaseRecord:
        """Read one decoded JSON line; tolerant of missing fields and of unknown ones (kept in
        ``extra``), so results of older and newer versions of the suite load."""
        known = {f.name for f in fields(cls)} - {"extra"}
        values: dict[str, Any] = {k: data[k] for k in known if data.get(k) not in (None, "")}
        values["id"] = str(data.get("id", ""))
        values["status"] = parse_status(data.get("status"))
        for key in ("op", "overload", "dtype", "layout", "path", "repro", "torch", "backend"):
            if key in values:
                values[key] = str(values[key])
        if not isinstance(values.get("duration"), int | float):
            values.pop("duration", None)
        values["extra"] = {k: v for k, v in data.items() if k not in known}
        return cls(**values)

"""What a run found, case by case: the one reading of a run's records that both the baseline
manifest (`baseline.py`) and the upstream test configuration (`conformance/upstream/`) are
written from.

A failing case is found under its root cause (`conformance/findings.py`), with the status an
expectation of it takes: `xfail` for a reproducible failure, `unsupported` for a kernel the
device lacks, `crash` for a crash (the case that corrupted memory when the culprit search named
one, not its victim), `skip` for a hang. A case an earlier manifest expected (xfailed, declared
unsupported, skipped) is found under that manifest's entry. An expected failure that passed
(xpassed) is found nowhere: nothing expects it any more.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import MappingProxyType

from conformance.findings import Finding, group_findings
from conformance.record import CaseId, CaseRecord, missing_kernel

__all__ = ("Found", "expected_crash", "expected_status", "found", "kernel_lacked")

#: statuses of cases an earlier manifest expected, and the entry status that expects them
EXPECTED = MappingProxyType({"xfailed": "xfail", "unsupported": "unsupported", "skipped": "skip"})


@dataclass(frozen=True)
class Found:
    """One failing case of a run, as an expectation of it would name it."""

    record: CaseRecord
    status: str  # xfail | unsupported | crash | skip
    finding: Finding
    kernel: str = ""  # unsupported: the kernel the device lacks
    own: str = ""  # the status of the record's own failure (a lacking kernel met in a -grad
    #               case fails its check: xfail), where it differs from `status`

    @property
    def culprit(self) -> str:
        """A crash's culprit (the case that corrupted memory, when the search named one): the
        case an expectation names instead of this one; else ""."""
        culprit = self.record.culprit
        if self.status != "crash" or not culprit:
            return ""
        try:
            return str(CaseId.parse(culprit))
        except ValueError:  # a scenario, contract item or family case ran before it
            return ""


def kernel_lacked(record: CaseRecord) -> str:
    """The kernel an unsupported case lacks: the one its error names, else its own op."""
    missing = missing_kernel(record.first_line)
    return record.op_name if missing is None else missing


def _status(record: CaseRecord) -> str:
    if record.status == "crashed":
        return "crash"
    if record.status == "hung":
        return "skip"
    return "unsupported" if record.check == "unsupported" else "xfail"


def found(records: Iterable[CaseRecord]) -> Iterator[Found]:
    """The failing cases among `records`, per finding (as the run's summary groups them: all
    records go in, passing ones say what the failing ones have in common)."""
    for finding in group_findings(records):
        for record in finding.cases:
            if record.status == "xpassed":
                continue
            own = _status(record)
            if finding.is_unsupported:  # one expectation per kernel the device lacks
                yield Found(record, "unsupported", finding, kernel_lacked(record), own)
            else:
                yield Found(record, own, finding, own=own)


def expected_crash(record: CaseRecord) -> bool:
    """Whether a manifest skipped `record` as a crash (its skip reason says "crash: ...")."""
    return str(record.message or "").removeprefix("Skipped: ").startswith("crash")


def expected_status(record: CaseRecord) -> str | None:
    """The status of the entry that expected `record` (xfail, unsupported, skip), None for a
    record no manifest expected (or one that passed although expected: xpassed)."""
    if not record.expected_by:
        return None
    return EXPECTED.get(str(record.status))

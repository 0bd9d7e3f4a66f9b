"""The end of a conformance run in the terminal: the verdict last, on one screen.

pytest's short test summary prints one line per skipped and xfailed test when `-r` asks for them
(this repository's pyproject.toml sets `-ra` in its ini `addopts`, a backend's project may too):
hundreds of "SKIPPED ... no sample of X has an input that the 'channels_last' layout applies to"
lines that bury the verdict. For conformance items those lines are folded into the conformance
summary: skips one line per reason with counts, xfails counted per manifest entry. A user who asks
for the lines gets them: `-r` on the command line or in PYTEST_ADDOPTS (`-rs`, `-rx`, `-ra`)
turns the folding of those characters off; an ini file's `addopts` is a project default, not a
request. Failures keep pytest's own lines (FAILURES, ruled by --tb, and the FAILED list): the
summary groups them into findings after them.

The summary section comes after pytest's own short summary (only pytest's final count line
follows it): identity (backend, torch), coverage gaps, skips, expected failures, unsupported,
torch-bug, findings, "N collected = N recorded", where the results are.
"""

from __future__ import annotations

import os
import shlex
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from conformance.findings import Finding, normalise_message, unsupported_by_op
from conformance.harness.expectations import Entry
from conformance.record import CaseRecord

#: pytest's report characters whose short-summary lines are folded for conformance items, and
#: the terminal reporter's stats key of each
FOLDED = (("s", "skipped"), ("x", "xfailed"))
SKIP_REASONS = 6  # skip reasons shown; the rest are counted


def asked_report_chars(args: Sequence[str], addopts: str = "") -> str:
    """The `-r` characters the user asked for on the command line (`args`) or in
    PYTEST_ADDOPTS (`addopts`), expanded as pytest does (a = sxXEf, A = PpsxXEf, N = none)."""
    chars = ""
    tokens = [*shlex.split(addopts), *args]
    for i, token in enumerate(tokens):
        if token == "-r" and i + 1 < len(tokens):
            chars = tokens[i + 1]
        elif token.startswith("-r") and not token.startswith("--"):
            chars = token[2:]
    out = ""
    for char in chars:
        char = char.lower() if char in "FS" else char
        if char == "a":
            out = "sxXEf"
        elif char == "A":
            out = "PpsxXEf"
        elif char == "N":
            out = ""
        elif char not in out:
            out += char
    return out


def skip_reason(record: CaseRecord) -> str:
    """A skip's reason without what varies between cases of one reason: the case's op and
    layout, numbers, a scenario's step."""
    text = str(record.message or "no reason given").removeprefix("Skipped: ")
    reason = normalise_message(text.split(" (step: ")[0], record)
    op = record.op
    return reason.replace(f" of {op} ", " of <op> ") if op else reason


@dataclass
class Summary:
    """What the conformance summary says (built by the run at its end)."""

    records: list[CaseRecord]
    findings: list[Finding]
    identity: str = ""
    coverage: str = ""
    accounting: dict[str, int] | None = None
    results: str | None = None
    stale: list[str] = field(default_factory=list)  # manifest entries that match nothing
    unpinned: list[Entry] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # e.g. the baseline written


class Terminal:
    """The pytest plugin that folds conformance lines out of pytest's short summary and writes
    the conformance summary after it (registered by ConformanceRun)."""

    def __init__(self, config: pytest.Config, summary: Callable[[Any, int], Summary | None]):
        self.config = config
        self.summary = summary  # (terminalreporter, exitstatus) -> Summary, once at the end
        self.asked = asked_report_chars(
            config.invocation_params.args, os.environ.get("PYTEST_ADDOPTS", "")
        )
        self.hidden: dict[str, list] = {}

    def folds(self, char: str) -> bool:
        return char not in self.asked

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Keep out of pytest's terminal stats a passed setup or teardown report that has no
        teardown section: pytest keeps them (stats[""]) only to print a failure's teardown
        sections, and finds those by scanning all of them for each failure (quadratic: 1,549
        failures over 31,000 such reports cost the controller 20 s of CPU). It prints nothing
        for them, and counts none."""
        if report.when == "call" or not report.passed:
            return
        if any("teardown" in name for name, _ in report.sections):
            return
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        kept = reporter.stats.get("") if reporter is not None else None
        if kept and kept[-1] is report:
            kept.pop()

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter) -> None:
        """After pytest's FAILURES/XFAILURES sections, before its short summary: hide the
        skipped and xfailed reports of conformance items, unless -r asked for them."""
        from conformance.harness.families import registry

        stats = terminalreporter.stats
        judge = registry().nodeid_judge(terminalreporter.config)
        for char, key in FOLDED:
            if not self.folds(char) or key not in stats:
                continue
            reports = stats[key]
            ours = [r for r in reports if judge(getattr(r, "nodeid", ""))]
            if ours:
                self.hidden[key] = ours
                hidden = {id(r) for r in ours}
                stats[key] = [r for r in reports if id(r) not in hidden]

    @pytest.hookimpl(wrapper=True, tryfirst=True, specname="pytest_terminal_summary")
    def pytest_terminal_summary_last(self, terminalreporter, exitstatus, config):
        """After pytest's short summary: put the hidden reports back (pytest's final count
        line counts them) and write the conformance summary."""
        try:
            return (yield)
        finally:
            for key, reports in self.hidden.items():
                terminalreporter.stats.setdefault(key, []).extend(reports)
            self.hidden = {}
            summary = self.summary(terminalreporter, exitstatus)
            if summary is not None:
                write_summary(terminalreporter, summary, self)


def write_section(tr, title: str, lines: list[str]) -> None:
    """A yellow terminal section, if there is anything to say."""
    if lines:
        tr.section(f"conformance: {title}", yellow=True)
        for line in lines:
            tr.write_line(line)


def write_summary(tr, s: Summary, terminal: Terminal) -> None:
    """The conformance summary: stale/unpinned entries, then one section, the verdict last."""
    write_section(tr, "stale expectations", s.stale)
    write_section(
        tr,
        "expectations not pinned",
        [
            f"{e.status} entry {e.pattern!r} at {e.source} does not say which check fails (add "
            'e.g. check = "values"): a second bug in its cases would hide'
            for e in s.unpinned
        ],
    )
    failing = sum(f.count for f in s.findings)
    not_run = (s.accounting or {}).get("not_run", 0)
    tr.section("conformance: summary", red=bool(failing or not_run), green=not failing)
    for line in (s.identity, s.coverage):
        if line:
            tr.write_line(line)
    where = f"{os.path.join(s.results, '')}cases-*.jsonl" if s.results else "--results DIR"
    if terminal.folds("s"):
        _skips(tr, s.records, where)
    if terminal.folds("x"):
        _xfails(tr, s.records)
    _not_failures(tr, s.records)
    _ran(tr, s.records)
    _lazy_time(tr, s.records)
    _first_calls(tr, s.records)
    _findings(tr, s.records, s.findings)
    for note in s.notes:
        tr.write_line(note)
    if s.accounting is not None:
        counts = s.accounting
        line = (
            f"conformance: {counts['collected']} collected = {counts['recorded']} recorded"
            if counts["collected"] == counts["recorded"]
            else f"conformance: {counts['collected']} collected, {counts['recorded']} "
            "recorded (a case without a record is a bug of the suite: please report it)"
        )
        if counts["not_run"]:
            line += f"; {counts['not_run']} not run (the run fails)"
        tr.write_line(line, red=bool(counts["not_run"]))
    if s.results:
        tr.write_line(f"conformance: per-case results in {os.path.join(s.results, '')}")


def _skips(tr, records: list[CaseRecord], where: str) -> None:
    """One line per skip reason, most frequent first (with the layouts it names)."""
    skipped = [r for r in records if r.status == "skipped"]
    if not skipped:
        return
    reasons: dict[str, Counter[str]] = {}
    for r in skipped:
        reasons.setdefault(skip_reason(r), Counter())[r.layout] += 1
    tr.write_line(
        f"skipped: {len(skipped)} case(s) with nothing to compare, {len(reasons)} reason(s) "
        f"(-rs lists them; each case: {where}):"
    )
    ranked = sorted(reasons.items(), key=lambda kv: -sum(kv[1].values()))
    for reason, layouts in ranked[:SKIP_REASONS]:
        detail = ""
        if "'<layout>'" in reason:
            detail = " (" + ", ".join(f"{lay} {n}" for lay, n in layouts.most_common(4))
            detail += ", ...)" if len(layouts) > 4 else ")"
        tr.write_line(f"  {sum(layouts.values()):6d} {reason[:120]}{detail}")
    if len(reasons) > SKIP_REASONS:
        rest = sum(sum(c.values()) for _, c in ranked[SKIP_REASONS:])
        tr.write_line(f"  {rest:6d} in {len(reasons) - SKIP_REASONS} more reason(s)")


def _xfails(tr, records: list[CaseRecord]) -> None:
    xfailed = [r for r in records if r.status == "xfailed"]
    if not xfailed:
        return
    entries = Counter(r.expected_by or "?" for r in xfailed)
    entries_expect = (
        "1 manifest entry expects"
        if len(entries) == 1
        else (f"{len(entries)} manifest entries expect")
    )
    tr.write_line(f"xfailed: {len(xfailed)} case(s) failed as {entries_expect} (-rx lists them)")


def _not_failures(tr, records: list[CaseRecord]) -> None:
    """Unsupported and torch-bug: shown, not failures."""
    unsupported = unsupported_by_op(records)
    if unsupported:
        tr.write_line(
            "unsupported, declared by the manifest: "
            f"{sum(unsupported.values())} case(s) in {_by_op(unsupported)}"
        )
    bugs = Counter(
        f"{r.op}.{r.overload}".removesuffix(".default") for r in records if r.status == "torch-bug"
    )
    if bugs:
        tr.write_line(
            "torch-bug (torch disagrees with itself: CPU across layouts, or Inductor on CPU "
            "with CPU eager; the device agrees): "
            f"{sum(bugs.values())} case(s) in {_by_op(dict(bugs.most_common()))}"
        )


def _ran(tr, records: list[CaseRecord]) -> None:
    """On a lazy device: how many cases ran natively and how many fell back to CPU, by the
    device runtime's own counters (the record's "ran")."""
    ran = [r for r in records if r.extra.get("ran")]
    if not ran:
        return
    fell = {r.op for r in ran if r.extra["ran"] == "fallback"}
    n = sum(r.extra["ran"] == "fallback" for r in ran)
    tr.write_line(
        f"ran (the lazy runtime's aten:: counters): {len(ran) - n} case(s) natively, {n} fell "
        f"back to CPU" + (f" ({len(fell)} op(s): {_names(sorted(fell))})" if fell else "")
    )


def _lazy_time(tr, records: list[CaseRecord]) -> None:
    line = lazy_time_line(records)
    if line:
        tr.write_line(line)


def lazy_time_line(records: list[CaseRecord]) -> str | None:
    """On a lazy device: where the cases' time went, by the runtime's own metrics (the records'
    "compile_s" and "execute_s"): compiling graphs, running them, and the rest, the suite's own
    (the CPU reference, the checks, the transfers); which ops compiled longest. None where the
    runtime measured nothing."""
    timed, compiling, top = _backend_seconds(records, "compile_s", floor=0.05)
    if not timed:
        return None
    total = sum(r.duration or 0.0 for r in timed)
    executed = [r for r in timed if isinstance(r.extra.get("execute_s"), int | float)]
    executing = sum(r.extra["execute_s"] for r in executed)
    spent = f"compiling {compiling:.1f} s"
    spent += f", executing {executing:.1f} s" if executed else " (execute time not measured)"
    if total:
        own = max(total - compiling - executing, 0.0)
        spent += (
            f"; the suite's own {own:.1f} s = {100 * own / total:.0f} % of the cases' "
            f"{total:.0f} s ({1000 * own / len(timed):.0f} ms a case)"
        )
    return (
        f"time on the lazy runtime (its CompileTime and ExecuteTime metrics) over "
        f"{len(timed)} case(s): {spent}" + (f"; longest compiles: {top}" if top else "")
    )


def _backend_seconds(
    records: list[CaseRecord], key: str, floor: float = 0.0
) -> tuple[list[CaseRecord], float, str]:
    """(the records that have the seconds `key`, their sum, the three ops with the most, each
    from `floor` seconds on): time the backend spent, not the suite."""
    timed = [r for r in records if isinstance(r.extra.get(key), int | float)]
    by_op: Counter[str] = Counter()
    for r in timed:
        by_op[r.op] += r.extra[key]
    top = ", ".join(f"{op} {s:.1f} s" for op, s in by_op.most_common(3) if s >= floor)
    return timed, sum(r.extra[key] for r in timed), top


#: first calls worth a summary line: this many seconds, and this share of the cases' time
FIRST_CALLS_SHOWN = (1.0, 0.05)


def _first_calls(tr, records: list[CaseRecord]) -> None:
    """How much of the cases' time went into each overload's first device call in its runner
    (the record's "first_call_s"): where a backend that compiles kernels on first use (a JIT
    backend) spends it. Said when it is a noticeable part of the run."""
    timed, first, top = _backend_seconds(records, "first_call_s")
    total = sum(r.duration or 0.0 for r in records)
    seconds, share = FIRST_CALLS_SHOWN
    if first < seconds or not total or first < share * total:
        return
    tr.write_line(
        f"first calls (each overload's first device call in its runner, where a backend that "
        f"compiles kernels on first use spends it): {first:.1f} s in {len(timed)} case(s) "
        f"({100 * first / total:.0f} % of the cases' {total:.0f} s); longest: {top}"
    )


def _names(names: list[str], shown: int = 8) -> str:
    more = f", ... {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _by_op(counts: dict[str, int], shown: int = 6) -> str:
    """`abs (3), add.Tensor (2), ...`."""
    text = ", ".join(f"{op} ({n})" for op, n in list(counts.items())[:shown])
    return text + (f", ... ({len(counts)} ops)" if len(counts) > shown else "")


def _findings(tr, records: list[CaseRecord], findings: list[Finding]) -> None:
    """Failing cases grouped into root causes."""
    failing = sum(f.count for f in findings)
    tr.write_line(
        f"{failing} failing cases = {len(findings)} finding(s) "
        f"(one per root cause; {len(records)} cases and scenarios in all)",
        red=bool(findings),
        bold=True,
    )
    for i, f in enumerate(findings, 1):
        tr.write_line(f"{i:3d}. {f.title} -- {f.count} case(s) in {', '.join(f.ops[:6])}")
        rep = f.representative
        tr.write_line(f"     e.g. {rep.id}")
        if f.related:
            tr.write_line(f"     might be related (not blocking): {', '.join(f.related[:3])}")
        if rep.repro:
            tr.write_line(f"     repro: {rep.repro}")

"""The search itself: probe both ends, then binary-search between them, skipping what cannot run.

A :class:`ProbeRunner` turns a version into a :class:`Probe`: outcome ``pass``, ``fail``, ``skip``
(the release could not be installed or the backend not built against it: normal for an out-of-tree
backend across torch releases) or ``error`` (it ran but gave no verdict, e.g. no case selected).
The real runner installs and runs (:mod:`conformance.bisect.probe`); tests pass fakes.

Like ``git bisect skip``, a middle release that gives no verdict is set aside and the search goes
on with the nearest untested release; if skipped releases sit right before the first bad one, the
answer is a range (:attr:`BisectResult.candidates`). The ends must give a verdict.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol

from packaging.version import Version

from conformance.errors import ConformanceUsageError

OUTCOMES = ("pass", "fail", "skip", "error")
VERDICTS = ("pass", "fail")


class BisectError(ConformanceUsageError):
    """Bad input or an unusable probe; the message is one line."""


@dataclass
class Probe:
    """One probed version: outcome, wall time (s), log file, whether it installed a venv."""

    version: str
    outcome: str
    seconds: float = 0.0
    log: str = ""
    installed: bool = False
    detail: str = ""

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return asdict(self)


class ProbeRunner(Protocol):
    """Anything that can install+run the case for one version and say pass/fail/error."""

    def probe(self, version: Version) -> Probe:
        """Run the case on ``version``."""
        ...


@dataclass
class BisectResult:
    """The answer: the first bad and last good releases, and every probe in order."""

    expression: str
    good: str
    bad: str
    versions: list[str]
    first_bad: str
    last_good: str
    probes: list[Probe] = field(default_factory=list)
    seconds: float = 0.0
    candidates: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        """Whether the first bad release is known exactly (else: one of :attr:`candidates`)."""
        return len(self.candidates) <= 1

    @property
    def answer(self) -> str:
        """One line: the first bad release (or the range), last good, skipped releases."""
        if self.exact:
            text = f"First bad: torch {self.first_bad} (last good: {self.last_good})"
        else:
            text = (
                f"First bad: one of torch {', '.join(self.candidates)} (last good: "
                f"{self.last_good}); a range, because {', '.join(self.candidates[:-1])} "
                "could not be tested"
            )
        if self.skipped:
            text += f"; skipped (no verdict): {', '.join(self.skipped)}"
        return text

    @property
    def installs(self) -> int:
        """How many probes had to install a venv (cached venvs do not count)."""
        return sum(1 for p in self.probes if p.installed)

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (what ``--json`` writes)."""
        data = asdict(self)
        data["installs"] = self.installs
        data["exact"] = self.exact
        data["answer"] = self.answer
        data["max_probes"] = max_probes(len(self.versions)) + len(self.skipped)
        return data


def max_probes(n: int) -> int:
    """The promised bound on probes for ``n`` versions: ceil(log2(n)) + 2."""
    return math.ceil(math.log2(max(n, 1))) + 2


def _check(probe: Probe, role: str) -> Probe:
    if probe.outcome not in OUTCOMES:
        raise BisectError(f"probe of {probe.version} returned unknown outcome {probe.outcome!r}")
    if role != "middle" and probe.outcome not in VERDICTS:
        where = f" (log: {probe.log})" if probe.log else ""
        detail = f": {probe.detail}" if probe.detail else ""
        raise BisectError(
            f"the {role} probe of torch {probe.version} did not run{detail}{where}; "
            f"the ends need a verdict: pick another {role}"
        )
    return probe


def bisect_versions(
    expression: str,
    versions: Sequence[Version],
    good: Version,
    bad: Version,
    runner: ProbeRunner,
) -> BisectResult:
    """Find the first version in ``[good, bad]`` whose outcome differs from ``good``'s.

    ``good`` may fail and ``bad`` pass (bisecting a fix): the search looks for the change either
    way, reported as "first bad" = first version with ``bad``'s outcome. A middle probe without a
    verdict (``skip``/``error``) is set aside and the nearest untested release probed instead.
    """
    if good >= bad:
        raise BisectError(f"--good {good} must be older than --bad {bad}")
    span = [v for v in sorted(versions) if good <= v <= bad]
    if not span or span[0] != good or span[-1] != bad:
        raise BisectError(f"{good} and {bad} must both be on the index")
    start = time.monotonic()
    probes: list[Probe] = []

    def run(v: Version, role: str) -> str:
        probe = _check(runner.probe(v), role)
        probes.append(probe)
        return probe.outcome

    good_outcome = run(good, "--good")
    bad_outcome = run(bad, "--bad")
    if good_outcome == bad_outcome:
        word = "pass" if good_outcome == "pass" else "fail"
        raise BisectError(
            f"both ends {word} (torch {good} and {bad}): nothing to bisect; "
            "pick a --good that passes and a --bad that fails"
        )
    lo, hi = 0, len(span) - 1  # span[lo] behaves like good, span[hi] like bad
    skipped: set[int] = set()
    while True:
        untested = [i for i in range(lo + 1, hi) if i not in skipped]
        if not untested:
            break
        mid = (lo + hi) // 2
        index = min(untested, key=lambda i: (abs(i - mid), i))
        outcome = run(span[index], "middle")
        if outcome not in VERDICTS:
            skipped.add(index)
        elif outcome == good_outcome:
            lo = index
        else:
            hi = index
    return BisectResult(
        expression=expression,
        good=str(good),
        bad=str(bad),
        versions=[str(v) for v in span],
        first_bad=str(span[hi]),
        last_good=str(span[lo]),
        probes=probes,
        seconds=round(time.monotonic() - start, 1),
        candidates=[str(v) for v in span[lo + 1 : hi + 1]],
        skipped=[str(span[i]) for i in sorted(skipped)],
    )

"""A campaign: every registered overload crossed with every operator that applies to its schema
(a seeded sample of them, within a time budget), each mutant run through the real suite.

Each mutant is one `python -m pytest conformance --ops OVERLOAD --maxfail 1` with the mutant
installed by the backend wrapper (engine/wrapping.py, `install.py`; a mutant no op case calls
runs again over every other family: the runtime contract calls record_stream): the cases,
runners, checks and verdicts of a user's run, on any backend. Before them, one control run
over the same overloads with the identity mutant ("none") says which cases already fail: those
never count as a kill, and a verdict the identity changes is a defect of the wrapper.

The classes: `killed` (a case of the mutated overload failed a check), `killed-elsewhere` (only
another overload's case failed: the failure names the wrong op), `crashed` (the mutant's cases
crashed or hung), `error` (the suite reported its own error: a harness defect), `survived`,
`equivalent` (called, and its results equal the original's on every call the suite made),
`unreached` (the suite never called the kernel), `not-run` (out of the time budget),
`unobservable` (a survivor the run cannot see: a device fact the operator needs is missing from
the run's profile, or a random op's draws moved by less than any law test of the suite's draws
can see).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pytest import ExitCode

from conformance.measure.mutants.install import LOG_VARIABLE, MUTANTS_VARIABLE, WRAPPER
from conformance.measure.mutants.operators import FACTS_VARIABLE, OPERATORS
from conformance.measure.mutants.signature import Signature, category
from conformance.measure.mutants.values import LAW_RESOLUTION
from conformance.processes import launch
from conformance.record import CaseRecord, Status
from conformance.report.load import load_run

#: a suite run whose records say what it did: cases ran (passed or failed) or none was collected
RAN = (ExitCode.OK, ExitCode.TESTS_FAILED, ExitCode.NO_TESTS_COLLECTED)

SUITE_DIR = Path(__file__).resolve().parents[2]  # the conformance package
OP_CASES = SUITE_DIR / "test_conformance.py"  # the op family's test module
KILLS = {Status.FAILED, Status.BLOCKED, Status.XPASSED}
CRASHES = {Status.CRASHED, Status.HUNG}


@dataclass(frozen=True, order=True)
class Mutant:
    overload: str
    operator: str

    @property
    def name(self) -> str:
        return f"{self.overload}={self.operator}"

    @property
    def category(self) -> str:
        return category(self.overload)

    @property
    def group(self) -> str:
        return OPERATORS[self.operator].group

    @property
    def repro(self) -> str:
        return f"python -m conformance.measure.mutants --mutant '{self.name}'"


@dataclass
class Result:
    mutant: Mutant
    verdict: str
    case: str = ""  # the case that killed it (or failed for another reason)
    message: str = ""
    seconds: float = 0.0
    changed: str = ""  # what the mutant changed, as its log says

    def to_json(self) -> dict:
        d = asdict(self)
        d.update(d.pop("mutant"))
        d.update(name=self.mutant.name, category=self.mutant.category, group=self.mutant.group)
        return d

    @classmethod
    def from_json(cls, d: dict) -> Result:
        fields = ("verdict", "case", "message", "seconds", "changed")
        return cls(Mutant(d["overload"], d["operator"]), **{k: d[k] for k in fields if k in d})


def plan(
    registered: Iterable[str], operators: Iterable[str], sample: int | None = None, seed: int = 0
) -> list[Mutant]:
    """Every (overload, operator) whose operator applies to the overload's schema, or a seeded
    sample of `sample` of them, in a stable order."""
    mutants = []
    for overload in sorted(registered):
        try:
            sig = Signature.of(overload)
        except ValueError:
            continue  # a registration without an aten schema
        mutants += [
            Mutant(overload, name)
            for name in operators
            if name != "none" and OPERATORS[name].applies(sig)
        ]
    if sample is not None and sample < len(mutants):
        mutants = sorted(random.Random(seed).sample(mutants, sample))
    return mutants


@dataclass
class Campaign:
    """Runs mutants through the suite (each in its own pytest process, `jobs` at a time)."""

    backend: str | None
    out: Path
    jobs: int = 2
    budget: float | None = None  # seconds; mutants not started by then are `not-run`
    extra: list[str] = field(default_factory=list)  # more pytest arguments (--dtypes, ...)
    control_failing: set[str] = field(default_factory=set)
    # the device facts the control run's profile holds: an operator that needs one it lacks
    # (a write past the end needs memory the suite's heap zones see) stays its identity
    facts: set[str] = field(default_factory=set)
    # the other families' cases that fail under the identity (their control, run when a mutant
    # no op case calls first needs it)
    others_failing: set[str] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def pytest(self, overloads: list[str], results: Path, maxfail: bool) -> list[str]:
        """The suite's command line for one run (a mutant's stops at its first failure; the
        control's is spread over `jobs` xdist workers). No overloads: every family but the op
        cases (for a kernel no op case calls, as the runtime contract calls record_stream)."""
        select = ["--ops", ",".join(overloads)] if overloads else ["--ignore", str(OP_CASES)]
        argv = [
            "-m",
            "pytest",
            str(SUITE_DIR),
            "-q",
            "-p",
            "no:cacheprovider",
            *select,
            "--results",
            str(results),
            *self.extra,
        ]
        if self.backend:
            argv += ["--backend", self.backend]
        # a mutant's run: one runner (the campaign runs `jobs` of them at once already; a
        # run stopped at its first failure would throw the other runners' work away)
        return argv + (["--maxfail", "1", "--runners", "1"] if maxfail else ["-n", str(self.jobs)])

    def _run(
        self, spec: str, overloads: list[str], results: Path, maxfail: bool
    ) -> tuple[list[CaseRecord], list[dict], str, dict]:
        """(records, the mutants' log events, pytest's last line, the run's device profile)."""
        log = results / "mutants.log"
        results.mkdir(parents=True, exist_ok=True)
        env = {
            "CONFORMANCE_BACKEND_WRAPPER": WRAPPER,
            MUTANTS_VARIABLE: spec,
            LOG_VARIABLE: str(log),
            FACTS_VARIABLE: ",".join(sorted(self.facts)),
        }
        done = launch.run(
            "suite-run",
            self.pytest(overloads, results, maxfail),
            env,
            cwd=SUITE_DIR.parent,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or [""]
        run = load_run(results) if (results / "run.json").exists() else None
        records = run.cases if run is not None else []
        profile = run.meta.get("profile", {}) if run is not None else {}
        # collected nothing (`-- -k` deselected every case of the run): no records, no error
        if not records and done.returncode not in RAN:
            raise RuntimeError(f"the suite did not run ({done.returncode}): {tail[0]}")
        events = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
        return records, events, tail[0], profile if isinstance(profile, dict) else {}

    def control(self, overloads: list[str]) -> list[CaseRecord]:
        """The identity on every overload at once: the cases that fail without a mutant."""
        spec = ";".join(f"{o}=none" for o in overloads)
        records, _, _, profile = self._run(spec, overloads, self.out / "control", maxfail=False)
        self.facts = {name for name in profile if _fact(profile, name)}
        failing = [r for r in records if r.failing]
        self.control_failing = {r.id for r in failing}
        return failing

    def other_families_failing(self, overload: str) -> set[str]:
        """The cases of every family but the op cases that fail under the identity (run once)."""
        with self._lock:
            if self.others_failing is None:
                spec = f"{overload}=none"
                records = self._run(spec, [], self.out / "control-others", maxfail=False)[0]
                self.others_failing = {r.id for r in records if r.failing}
            return self.others_failing

    def judge(self, mutant: Mutant) -> Result:
        start = time.monotonic()
        folder = self.out / "runs" / mutant.name.replace("/", "_").replace(":", "_")
        try:
            records, events, tail, profile = self._run(mutant.name, [mutant.overload], folder, True)
        except Exception as exc:  # noqa: BLE001 - the campaign's own failure, recorded
            return Result(mutant, "error", message=f"campaign: {exc}")
        result = classify(mutant, records, events, self.control_failing, profile)
        if result.verdict == "unreached":  # no op case called it: the other families may
            try:
                failing = self.other_families_failing(mutant.overload)
                records, events, tail, profile = self._run(mutant.name, [], folder / "all", True)
            except Exception as exc:  # noqa: BLE001 - the campaign's own failure, recorded
                return Result(mutant, "error", message=f"campaign: {exc}")
            # their records name items, not overloads: a new failure there is this mutant's
            result = classify(mutant, records, events, failing, profile, anywhere=True)
            if result.verdict == "unreached":
                result.message = "neither an op case nor another family's item called the kernel"
        result.seconds = round(time.monotonic() - start, 2)
        if not records:
            result.message = result.message or tail
        return result

    def run(self, mutants: list[Mutant], progress: Callable[[Result], None]) -> list[Result]:
        """Judge every mutant, `jobs` at a time, until the budget is spent."""
        start, results = time.monotonic(), []
        with ThreadPoolExecutor(self.jobs) as pool:
            futures = {}
            pending = iter(mutants)

            def submit() -> bool:
                if self.budget is not None and time.monotonic() - start > self.budget:
                    return False
                mutant = next(pending, None)
                if mutant is None:
                    return False
                futures[pool.submit(self.judge, mutant)] = mutant
                return True

            for _ in range(self.jobs):
                submit()
            while futures:
                done = next(as_completed(futures))
                futures.pop(done)
                results.append(done.result())
                progress(results[-1])
                submit()
        judged = {r.mutant for r in results}
        results += [
            Result(m, "not-run", message="time budget spent") for m in mutants if m not in judged
        ]
        return sorted(results, key=lambda r: r.mutant)


def classify(
    mutant: Mutant,
    records: list[CaseRecord],
    events: list[dict],
    control_failing: set[str],
    profile: dict | None = None,
    anywhere: bool = False,
) -> Result:
    """The mutant's verdict from its run's records, its log and the run's device profile
    (run.json `profile`: a fact the operator needs that the run lacks makes a survivor
    `unobservable`, as the run header says). `anywhere`: a run of the other families, whose
    new failures are all the mutant's (their records name items, not overloads)."""
    new = [
        r
        for r in records
        if r.failing and r.id not in control_failing and r.status is not Status.NOT_RUN
    ]
    own = new if anywhere else [r for r in new if r.op_name == mutant.overload]
    changed = next((e.get("what", "") for e in events if e["event"] == "changed"), "")
    for verdict, chosen in (
        ("killed", [r for r in own if r.status in KILLS]),
        ("crashed", [r for r in own if r.status in CRASHES]),
        ("error", own),
        ("killed-elsewhere", new),
    ):
        if chosen:
            first = chosen[0]
            message = (first.message or "").splitlines()[0] if first.message else ""
            check = f"[{first.check}] " if first.check else ""
            return Result(mutant, verdict, first.id, check + message, changed=changed)
    if not any(e["event"] == "called" for e in events):
        return Result(mutant, "unreached", message="the suite never called the kernel")
    lacking = [f for f in OPERATORS[mutant.operator].needs if not _fact(profile or {}, f)]
    if lacking:  # a survivor no check of this device sees, or an operator held back
        what = f"{changed}; every case passed: " if changed else ""
        return Result(
            mutant,
            "unobservable",
            message=f"{what}the device profile has no {', '.join(lacking)}, which it needs to "
            "be seen or armed (the run header names the check it leaves out)",
            changed=changed,
        )
    within_law = next((e.get("what", "") for e in events if e["event"] == "within-law"), "")
    if not changed and within_law:
        return Result(
            mutant,
            "unobservable",
            message=f"{within_law}; every call it changed stayed below what a law test of the "
            f"suite's draws sees at its false-alarm rate (D sqrt(n) > {LAW_RESOLUTION:.2f})",
            changed=within_law,
        )
    if not changed:
        return Result(
            mutant,
            "equivalent",
            message="called; every result equal to the original's, bit for bit",
        )
    return Result(mutant, "survived", message=f"{changed}; every case passed", changed=changed)


def _fact(profile: dict, name: str) -> object:
    """A fact's value in run.json's profile ({name: {"value": ...}})."""
    fact = profile.get(name)
    return fact.get("value") if isinstance(fact, dict) else fact


def load_results(folders: list[Path]) -> list[Result]:
    """The results of campaigns' folders (their mutants.jsonl), a later folder's verdict on a
    mutant replacing an earlier one's (a re-run of the survivors after a fix)."""
    found: dict[Mutant, Result] = {}
    for folder in folders:
        for line in (folder / "mutants.jsonl").read_text().splitlines():
            if line.strip():
                result = Result.from_json(json.loads(line))
                found[result.mutant] = result
    return sorted(found.values(), key=lambda r: r.mutant)


VERDICTS = (
    "killed",
    "killed-elsewhere",
    "crashed",
    "error",
    "survived",
    "unobservable",
    "equivalent",
    "unreached",
    "not-run",
)

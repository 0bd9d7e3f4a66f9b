"""A pytest plugin for bench/bench_scale.py: where one pytest process's start-up goes, and its
peak memory. Loaded with `-p startup_probe` (bench/ on PYTHONPATH); writes JSON to the path in
`BENCH_STARTUP_OUT` at the end of the process. Stages (seconds):

- import: from `BENCH_T0` (the bench's clock just before it started the process) until the
  backend module is loaded: interpreter, pytest, torch, the suite, the backend's import
- isolation: `plan_isolation` (the device probe in a child process), before the Suite
- discovery: `Suite.__init__` but the coverage account (the dispatcher's registrations,
  selections, manifests, workload lists)
- coverage: `coverage_account` (every selected overload x dtype asked for samples)
- collection: from then until pytest's collection is finished (`cases`: the case list alone)
- run: from the end of collection to the end of the session (cases executed)
- startup_cpu: CPU seconds of this process until collection ended (steadier than wall seconds
  on a machine others load)

Peak memory is `ru_maxrss` of this process, and of its largest reaped child (runners, probes).
"""

from __future__ import annotations

import functools
import json
import os
import resource
import time
from typing import Any

import pytest

from conformance.harness import session, suite
from conformance.harness.cases import CaseList
from conformance.harness.runners import RUNNER_ENV


class StartupProbe:
    """Wraps the suite's start-up steps with timers (state on this object)."""

    def __init__(self) -> None:
        self.t0 = float(os.environ.get("BENCH_T0", time.time()))
        self.marks: dict[str, float] = {}
        self.spent: dict[str, float] = {}
        self.collected = 0
        self.suite: Any = None
        self.startup_cpu = 0.0  # CPU seconds of this process until collection ended
        self.pid = os.getpid()
        self._wrap(session, "load_backend", "backend")
        self._wrap(session, "plan_isolation", "isolation")
        self._wrap(suite.Suite, "__init__", "suite", keep=True)
        self._wrap(suite, "coverage_account", "coverage")
        self._wrap(CaseList, "cases", "cases")

    def _wrap(self, owner: Any, name: str, stage: str, keep: bool = False) -> None:
        fn = getattr(owner, name)

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if keep:
                self.suite = args[0]  # the Suite being built
            start = time.time()
            try:
                return fn(*args, **kwargs)
            finally:
                end = time.time()
                self.spent[stage] = self.spent.get(stage, 0.0) + end - start
                self.marks.setdefault(f"{stage}_start", start)
                self.marks[f"{stage}_end"] = end

        setattr(owner, name, timed)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.marks["collected"] = time.time()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.startup_cpu = usage.ru_utime + usage.ru_stime
        self.collected = len(session.items)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.marks["finished"] = time.time()

    def stages(self) -> dict[str, float]:
        m, s = self.marks, self.spent
        if "backend_end" not in m or "collected" not in m:
            return {}
        imported = m["backend_end"] - self.t0
        out = {
            "import": imported,
            "discovery": s["suite"] - s.get("coverage", 0.0),
            "coverage": s.get("coverage", 0.0),
            "isolation": s.get("isolation", 0.0),
            "collection": m["collected"] - m["suite_end"],
            "cases": s.get("cases", 0.0),
        }
        out["startup"] = m["collected"] - self.t0
        out["startup_cpu"] = self.startup_cpu
        if "finished" in m:
            out["run"] = m["finished"] - m["collected"]
        return out

    def overloads(self) -> int:
        """Overloads with cases: registered with samples, fallback-only, -grad only."""
        if self.suite is None:
            return 0
        cases = self.suite.case_list
        untested = len(cases.coverage.untested) if cases.coverage is not None else 0
        return len(cases.overloads) - untested + len(cases.fallback_only) + len(cases.grad_only)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        path = os.environ.get("BENCH_STARTUP_OUT")
        if not path or os.getpid() != self.pid or RUNNER_ENV in os.environ:
            return  # a forked or spawned runner: only the pytest process writes
        kib = 1024  # ru_maxrss is in KiB on Linux
        data = {
            "stages": self.stages(),
            "collected": self.collected,
            "overloads": self.overloads(),
            "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / kib,
            "children_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / kib,
        }
        with open(path, "w") as f:
            json.dump(data, f)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(StartupProbe(), "bench-startup-probe")

"""Where a run's CPU goes, by kind of process, and a run of an older commit beside this one.

Used by bench_conformance.py (issue 85): the default run's CPU seconds split between the pytest
process (the xdist controller, or a plain pytest process, which owns the runners), the xdist
workers, the runner zygotes, the runners (where the cases run), the task zygotes and their
children; and the same default run of an older commit of
the suite (a git worktree, the same backend and torch), its CPU milliseconds a case against this
one's, with their verdicts compared case by case.

Linux only: the split polls /proc (every 50 ms) for the run's process tree; a process that ends
between two polls loses its last few milliseconds (printed as "not attributed").
"""

from __future__ import annotations

import collections
import json
import os
import re
import resource
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field

from conformance.record import CaseId

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
XDIST_WORKER = "import sys;exec(eval(sys.stdin.readline()))"  # execnet's bootstrap

#: the process pytest was started as: the xdist controller, or the plain pytest process
ROOT = "pytest process (controller or owner)"


@dataclass
class Proc:
    parent: int
    cmdline: str
    cpu: float = 0.0


@dataclass
class ProcessTree:
    """The CPU seconds of every process under `root`, polled until `stop()`."""

    root: int
    procs: dict[int, Proc] = field(default_factory=dict)
    _done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> ProcessTree:
        threading.Thread(target=self._poll, daemon=True).start()
        return self

    def stop(self) -> None:
        self._done.set()

    def _poll(self) -> None:
        while not self._done.is_set():
            table = _proc_table()
            ours = {self.root}
            grew = True
            while grew:
                grew = False
                for pid, (parent, _) in table.items():
                    if parent in ours and pid not in ours:
                        ours.add(pid)
                        grew = True
            for pid in ours & table.keys():
                if pid not in self.procs:
                    self.procs[pid] = Proc(table[pid][0], _cmdline(pid))
                self.procs[pid].cpu = table[pid][1]
            time.sleep(0.05)

    def kind(self, pid: int) -> str:
        """The kind of a process of the run, from its command line and its parent's kind."""
        proc = self.procs[pid]
        if pid == self.root:
            return ROOT
        parent = self.kind(proc.parent) if proc.parent in self.procs else ""
        if XDIST_WORKER in proc.cmdline:
            return "xdist workers"
        if "conformance.processes.zygote" in proc.cmdline:
            return "task zygotes"
        if parent == "task zygotes" or parent.startswith("task children"):
            return "task children"
        if parent == "xdist workers" and "pytest" in proc.cmdline:
            return "runner zygotes"
        if parent == ROOT and self._forks_pytest(pid):
            return "runner zygotes"  # without xdist: forked from the pytest process itself
        if parent in ("runner zygotes", ROOT):
            return "runners (the cases)" if "pytest" in proc.cmdline else "other"
        if parent == "runners (the cases)":
            return "runners' own children"
        return "other"

    def _forks_pytest(self, pid: int) -> bool:
        """Whether `pid` has a child with a pytest command line: a runner zygote (its forked
        runners keep it); a runner's own children are other programs (probes, ranks)."""
        if "pytest" not in self.procs[pid].cmdline:
            return False
        return any(p.parent == pid and "pytest" in p.cmdline for p in self.procs.values())

    def by_kind(self) -> dict[str, tuple[int, float]]:
        """kind -> (processes, CPU seconds)."""
        out: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
        for pid, proc in self.procs.items():
            row = out[self.kind(pid)]
            row[0] += 1
            row[1] += proc.cpu
        return {k: (int(n), cpu) for k, (n, cpu) in out.items()}


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds so far), for every process /proc shows."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        table[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS)
    return table


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclass
class MeasuredRun:
    """One timed run: wall and CPU seconds (all its processes), its cases and its split."""

    wall: float
    cpu: float
    cases: int
    summary: str
    split: dict[str, tuple[int, float]]
    statuses: dict[str, str]  # record id -> status
    case_time: dict[str, tuple[int, float]] = field(default_factory=dict)  # part -> (n, s)
    # lines of its terminal output that are a warning (torch's, Python's: `WARNING_LINE`)
    warning_lines: list[str] = field(default_factory=list)

    @property
    def ms_a_case(self) -> float:
        return 1000 * self.cpu / max(self.cases, 1)


def measured_run(cmd: list[str], cwd: str, env: dict[str, str]) -> MeasuredRun:
    """Run `cmd` (a pytest command line without --results) with results in a temporary
    folder; its CPU split by kind of process and the status of every record."""
    results = tempfile.mkdtemp(prefix="bench-results-")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(
        [*cmd, "--results", results], cwd=cwd, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    tree = ProcessTree(proc.pid).start()
    out, _ = proc.communicate()
    wall = time.perf_counter() - start
    tree.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    statuses: dict[str, str] = {}
    case_time: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for name in sorted(os.listdir(results)):
        if name.startswith("cases-") and name.endswith(".jsonl"):
            with open(os.path.join(results, name)) as f:
                for line in f:
                    if line.strip():
                        record = json.loads(line)
                        statuses[record["id"]] = record["status"]
                        part = case_time[part_of(record)]
                        part[0] += 1
                        part[1] += record.get("duration") or 0.0
    shutil.rmtree(results, ignore_errors=True)
    lines = out.strip().splitlines()
    parts = {k: (int(n), t) for k, (n, t) in case_time.items()}
    warned = [line for line in lines if WARNING_LINE.search(line)]
    return MeasuredRun(wall, cpu, len(statuses), lines[-1] if lines else "", tree.by_kind(),
                       statuses, parts, warned)  # fmt: skip


#: a warning line printed to the terminal: Python's (`file.py:12: UserWarning: ...`, `<string>:4:
#: UserWarning: ...`, pytest's warnings summary), a C++ TORCH_WARN on stderr (`[W1204
#: 05:07:22.123 ... Resize.cpp:30] Warning: ...`, `[W Resize.cpp:35] Warning: ...`,
#: `Resize.cpp:30 Warning: ...`) or torch._logging's (`W1204 05:07:22.123000 1234
#: torch/_dynamo/convert_frame.py:824] ...`, Dynamo's and Inductor's)
WARNING_LINE = re.compile(
    r"^\[W[\d ]|:\d+\]?:? \w*Warning: |W\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\]"
)


def part_of(record: dict) -> str:
    """A record's family, and for an op case its mode or value set (`-grad`, `-special`, ...;
    "ordinary" without one)."""
    family = record.get("family") or "ops"
    if family != "ops":
        return family
    try:
        values = CaseId.parse(record["id"].partition("[")[2].rstrip("]")).values
    except ValueError:
        values = ""
    return f"ops -{values}" if values else "ops (ordinary)"


def print_split(name: str, run: MeasuredRun) -> None:
    print(f"  where {name}'s {run.cpu:.0f} s of CPU go (by kind of process):")
    attributed = 0.0
    for kind, (n, cpu) in sorted(run.split.items(), key=lambda kv: -kv[1][1]):
        attributed += cpu
        print(f"    {kind:36s} {n:4d} process(es) {cpu:7.1f} s  {100 * cpu / run.cpu:5.1f} %")
    print(f"    {'not attributed (ended between polls)':36s} {'':17s}"
          f"{max(run.cpu - attributed, 0.0):7.1f} s")  # fmt: skip


def print_case_time(name: str, run: MeasuredRun, lanes: int = 2) -> None:
    """The records' own durations by family and mode: what the cases cost, and what the run
    costs beyond them (its wall time against the cases' time spread over `lanes`: the runners
    that run at once, one per xdist worker or `--runners` of a plain pytest process)."""
    total = sum(t for _, t in run.case_time.values())
    outside = outside_cases(run, lanes)
    print(f"  {name}: {total:.0f} s of case time in the records ({run.wall:.0f} s wall on "
          f"{lanes} lanes: {outside:.0f} s of it outside the cases):")  # fmt: skip
    for part, (n, t) in sorted(run.case_time.items(), key=lambda kv: -kv[1][1]):
        print(f"    {part:36s} {n:6d} cases {t:7.1f} s  {1000 * t / max(n, 1):6.1f} ms a case")


def outside_cases(run: MeasuredRun, lanes: int) -> float:
    """The run's wall seconds beyond its cases' own (their durations spread over `lanes`)."""
    return max(run.wall - sum(t for _, t in run.case_time.values()) / lanes, 0.0)


def worktree(repo: str, rev: str) -> str:
    """A git worktree of `rev` in a temporary folder (removed by `drop_worktree`)."""
    path = tempfile.mkdtemp(prefix=f"bench-{rev[:12]}-")
    subprocess.run(
        ["git", "worktree", "add", "--detach", "-f", path, rev],
        cwd=repo, check=True, capture_output=True,
    )  # fmt: skip
    return path


def worktree_env(env: dict[str, str], path: str) -> dict[str, str]:
    """`env` for a run of the suite in the worktree `path`: its own checkout imported first."""
    paths = [path, env.get("PYTHONPATH", "")]
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def drop_worktree(repo: str, path: str) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", path], cwd=repo, capture_output=True)
    shutil.rmtree(path, ignore_errors=True)


def compare_verdicts(old: MeasuredRun, new: MeasuredRun, limit: int = 10) -> str:
    """One line (and up to `limit` examples): the cases both runs recorded, how many changed
    status, how many only one of them has."""
    both = old.statuses.keys() & new.statuses.keys()
    changed = sorted(i for i in both if old.statuses[i] != new.statuses[i])
    text = (
        f"verdicts: {len(both)} cases in both runs, {len(changed)} changed status; "
        f"{len(new.statuses.keys() - both)} only in this commit's run, "
        f"{len(old.statuses.keys() - both)} only in the older one's"
    )
    for case in changed[:limit]:
        text += f"\n    {case}: {old.statuses[case]} -> {new.statuses[case]}"
    return text

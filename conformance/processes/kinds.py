"""The one table of the kinds of process a run of the suite has: who starts each, by fork or
spawn, whether it may fork, touch the device, run cases or write results, and its channel to
its parent. A newcomer debugging a hang on a real device reads this first; the run header's
isolation line and docs/ARCHITECTURE.md's process tree are drawn from it (`picture.py`), the
launcher (`launch.py`) starts a child only as a kind of this table, and the harness's roles
(harness/roles.py) are its rows.

`device`: "yes" (the process opens the device: it runs cases or probes), "no" (it never touches
it, so it may fork a clean child), "hidden" (accelerators are hidden from it: CUDA_VISIBLE_DEVICES
empty, torch's backend autoload off: processes/zygote.py `HIDDEN_ACCELERATORS`), "isolate none"
(only where `--isolate none` runs cases in the scheduling process).
`forks`: "never" (it has threads or a device: its CPU tasks go to a task zygote), "its job" (a
zygote), "while clean" (only while it has one thread and has not touched the device:
forking.py's rule, checked at each fork). `channel`: the messages (processes/messages.py) each
way between it and its parent.
"""

from __future__ import annotations

from dataclasses import dataclass

FORK, SPAWN, USER = "fork", "spawn", "user"
#: the channels two kinds share
ZYGOTE_LINK = (
    "SEQPACKET link: task, runner, adopt, task-link, imported in; forked, refused, link out; "
    "ended on each child's status pipe"
)
RUNNER_PIPE = "run, heap-exercise, op-trace in; start, report, finish, missing out (pipes)"


@dataclass(frozen=True)
class Kind:
    """One kind of process."""

    name: str
    parents: tuple[str, ...]  # the kinds that start it (none: the user starts it)
    start: str  # FORK, SPAWN, "fork or spawn", USER
    forks: str  # "never", "its job", "while clean"
    device: str  # "yes", "no", "hidden", "isolate none"
    runs_cases: bool
    writes_results: bool
    channel: str  # how it talks to its parent
    entry: str  # the module that starts it, or its command
    why: str  # one line: what it is for

    @property
    def may_fork(self) -> bool:
        return self.forks != "never"


KINDS: tuple[Kind, ...] = (
    Kind(
        "pytest",
        (),
        USER,
        "while clean",
        "isolate none",
        runs_cases=False,
        writes_results=True,
        channel="its exit status; results/ (cases-main.jsonl, run.json)",
        entry="python -m pytest conformance",
        why="collects the cases, schedules them on runners, writes every record",
    ),
    Kind(
        "xdist-controller",
        (),
        USER,
        "while clean",
        "no",
        runs_cases=False,
        writes_results=True,
        channel="its exit status; run.json, the records of workers that crashed or hung",
        entry="python -m pytest conformance -n N",
        why="pytest-xdist's scheduler: runs no case",
    ),
    Kind(
        "xdist-worker",
        ("xdist-controller",),
        SPAWN,
        "never",
        "isolate none",
        runs_cases=False,
        writes_results=True,
        channel="execnet (pytest-xdist's events); cases-<gwN>.jsonl",
        entry="pytest-xdist (execnet popen)",
        why="schedules its share of the cases on its own runners (execnet's receiver is a thread)",
    ),
    Kind(
        "capability-probe",
        ("pytest", "xdist-controller", "tool", "capability-probe"),
        "fork or spawn",
        "while clean",
        "yes",
        runs_cases=False,
        writes_results=False,
        channel="probe, runtime, at, held: on a pipe (forked) or stdout (spawned)",
        entry="conformance/engine/probe.py (python -m conformance.engine.probe)",
        why="is the device usable, may a forked child use it, may two processes open it",
    ),
    Kind(
        "probe-second-open",
        ("capability-probe",),
        "fork or spawn",
        "never",
        "yes",
        runs_cases=False,
        writes_results=False,
        channel="opened: on a pipe or stdout",
        entry="conformance/engine/probe.py",
        why="opens the device while the probe holds it (is it one process's at a time?)",
    ),
    Kind(
        "runner-zygote",
        ("pytest", "xdist-worker"),
        "fork or spawn",
        "its job",
        "no",
        runs_cases=False,
        writes_results=False,
        channel=ZYGOTE_LINK,
        entry="conformance/harness/zygotes.py",
        why=(
            "is forked from the scheduling process while that is clean (plain pytest, before "
            "its first case), else spawned as a fresh python -m pytest that collects the same "
            "cases (an xdist worker); it forks the runners"
        ),
    ),
    Kind(
        "runner",
        ("runner-zygote",),
        FORK,
        "never",
        "yes",
        runs_cases=True,
        writes_results=False,
        channel=RUNNER_PIPE,
        entry="conformance/harness/serving.py",
        why="runs cases for its owner, reused until a crash, a hang or --runner-cases cases",
    ),
    Kind(
        "spawned-runner",
        ("pytest", "xdist-worker"),
        SPAWN,
        "never",
        "yes",
        runs_cases=True,
        writes_results=False,
        channel=RUNNER_PIPE,
        entry="python -m pytest (CONFORMANCE_RUNNER)",
        why="spawned where no clean fork is possible (the device initialised, or refusing forks)",
    ),
    Kind(
        "task-zygote",
        ("runner-zygote", "spawned-runner", "xdist-worker", "pytest"),
        SPAWN,
        "its job",
        "hidden",
        runs_cases=False,
        writes_results=False,
        channel=ZYGOTE_LINK,
        entry="python -m conformance.processes.zygote",
        why="forks CPU tasks for processes that may not fork (runners, xdist workers)",
    ),
    Kind(
        "task",
        ("task-zygote", "pytest", "tool"),
        FORK,
        "while clean",
        "hidden",
        runs_cases=False,
        writes_results=False,
        channel="started, done (or progress, result): on a pipe; saved results in a file",
        entry="processes/forking.py run_task",
        why="CPU work: capturing samples, measuring tolerances and CPU's exactness",
    ),
    Kind(
        "foundation-probe",
        ("runner", "spawned-runner"),
        SPAWN,
        "never",
        "yes",
        runs_cases=False,
        writes_results=False,
        channel="start, done, end: on stdout",
        entry="python -m conformance.engine.probing",
        why="blame's foundation probes of one dtype, where a crash costs no case",
    ),
    Kind(
        "divergence-search",
        ("runner", "spawned-runner"),
        SPAWN,
        "never",
        "yes",
        runs_cases=False,
        writes_results=False,
        channel="search on stdin; diverged on stdout",
        entry="python -m conformance.engine.modules --serve",
        why="the first op where a failing module's run diverged",
    ),
    Kind(
        "collectives-rank",
        ("runner", "spawned-runner"),
        SPAWN,
        "never",
        "yes",
        runs_cases=False,
        writes_results=False,
        channel="pickled messages on a socket (multiprocessing.connection)",
        entry="python -m conformance.engine.collectives.ranks",
        why="one rank of a world of the collectives family",
    ),
    Kind(
        "standalone-script",
        ("tool",),
        SPAWN,
        "never",
        "yes",
        runs_cases=False,
        writes_results=False,
        channel="its exit status and output",
        entry="conformance/bugs/report.py (python -I repro.py)",
        why="a bug report's script run without the suite: does it show the bug alone?",
    ),
    Kind(
        "tool",
        ("tool",),
        "user or spawn",
        "while clean",
        "no",
        runs_cases=False,
        writes_results=False,
        channel="its exit status and output",
        entry="python -m conformance.<tool> (mutants, bisect, bugs, report, profile, ci, ...)",
        why="a command-line tool of the suite: drives runs, reads results, probes, measures",
    ),
    Kind(
        "suite-run",
        ("tool",),
        SPAWN,
        "while clean",
        "isolate none",
        runs_cases=False,
        writes_results=True,
        channel="its exit status; its results folder",
        entry="python -m pytest, started by a tool (mutants, bisect, CI steps, report)",
        why="a whole run of the suite driven by one of its command-line tools",
    ),
)

BY_NAME = {k.name: k for k in KINDS}


def kind(name: str) -> Kind:
    """The row named `name` (KeyError: not a kind of this table)."""
    return BY_NAME[name]


def children(name: str) -> list[Kind]:
    """The kinds `name` starts, in table order."""
    return [k for k in KINDS if name in k.parents]


def misfit(parent: str, how: str, child: str) -> str | None:
    """Why a start the launcher saw (`parent` started `child` by `how`) is not one the table
    declares, or None: the child's row names the parent, and a parent that forks may fork."""
    row, starter = BY_NAME.get(child), BY_NAME.get(parent)
    if row is None or starter is None:
        return f"{parent} -> {child}: not a kind of processes/kinds.py"
    if parent not in row.parents:
        return f"{parent} started a {child}, whose row names only {', '.join(row.parents)}"
    if how == FORK and not starter.may_fork:
        return f"{parent} forked a {child}, but its row says it never forks"
    return None

"""The one place the suite starts a process: each start names its kind (kinds.py), and the
launcher holds it to its row. A spawn of a kind whose row says fork (or the other way round) is
refused, and so is a fork by a kind that may not fork (forking.py then also refuses a process
with threads). A Python child of the suite gets this interpreter and the environment pinned at
the suite's start (interpreter.py), with `KIND_ENV` naming its kind; `tool` starts what is not
the suite's Python (a compiler, another venv's interpreter, git).
tests/processes/test_process_starts.py fails on a process started anywhere else.
"""

from __future__ import annotations

import gc
import os
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from conformance.processes import forking, interpreter
from conformance.processes.kinds import FORK, SPAWN, kind
from conformance.processes.this import KIND_ENV, THIS


class LaunchRefused(RuntimeError):
    """A start its kind's row does not allow."""


def _started_by(name: str, how: str) -> None:
    row = kind(name)
    if how not in row.start:
        raise LaunchRefused(f"a {name} is started by {row.start}, not {how} (processes/kinds.py)")
    audit = os.environ.get(forking.AUDIT_ENV)
    if audit:  # the self-tests hold each start to the rows: "launch PARENT HOW CHILD"
        with open(audit, "a") as f:
            f.write(f"launch {THIS.name} {how} {name}\n")


def _environment(name: str, env: Mapping[str, str] | None) -> dict[str, str]:
    return interpreter.environment({**(env or {}), KIND_ENV: name})


def spawn(name: str, args: Sequence[str], env: Mapping[str, str] | None = None, **popen: Any):
    """`python ARGS` (this interpreter) as a child of kind `name`: a subprocess.Popen."""
    _started_by(name, SPAWN)
    return subprocess.Popen([*interpreter.python(), *args], env=_environment(name, env), **popen)


def run(
    name: str, args: Sequence[str], env: Mapping[str, str] | None = None, **options: Any
) -> subprocess.CompletedProcess:
    """`python ARGS` as a child of kind `name`, to its end: subprocess.run (its `timeout`,
    `capture_output`, ...)."""
    _started_by(name, SPAWN)
    return subprocess.run([*interpreter.python(), *args], env=_environment(name, env), **options)


def fork(name: str, site: str = "") -> int:
    """`os.fork()` for a child of kind `name` (forking.fork: refused with threads; the fork
    audit names `site`, else the kind). The child's `KIND_ENV` names its kind, as a spawned
    child's does (its own children inherit the variable, and the launcher sets theirs).

    The child freezes the heap it inherited (`gc.freeze`): torch, the collected cases and what
    its parent imported since (a zygote's pre-imports, torch._dynamo's hundreds of thousands of
    objects) are alive for its whole life, and every full collection walked them again (a
    tenth of a second each, a runner's largest single cost after its cases); frozen, the child's
    collections see only what it made itself, and copy-on-write keeps the parent's pages."""
    _started_by(name, FORK)
    pid = forking.fork(site or name)
    if pid == 0:
        gc.freeze()
        THIS.became(name)
    return pid


def tool(argv: Sequence[str], **options: Any) -> subprocess.CompletedProcess:
    """A program that is not a child of the suite's interpreter (a compiler, another venv's
    Python, git), to its end: subprocess.run."""
    return subprocess.run(list(argv), **options)


def tool_process(argv: Sequence[str], **popen: Any) -> subprocess.Popen:
    """As `tool`, not waited for: subprocess.Popen."""
    return subprocess.Popen(list(argv), **popen)


def become(argv: Sequence[str], env: Mapping[str, str]) -> None:
    """Replace this process with `argv` (os.execvpe: a tool that must set the environment
    before the process starts, as a preloaded memory checker). Never returns."""
    os.execvpe(argv[0], list(argv), dict(env))

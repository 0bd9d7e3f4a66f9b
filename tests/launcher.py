"""A warm launcher for the self-tests' `python -m pytest` runs: a process that has imported torch
(and torch._dynamo, which PyTorch's Python meta kernels import on their first call) forks a
child for each run, which then runs pytest's `__main__` as `python -m pytest ARGS` does.

Importing torch and torch._dynamo takes about 2.3 s of CPU; the self-tests start a few hundred
such runs (issue 61: the self-tests back to 15 minutes). A run is served here only where a fresh
interpreter would be the same process: its environment equals the launcher's but for the suite's
and echo_npu's own variables (`RUNTIME_PREFIXES`: read when a run loads the backend or reads its
options, never by the modules imported here), and its folder is the repository; any other run
is a plain subprocess (tests/helpers.py). The launcher imports neither pytest's plugins nor the
suite, so pytest loads and rewrites them in each run as it does in a fresh interpreter, and it
has one thread when it forks.

Protocol (one JSON line each way per message, on the launcher's stdin and stdout): a request
{"args", "env", "stdout", "stderr"}, then {"pid"} once the child exists and {"status"} (as
os.waitpid gives it) once it ended. `python -m tests.launcher` serves requests until EOF.
"""

from __future__ import annotations

import gc
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any, NoReturn

#: variables a run may set or change and still be served warm: nothing imported here reads them
#: (PYTEST_CURRENT_TEST: the test process's current test, which pytest sets as it runs each)
RUNTIME_PREFIXES = ("CONFORMANCE_", "ECHO_NPU_", "PYTEST_CURRENT_TEST")
#: what the launcher imports before it forks (what every run of the suite imports first)
PRELOAD = ("torch", "torch._dynamo")
REPO = Path(__file__).resolve().parents[1]


def same_process(env: dict[str, str], base: dict[str, str]) -> bool:
    """Whether a run with environment `env` may be forked from a launcher started with `base`."""
    keys = set(env) | set(base)
    return all(env.get(k) == base.get(k) for k in keys if not k.startswith(RUNTIME_PREFIXES))


class Launcher:
    """The test process's side: the launcher's process, started once, asked one run at a time."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = dict(env)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.launcher"],
            cwd=REPO,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._pending = b""
        self._expect("ready", 120)

    def alive(self) -> bool:
        return self.process.poll() is None

    def run(
        self, args: list[str], env: dict[str, str], out: Path, err: Path, timeout: float
    ) -> int:
        """Run `python -m pytest ARGS` forked; its exit code (raises TimeoutError past
        `timeout` seconds, once the run was killed; OSError if the launcher ended)."""
        request = {"args": args, "env": env, "stdout": str(out), "stderr": str(err)}
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        self.process.stdin.flush()
        pid = self._expect("pid", 60)
        try:
            status = self._expect("status", timeout)
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            self._expect("status", 60)
            raise
        return os.waitstatus_to_exitcode(status)

    def _expect(self, key: str, timeout: float) -> Any:
        """The next message's `key` (its lines are read unbuffered: a line read ahead would
        hide from select)."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(fd, 65536)
            if not chunk:
                raise OSError("the launcher ended")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)[key]

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _child(request: dict[str, Any]) -> NoReturn:
    """In the forked child: become `python -m pytest ARGS` with the request's environment and
    output files. It never returns: pytest's `__main__` ends with SystemExit, which unwinds to
    the interpreter's own exit (streams flushed, atexit handlers run, threads joined), the exit
    status as `python -m pytest` gives it; any other exception, as there, with its traceback."""
    os.environ.clear()
    os.environ.update(request["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    # pytest/__main__.py run as __main__, with its path as argv[0]: what `python -m pytest`
    # runs, whatever that pytest's entry point is (pytest 9.1 deprecates console_main())
    sys.argv = ["-m", *request["args"]]
    runpy.run_module("pytest", run_name="__main__", alter_sys=True)
    raise SystemExit(0)  # not reached: pytest's __main__ raises SystemExit


def _send(out: IO[str], message: dict[str, Any]) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def serve() -> None:
    import importlib

    # as conformance/__init__.py does before any import of torch in a run of the suite: numpy's
    # OpenBLAS starts no thread server, so the launcher has one thread when it forks
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    for name in PRELOAD:
        importlib.import_module(name)
    # what was imported here is never garbage: out of every collection of the runs (pytest
    # collects five times as it ends; over torch._dynamo's objects that took 1 s a run)
    gc.freeze()
    out = os.fdopen(os.dup(1), "w")
    _send(out, {"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            out.close()
            _child(request)
        _send(out, {"pid": pid})
        _, status = os.waitpid(pid, 0)
        _send(out, {"status": status})


if __name__ == "__main__":
    serve()

"""Is the device usable here, which standard API counts its memory, may a forked child use it,
may two processes open it at once? Asked once per run, never in the asking process.

The asking process (pytest, an xdist worker, the capability query) forks case runners' zygotes
and must stay clean: it never touches the device or its driver (for CUDA,
`PYTORCH_NVML_BASED_CUDA_CHECK=1` keeps `device_count()` and `is_available()` from
initialising the driver). The probe runs in a process of its own (processes/kinds.py
`capability-probe`): forked from the asking process while that has one thread and an untouched
device (as clean as a fresh interpreter, and seconds cheaper), else a fresh interpreter
(`python -m conformance.engine.probe`, `QUIET`: one thread). It answers three questions in order:
1. a child forked from it, device untouched, probes the device (as a runner forked from the
   zygote will use it): usable, memory counter, storage, heap zones, device count, runtime;
2. while that child holds the device, a second child opens it: if that fails the device is
   one process's at a time (`exclusive`);
3. if the forked child could not use the device (or the fresh process had threads, so it may
   not fork), the fresh process probes in itself and a second fresh process opens the device.
Every answer has a deadline (`PROBE_TIMEOUT` in all, under 30 s), and every probe process ends
with `os._exit`, so a device whose teardown blocks costs nothing. A probe process answers in
messages (processes/messages.py: `probe`, `runtime`, `at` a stage, `held`, `opened`). What each
probe asks of the device, in the process it runs in: `device_probe.py`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import asdict
from typing import Any

import torch

from conformance.engine.backend import PROBE_ENVIRONMENT, Backend, load_backend
from conformance.engine.device_probe import Probe, error_line, probe_here, probe_runtime
from conformance.engine.diagnosis import describe_status
from conformance.processes import forking, interpreter, launch, messages
from conformance.processes.messages import MessageReader, encode

PROBE_TIMEOUT = 28.0  # the whole probe, interpreter start included
CHILD_TIMEOUT = 16.0  # the forked child's probe (a slow driver initialises within it)
OPEN_TIMEOUT = 6.0  # a second process opening the device
RELEASE_TIMEOUT = 3.0  # the forked child's exit once released


def initialised(backend: Backend) -> bool:
    """Whether the device is initialised in this process (its module's `is_initialized()`):
    then a forked child could not use it. A failing query is no evidence of initialisation."""
    fn = backend.device_function("is_initialized")
    try:
        return bool(fn()) if callable(fn) else False
    except Exception:  # noqa: BLE001
        return False


def probe_isolated(backend: Backend) -> Probe:
    """The probe (see the module docstring), in a process of its own: forked from this one
    where it may fork (one thread, the device untouched: as clean as a fresh interpreter, and
    seconds cheaper), else a fresh interpreter."""
    if forking.refusal() is not None or initialised(backend):
        return probe_in_fresh_process(backend)
    read_fd, write_fd = os.pipe()
    pid = launch.fork("capability-probe", "probe-process")
    if pid == 0:  # the probe process: never returns
        code = 0
        try:
            os.close(read_fd)
            messages.send(write_fd, *_answer(*probe_fresh(backend)))
        except BaseException:  # noqa: BLE001 - never run the parent's code in the child
            code = 3
        os._exit(code)
    os.close(write_fd)
    said = _Answers.listen(read_fd, PROBE_TIMEOUT)
    os.close(read_fd)
    child = forking.Child(pid)
    if not said.in_time:
        child.kill()
    child.wait()
    where = "process forked from this one before it touched the device"
    if not said.in_time:
        return Probe(False, where, f"no answer within {PROBE_TIMEOUT:.0f} s")
    if said.probe is None:
        return Probe(False, where, f"the probe process died ({describe_status(child.status)})")
    return said.result("the probe process died")


def probe_in_fresh_process(backend: Backend) -> Probe:
    """The probe (see the module docstring) in a new interpreter that loads the same backend;
    this process touches neither the device nor its driver."""
    args = [backend.spec, backend.device_type, backend.heap_zones, backend.heap_cache or ""]
    where = f"fresh process ({interpreter.describe()})"
    proc = _probe_process("capability-probe", args, PROBE_TIMEOUT)
    if proc is None:
        return Probe(False, where, f"no answer within {PROBE_TIMEOUT:.0f} s")
    said = _Answers.of(proc.stdout)
    if said.probe is not None:
        return said.result(f"the probe process ended with exit code {proc.returncode}")
    tail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
    return Probe(False, where, tail)


def probe_fresh(backend: Backend) -> tuple[Probe, dict[str, list]]:
    """In the probe's fresh process: steps 1-3 of the module docstring."""
    refused = forking.refusal()
    if refused is None and not initialised(backend):
        child = _ForkedProbe(backend)
        probe, runtime = child.result()
        if probe is not None and probe.usable:
            probe.fork = [
                True,
                "a child forked from a process that had not touched the device allocated on it",
            ]
            probe.exclusive = _second_open_forked(backend)
            child.release()
            return probe, runtime
        child.release()
        if probe is None and not child.said.in_time:  # it hung: so would this process
            return Probe(False, "forked child", f"the device {child.failure}"), {}
        why = probe.error if probe is not None else child.failure
        fork = [False, f"a forked child of a clean process could not use the device ({why})"]
    elif refused is not None:
        fork = [None, f"not probed in a forked child: after loading the backend {refused}"]
    else:
        fork = [
            None,
            f"not probed in a forked child: torch.{backend.device_type}.is_initialized() is "
            "True after loading the backend (its runners are spawned)",
        ]
    probe = probe_here(backend, "fresh process")
    probe.fork = fork
    runtime = probe_runtime(backend.device) if probe.usable else {}
    if probe.usable:
        probe.exclusive = _second_open_spawned(backend)
    return probe, runtime


class _ForkedProbe:
    """Step 1: a child forked before this process touched the device probes it, reports, and
    holds the device until released (so a second process can be tried against it)."""

    def __init__(self, backend: Backend) -> None:
        self.failure = ""
        read_fd, write_fd = os.pipe()
        self.release_r, self.release_w = os.pipe()
        self.pid = launch.fork("capability-probe", "probe")
        if self.pid == 0:  # the child: never returns
            code = 0
            try:
                os.close(read_fd)
                os.close(self.release_w)

                def at(stage: str) -> None:
                    messages.say(write_fd, "at", stage=stage)

                found = probe_here(backend, "forked child", at)
                messages.say(write_fd, "probe", **asdict(found))
                if found.usable:
                    at("probing streams, events, pinned memory, generator")
                    runtime = probe_runtime(backend.device)
                    messages.say(write_fd, "runtime", facts=runtime)
                messages.say(write_fd, "held")
                os.read(self.release_r, 1)  # hold the device until released
            except BaseException:  # noqa: BLE001 - never run the parent's code in the child
                code = 3
            os._exit(code)
        os.close(write_fd)
        os.close(self.release_r)
        self.said = _Answers.listen(read_fd, CHILD_TIMEOUT, until_held=True)
        os.close(read_fd)

    def result(self) -> tuple[Probe | None, dict[str, list]]:
        said = self.said
        if not said.in_time:
            last = f" (hung {said.stages[-1]})" if said.stages else ""
            self.failure = f"did not answer within {CHILD_TIMEOUT:g} s{last}"
            return None, {}
        if said.probe is None:
            self.failure = "the child died before answering"
            return None, {}
        runtime = said.runtime if said.runtime is not None else {"streams": [None, "child died"]}
        return Probe(**said.probe), runtime

    def release(self) -> None:
        os.close(self.release_w)
        child = forking.Child(self.pid)
        if child.wait(RELEASE_TIMEOUT) is None:
            child.kill()
            child.wait()


def _second_open_forked(backend: Backend) -> list:
    """Step 2: a second child, forked from this clean process, allocates on the device while
    the first holds it."""
    read_fd, write_fd = os.pipe()
    pid = launch.fork("probe-second-open")
    if pid == 0:  # the child: never returns
        try:
            os.close(read_fd)
            messages.say(write_fd, "opened", answer=_open_once(backend))
        finally:
            os._exit(0)
    os.close(write_fd)
    said = _Answers.listen(read_fd, OPEN_TIMEOUT)
    os.close(read_fd)
    child = forking.Child(pid)
    child.kill()
    child.wait()
    return _exclusive(said)


def _second_open_spawned(backend: Backend) -> list:
    """Step 3's second process: a fresh interpreter allocates while this process holds it."""
    args = ["--open", backend.spec, backend.device_type]
    proc = _probe_process("probe-second-open", args, OPEN_TIMEOUT)
    return _exclusive(_Answers.of(proc.stdout) if proc is not None else _Answers(in_time=False))


def _probe_process(
    kind: str, args: list[str], timeout: float
) -> subprocess.CompletedProcess | None:
    """`python -m conformance.engine.probe ARGS` with one thread and CUDA asked through NVML;
    None past `timeout`."""
    try:
        return launch.run(
            kind,
            ["-m", "conformance.engine.probe", *args],
            {**forking.QUIET, **PROBE_ENVIRONMENT},
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return None


def _open_once(backend: Backend) -> str:
    """ "ok", or "error: <first line>" of what allocating one tensor raised."""
    try:
        torch.ones(4, device=backend.device).cpu()
        return "ok"
    except Exception as exc:  # noqa: BLE001 - the refusal is the answer
        return f"error: {error_line(exc)[:300]}"


def _exclusive(said: _Answers) -> list:
    how = "a second process allocated on the device while the probe held it"
    if not said.in_time:
        return [True, f"{how}: it hung for {OPEN_TIMEOUT:g} s"]
    answer = said.opened or ""
    if answer == "ok":
        return [False, f"{how}: it could"]
    if answer:
        return [True, f"{how}: {answer.removeprefix('error: ')}"]
    return [None, f"{how}: it died without an answer"]


class _Answers:
    """What a probe process said (processes/messages.py), gathered by `on_<kind>`."""

    def __init__(self, in_time: bool = True) -> None:
        self.in_time = in_time  # it answered before its deadline (else: it hung)
        self.probe: dict[str, Any] | None = None  # the core facts (device_probe.Probe's fields)
        self.runtime: dict[str, list] | None = None  # the runtime's facts
        self.stages: list[str] = []  # the stages it reached
        self.held = False  # it holds the device until released
        self.opened: str | None = None  # a second open's answer: "ok" or "error: ..."

    @classmethod
    def listen(cls, fd: int, timeout: float, until_held: bool = False) -> _Answers:
        """The messages on `fd` until it ends (or `held`, if asked); `in_time` False past
        `timeout` seconds."""
        said, reader = cls(), MessageReader(fd)
        deadline = time.monotonic() + timeout
        while not (until_held and said.held):
            try:
                message = reader.receive(max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                said.in_time = False
                break
            if message is None:
                break
            messages.dispatch(said, message)
        return said

    @classmethod
    def of(cls, output: str) -> _Answers:
        """The messages in a finished probe process's stdout (other lines skipped)."""
        said = cls()
        for line in output.splitlines():
            message = messages.decode(line)
            if message is not None:
                messages.dispatch(said, message)
        return said

    def on_probe(self, **facts: Any) -> None:
        self.probe = facts

    def on_runtime(self, facts: dict[str, list]) -> None:
        self.runtime = facts

    def on_at(self, stage: str) -> None:
        self.stages.append(stage)

    def on_held(self) -> None:
        self.held = True

    def on_opened(self, answer: str) -> None:
        self.opened = answer

    def result(self, died: str) -> Probe:
        """The probe, with its runtime's facts if it got that far (`died`: why not)."""
        assert self.probe is not None
        probe = Probe(**self.probe)
        if probe.usable:
            probe.runtime = self.runtime if self.runtime is not None else {"streams": [None, died]}
        return probe


def _answer(probe: Probe, runtime: dict[str, list]) -> list[bytes]:
    """A probe's messages: its core facts, then (if usable) its runtime's."""
    said = [encode("probe", **asdict(probe))]
    return [*said, encode("runtime", facts=runtime)] if probe.usable else said


def main(argv: list[str]) -> None:
    """`python -m conformance.engine.probe MODULE[:FUNCTION] DEVICE [HEAP_ZONES CACHE]`: print
    the probe's messages; `--open MODULE DEVICE`: allocate once and say `opened` (ok or the
    error).
    Ends with `os._exit`: a device whose teardown blocks or aborts cannot change the answer."""
    code = 0
    try:
        sys.stdout.flush()
        if argv[0] == "--open":
            answer = _open_once(load_backend(argv[1], argv[2]))
            messages.say(1, "opened", answer=answer)
        else:
            module, device, *zones = argv
            backend = load_backend(module, device)
            if zones:
                backend.heap_zones, backend.heap_cache = zones[0], zones[1] or None
            sys.stdout.flush()  # what the backend printed comes before the answer
            messages.send(1, *_answer(*probe_fresh(backend)))
    except BaseException as exc:  # noqa: BLE001 - one line for the asking process
        print(f"probe failed: {type(exc).__name__}: {error_line(exc)}", file=sys.stderr)
        code = 2
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Foundation probes in their own process, so that a probe that crashes or hangs marks its
foundation broken instead of taking a case (or a scenario's record) with it.

`probe_isolated` runs `python -m conformance.engine.probing` (a fresh interpreter: it works for
devices that refuse a forked child), which loads the backend as the run did and runs the probes
of one dtype (foundations.probe_specs), announcing each before it runs and its result after
(processes/messages.py: `start`, `done`, then `end`, on its stdout). If the process dies in a
probe, that probe is `crashed` (signal, glibc or sanitizer message) and a new process goes on
with the next one; past `timeout` seconds it is `hung`. The result is the list of failed probes,
as the in-process prober gives it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from typing import Any

from conformance.engine.diagnosis import describe_status, diagnose
from conformance.engine.foundations import Probe
from conformance.engine.profile import PROFILE_ENV, DeviceProfile
from conformance.processes import launch, messages
from conformance.processes.messages import MessageReader

PROBE_FIELDS = ("rank", "op", "dtype", "layout", "what", "harness", "path", "direction")


def probe_isolated(
    backend: str | None,
    device: str | None,
    dtype: str,
    timeout: float,
    profile: DeviceProfile | None = None,
) -> list[Probe]:
    """The failed probes of `dtype` (a name: "float32"), each probe run in a child process
    (given the run's device profile whole, when there is one)."""
    found: list[Probe] = []
    start = 0
    env = {PROFILE_ENV: profile.dumps()} if profile is not None else {}
    while True:
        start, more = _one_process(backend, device, dtype, timeout, start, found, env)
        if not more:
            return found


def _one_process(
    backend: str | None,
    device: str | None,
    dtype: str,
    timeout: float,
    start: int,
    found: list[Probe],
    env: dict[str, str],
) -> tuple[int, bool]:
    """Run probes from index `start` in one process: (next index, whether to go on)."""
    cmd = ["-m", "conformance.engine.probing", "--dtype", dtype]
    cmd += ["--start", str(start)]
    cmd += ["--backend", backend] if backend else []
    cmd += ["--device", device] if device else []
    with (
        tempfile.TemporaryFile() as log,
        launch.spawn(
            "foundation-probe",
            cmd,
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
            bufsize=0,
            env=env,
        ) as proc,  # its stdout closed when done
    ):
        assert proc.stdout is not None
        reader, watch = MessageReader(proc.stdout.fileno()), _Watch(timeout)
        watch.deadline = time.monotonic() + timeout * 4  # the start-up (imports) gets more
        while not watch.ended:
            wait = max(0.0, watch.deadline - time.monotonic()) if timeout else None
            try:
                message = reader.receive(wait)
            except TimeoutError:  # hung: in a probe, or before the first one
                proc.kill()
                proc.wait()
                if watch.running is None:
                    return start, False
                found.append(_failed(watch.running, f"hung: no result within {timeout:g} s"))
                return watch.running["index"] + 1, True
            if message is None:
                break
            messages.dispatch(watch, message)
            found += watch.failed
            watch.failed = []
        if watch.ended:
            proc.wait()
            return 0, False
        running = watch.running
        status = proc.wait()
        log.seek(0)
        output = log.read().decode(errors="replace")
    if running is None:  # died before its first probe: nothing to say about the foundations
        return start, False
    how = describe_status((-status) & 0x7F if status < 0 else status << 8)
    headline, _ = diagnose(output)
    message = f"crashed: the probe process {how}" + (f": {headline}" if headline else "")
    found.append(_failed(running, message))
    return running["index"] + 1, True


def _failed(meta: dict, message: str) -> Probe:
    return Probe(**{k: meta[k] for k in PROBE_FIELDS}, message=message)


class _Watch:
    """The parent's handler of one probe process's messages."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.deadline = 0.0  # when the running probe (or the start-up) counts as hung
        self.running: dict | None = None  # the probe announced and not done
        self.failed: list[Probe] = []
        self.ended = False

    def on_start(self, **meta: Any) -> None:
        self.running = meta
        self.deadline = time.monotonic() + self.timeout

    def on_done(self, index: int, failed: bool, message: str | None) -> None:
        if failed and self.running is not None:
            self.failed.append(_failed(self.running, message or ""))
        self.running = None

    def on_end(self) -> None:
        self.ended = True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", required=True)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--backend")
    parser.add_argument("--device")
    args = parser.parse_args(argv)
    import faulthandler

    import torch

    from conformance.engine.backend import load_backend
    from conformance.engine.discovery import has_backend_fallback, registered_overloads
    from conformance.engine.foundations import Foundations, probe_specs

    faulthandler.enable(all_threads=True)
    backend = load_backend(args.backend, args.device)
    if os.environ.get(PROFILE_ENV):
        backend.profile = DeviceProfile.from_json(json.loads(os.environ[PROFILE_ENV]))
    key = backend.dispatch_key
    foundations = Foundations(
        backend.device, set(registered_overloads(key)), has_fallback=has_backend_fallback(key)
    )
    specs = probe_specs(foundations, getattr(torch, args.dtype))
    for index in range(args.start, len(specs)):
        spec = specs[index]
        meta = {k: getattr(spec, k) for k in PROBE_FIELDS}
        messages.say(1, "start", index=index, **meta)
        probe = spec.run()
        failed = probe is not None
        messages.say(1, "done", index=index, failed=failed, message=probe and probe.message)
    messages.say(1, "end")
    os._exit(0)  # no interpreter teardown: a backend that crashes at exit says nothing here


if __name__ == "__main__":
    main()

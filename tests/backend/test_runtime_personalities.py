"""echo_npu's runtime personalities (``ECHO_NPU_RUNTIME``): behaviours of real vendor runtimes,
each asserted in fresh interpreters (scripts with timeouts, killed with their children when
they run over): ``threaded`` (driver threads; a forked child of an initialised process hangs
when it touches the device), ``exclusive`` (one process opens the device), ``slow_init`` (2 s
initialisation), ``teardown_hang`` (a process that used the device never ends at a normal exit).
Without the variable none of it happens. Every test sets its own ``ECHO_NPU_DEVICE_LOCK``."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc, fork")

HANG_S = 5.0  # how long a process must stay alive to count as hung
LIMIT_S = 120.0  # any script that runs longer is killed (with its forked children)

# shared by the scripts: threads by name, waiting for a file
PRELUDE = r"""
import os, sys, time
def thread_names(pid="self"):
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                out.append(f.read().strip())
        except OSError:
            pass
    return out
def wait_for(path, limit=90):
    start = time.monotonic()
    while not os.path.exists(path):
        if time.monotonic() - start > limit:
            sys.exit(f"timed out waiting for {path}")
        time.sleep(0.02)
def touch(path):
    open(path, "w").close()
def blocked_in(pid):
    # what a process is blocked in: its syscall number (x86-64 futex: 202) and wait channel
    out = []
    for name in ("syscall", "wchan"):
        try:
            with open(f"/proc/{pid}/{name}") as f:
                out.append((f.read().split() or ["?"])[0])
        except OSError:
            out.append("?")
    return out
"""


class Script:
    """A script in a fresh interpreter of its own session, output to a file."""

    def __init__(self, tmp: Path, name: str, code: str, **env: str) -> None:
        full = {k: v for k, v in os.environ.items() if not k.startswith("ECHO_NPU_")}
        full["ECHO_NPU_DEVICE_LOCK"] = str(tmp / "device.lock")  # never the user's default
        full.update(env)
        self.out = tmp / f"{name}.out"
        with open(self.out, "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
                env=full,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its forked children can be killed with it
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        return self.out.read_text()

    def lines(self) -> dict[str, str]:
        """``KEY rest`` lines of its output, by key."""
        found = {}
        for line in self.text().splitlines():
            key, _, rest = line.partition(" ")
            found[key] = rest
        return found

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def finish(self, timeout: float = LIMIT_S) -> int:
        """Its exit status; killed (and the test failed) past ``timeout``."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"script ran over {timeout} s:\n{self.text()[-3000:]}")

    def alive_after(self, seconds: float) -> bool:
        """Whether it is still running ``seconds`` from now."""
        try:
            self.proc.wait(timeout=seconds)
            return False
        except subprocess.TimeoutExpired:
            return True

    def wait_output(self, needle: str, timeout: float = LIMIT_S) -> None:
        start = time.monotonic()
        while needle not in self.text():
            if self.proc.poll() is not None or time.monotonic() - start > timeout:
                self.kill()
                pytest.fail(f"no {needle!r} in its output:\n{self.text()[-3000:]}")
            time.sleep(0.05)


@pytest.fixture
def scripts(tmp_path):
    started: list[Script] = []

    def start(name: str, code: str, **env: str) -> Script:
        s = Script(tmp_path, name, code, **env)
        started.append(s)
        return s

    yield start
    for s in started:  # whatever a failed test left running
        s.kill()


def _blocked_in(pid: int) -> tuple[str, str]:
    """What a process's main thread is blocked in: its syscall number and wait channel ("?"
    where the kernel does not tell)."""
    out = []
    for name in ("syscall", "wchan"):
        try:
            out.append((Path(f"/proc/{pid}/{name}").read_text().split() or ["?"])[0])
        except OSError:
            out.append("?")
    return out[0], out[1]


def _futex_wait(syscall: str, wchan: str) -> bool:
    """Whether ``_blocked_in``'s answer is a futex wait (x86-64: syscall 202)."""
    if platform.machine() == "x86_64" and syscall.isdigit():
        return syscall == "202"
    return "futex" in wchan or wchan in ("?", "0")  # no way to tell: the hang alone counts


THREADED = r"""
import signal, torch, echo_npu
print("PERSONALITY", ",".join(echo_npu.runtime_personality()), flush=True)
before = thread_names()
print("BEFORE", len(before), sorted(n for n in before if n.startswith("enpu-")), flush=True)

# forked before initialisation: the child initialises a runtime of its own, threads included
pid = os.fork()
if pid == 0:
    ok = (torch.ones(2, device="npu") + 1).sum().item() == 4
    os._exit(0 if ok and "enpu-drv-event" in thread_names() else 3)
start = time.monotonic()
while os.waitpid(pid, os.WNOHANG)[0] == 0:
    if time.monotonic() - start > 60:
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.02)
print("EARLY_CHILD finished", flush=True)

x = torch.ones(2, device="npu")
after = thread_names()
print("AFTER", len(after), sorted(n for n in after if n.startswith("enpu-")), flush=True)

# forked after initialisation: allocation, copy and kernel each wait for the driver lock forever
uses = {"alloc": lambda: torch.empty(3, device="npu"), "copy": lambda: x.cpu(),
        "kernel": lambda: x + 1}
children = {}
for name, use in uses.items():
    pid = os.fork()
    if pid == 0:
        use()
        os._exit(0)  # never reached
    children[name] = pid
time.sleep(HANG_S)
for name, pid in children.items():
    finished = os.waitpid(pid, os.WNOHANG)[0] != 0
    print("CHILD", name, "finished" if finished else "running", *blocked_in(pid), flush=True)
    if not finished:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
print("PARENT", (x + 1).cpu().tolist(), flush=True)
"""


def test_threaded(scripts):
    s = scripts("threaded", f"HANG_S = {HANG_S}\n" + THREADED, ECHO_NPU_RUNTIME="threaded")
    assert s.finish() == 0, s.text()[-3000:]
    out = s.text()
    lines = s.lines()
    assert lines["PERSONALITY"] == "threaded"
    assert lines["BEFORE"].endswith(" []"), out  # initialisation starts the threads
    assert "EARLY_CHILD finished" in out, out
    count, names = lines["AFTER"].split(" ", 1)
    assert int(count) > 1 and "enpu-drv-event" in names, out
    children = [line.split() for line in out.splitlines() if line.startswith("CHILD ")]
    assert [c[1] for c in children] == ["alloc", "copy", "kernel"], out
    for _, name, state, *blocked in children:
        assert state == "running", f"{name}: a forked child finished:\n{out}"
        assert _futex_wait(*blocked), f"{name}: not a futex wait: {blocked}\n{out}"
    assert lines["PARENT"] == "[2.0, 2.0]", out  # the initialising process works as usual


HOLDER = r"""
import torch, echo_npu
x = torch.empty(1, device="npu")
touch(READY)
time.sleep(120)
"""

CONTENDER = r"""
import torch, echo_npu
wait_for(READY)
try:
    torch.empty(1, device="npu")
    print("ALLOCATED", flush=True)
except RuntimeError as e:
    print("ERROR", str(e).splitlines()[0], flush=True)
print("INITIALISED", torch.npu.is_initialized(), flush=True)
"""

AFTER = r"""
import torch, echo_npu
wait_for(GO)
print("VALUES", (torch.ones(2, device="npu") + 1).cpu().tolist(), flush=True)
with open(LOCK) as f:
    print("LOCKFILE", f.read().strip(), os.getpid(), flush=True)
"""


def test_exclusive(scripts, tmp_path):
    files = (
        f"READY = {str(tmp_path / 'ready')!r}\nGO = {str(tmp_path / 'go')!r}\n"
        f"LOCK = {str(tmp_path / 'device.lock')!r}\n"
    )
    env = {"ECHO_NPU_RUNTIME": "exclusive"}
    holder = scripts("holder", files + HOLDER, **env)
    contender = scripts("contender", files + CONTENDER, **env)
    after = scripts("after", files + AFTER, **env)
    assert contender.finish() == 0, contender.text()[-3000:]
    lines = contender.lines()
    assert lines["ERROR"] == (
        f"echo_npu: device busy: npu is opened by process {holder.pid} (ECHO_NPU_RUNTIME=exclusive)"
    ), contender.text()
    assert lines["INITIALISED"] == "False"
    holder.kill()  # a crash: the kernel releases its lock
    (tmp_path / "go").touch()
    assert after.finish() == 0, after.text()[-3000:]
    lines = after.lines()
    assert lines["VALUES"] == "[2.0, 2.0]"
    written, own = lines["LOCKFILE"].split()
    assert written == own  # the holder's pid, for the next one's message


SLOW = r"""
import torch, echo_npu
start = time.perf_counter()
torch.empty(1, device="npu")
first = time.perf_counter() - start
start = time.perf_counter()
torch.empty(1, device="npu")
print("TIMES", first, time.perf_counter() - start, flush=True)
"""


def test_slow_init(scripts):
    s = scripts("slow", SLOW, ECHO_NPU_RUNTIME="slow_init")
    assert s.finish() == 0, s.text()[-3000:]
    first, second = map(float, s.lines()["TIMES"].split())
    assert first >= 2.0 and second < 1.0, (first, second)


TEARDOWN = r"""
import torch, echo_npu
x = (torch.ones(2, device="npu") + 1).cpu()
pid = os.fork()
if pid == 0:
    sys.exit(0)  # a normal exit of a child that did not initialise the device: no hang
start = time.monotonic()
while os.waitpid(pid, os.WNOHANG)[0] == 0:
    if time.monotonic() - start > 60:
        print("CHILD hung", flush=True)
        os.kill(pid, 9)
    time.sleep(0.02)
print("CHILD finished", flush=True)
print("DONE", x.tolist(), flush=True)
if HARD:
    os._exit(0)
"""


def test_teardown_hang(scripts):
    env = {"ECHO_NPU_RUNTIME": "teardown_hang"}
    normal = scripts("normal", "HARD = False\n" + TEARDOWN, **env)
    hard = scripts("hard", "HARD = True\n" + TEARDOWN, **env)
    assert hard.finish() == 0, hard.text()[-3000:]  # os._exit ends at once
    assert "CHILD finished" in hard.text() and "DONE [2.0, 2.0]" in hard.text(), hard.text()
    normal.wait_output("DONE")
    assert "CHILD finished" in normal.text(), normal.text()
    assert normal.alive_after(HANG_S), f"ended: {normal.proc.returncode}\n{normal.text()}"
    blocked = _blocked_in(normal.pid)
    assert _futex_wait(*blocked), blocked  # joining the thread: a futex wait on its id
    normal.kill()


DEFAULT = r"""
import signal, torch, echo_npu
print("PERSONALITY", repr(echo_npu.runtime_personality()), flush=True)
start = time.perf_counter()
x = torch.ones(2, device="npu")
print("FIRST", time.perf_counter() - start, flush=True)
touch(MINE)
wait_for(OTHER)  # both processes have the device open at once
names = thread_names()
print("THREADS", sorted(n for n in names if n.startswith("enpu-")), flush=True)
pid = os.fork()
if pid == 0:
    ok = (torch.empty(3, device="npu").numel() == 3 and x.cpu().tolist() == [1.0, 1.0]
          and (x + 1).cpu().tolist() == [2.0, 2.0])
    os._exit(0 if ok else 3)
start = time.monotonic()
while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
    if time.monotonic() - start > 60:
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.02)
print("CHILD", os.waitstatus_to_exitcode(done[1]), flush=True)
"""


def test_no_personality_is_todays_runtime(scripts, tmp_path):
    a, b = (str(tmp_path / "a"), str(tmp_path / "b"))
    one = scripts("one", f"MINE, OTHER = {a!r}, {b!r}\n" + DEFAULT)
    two = scripts("two", f"MINE, OTHER = {b!r}, {a!r}\n" + DEFAULT, ECHO_NPU_RUNTIME="")
    for s in (one, two):
        assert s.finish(timeout=60) == 0, s.text()[-3000:]  # a normal exit ends
        lines = s.lines()
        assert lines["PERSONALITY"] == "()"
        assert float(lines["FIRST"]) < 2.0
        assert lines["THREADS"] == "[]"
        assert lines["CHILD"] == "0", s.text()  # a forked child uses the device
    assert not (tmp_path / "device.lock").exists()


ALL = r"""
import torch, echo_npu
print("PERSONALITY", ",".join(echo_npu.runtime_personality()), flush=True)
if USE:
    start = time.perf_counter()
    torch.ones(1, device="npu")
    print("FIRST", time.perf_counter() - start, flush=True)
    print("THREADS", sorted(n for n in thread_names() if n.startswith("enpu-")), flush=True)
    with open(LOCK) as f:
        print("LOCKFILE", f.read().strip() == str(os.getpid()), flush=True)
    os._exit(0)
"""


def test_combined_and_bad_names(scripts, tmp_path):
    lock = f"LOCK = {str(tmp_path / 'device.lock')!r}\n"
    every = {"ECHO_NPU_RUNTIME": " teardown_hang,threaded, exclusive,slow_init,threaded"}
    used = scripts("used", lock + "USE = True\n" + ALL, **every)
    unused = scripts("unused", lock + "USE = False\n" + ALL, **every)
    bad = scripts("bad", "import echo_npu", ECHO_NPU_RUNTIME="threaded,bogus")
    assert bad.finish() == 1
    assert bad.text().strip().splitlines()[-1] == (
        "ValueError: invalid ECHO_NPU_RUNTIME item 'bogus'; valid names: threaded, exclusive, "
        "slow_init, teardown_hang (comma-separated)"
    ), bad.text()[-3000:]
    # a process that never initialised the device ends normally, whatever the personality
    assert unused.finish(timeout=60) == 0, unused.text()[-3000:]
    assert unused.lines()["PERSONALITY"] == "threaded,exclusive,slow_init,teardown_hang"
    assert used.finish() == 0, used.text()[-3000:]
    lines = used.lines()
    assert float(lines["FIRST"]) >= 2.0
    assert lines["THREADS"] == "['enpu-drv-event', 'enpu-drv-svc']"
    assert lines["LOCKFILE"] == "True"

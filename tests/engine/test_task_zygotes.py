"""CPU work forked through task zygotes (issue 55, seen on an H200): OpInfo's op_db, imported in
a zygote to warm up sample captures, initialised CUDA's driver there (torch's common_cuda asks
the device's capability at import), and the zygote, now with a driver thread, refused every
fork: the collection stopped with an INTERNALERROR.

A task zygote hides the accelerators (its work is CPU work); a runner's CPU tasks go to a task
zygote its runner zygote keeps, never to the runner zygote (whose runners need the device); and
a zygote that a warm-up still left with threads is replaced by a cold one.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

from conformance.engine import zygote
from conformance.engine.zygote import Forker, ZygoteLink, link_pair

REPO = Path(__file__).resolve().parents[2]
HERE = "tests.engine.test_task_zygotes"


def report_environment(payload: str, progress_fd: int) -> None:
    """A task: writes `payload`'s value in its environment, and its parent's pid."""
    os.write(progress_fd, f"{os.environ.get(payload, '<unset>')}|{os.getppid()}".encode())


def start_a_thread() -> None:
    """A warm-up that leaves the zygote with a second thread (a driver's, say)."""
    threading.Thread(target=threading.Event().wait, daemon=True).start()


def _task(forker: Forker, warm: tuple[str, ...] = ()) -> tuple[str, int]:
    read_fd, write_fd = os.pipe()
    try:
        child = forker.start(
            f"{HERE}:report_environment", "CUDA_VISIBLE_DEVICES", write_fd, "t", warm
        )
    finally:
        os.close(write_fd)
    with os.fdopen(read_fd) as f:
        text = f.read()
    assert child.wait(60) == 0, text
    value, _, parent = text.partition("|")
    return value, int(parent)


def _through_a_zygote() -> Forker:
    forker = Forker()
    forker.device_touched = True  # as a runner: never forks itself
    return forker


def test_a_task_zygote_hides_the_accelerators():
    forker = _through_a_zygote()
    try:
        value, _ = _task(forker)
    finally:
        forker.use(None)
    assert value == "" == zygote.HIDDEN_ACCELERATORS["CUDA_VISIBLE_DEVICES"]


def test_a_warm_up_that_leaves_threads_gets_a_cold_zygote():
    forker = _through_a_zygote()
    try:
        value, _ = _task(forker, warm=(f"{HERE}:start_a_thread",))
        assert forker.cold  # the next tasks skip the warm-up
        assert _task(forker, warm=(f"{HERE}:start_a_thread",))[0] == ""
    finally:
        forker.use(None)
    assert value == ""


def test_a_runner_s_tasks_run_in_the_task_zygote_its_runner_zygote_keeps():
    """A runner zygote (a ZygoteServer that forks runners) answers a task-link request with a
    link to a task zygote of its own: the task's parent is that zygote, and it sees no GPU."""
    ours, theirs = link_pair()
    code = (
        "import os, socket, sys\n"
        "from conformance.engine.zygote import ZygoteServer\n"
        "ZygoteServer([socket.socket(fileno=int(sys.argv[1]))], lambda job, fds: os._exit(0))"
        ".serve()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(theirs.fileno())],
        cwd=REPO,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"},
        pass_fds=(theirs.fileno(),),
    )
    theirs.close()
    forker = _through_a_zygote()
    try:
        forker.tasks_from = ZygoteLink(ours)
        value, parent = _task(forker)
    finally:
        forker.use(None)
        ours.close()
        proc.wait(30)
    assert value == ""  # not the runner zygote's "0"
    assert parent != proc.pid  # forked by the task zygote, not by the runner zygote


def test_a_task_zygote_answers_a_task_link_with_itself():
    link = zygote.start_task_zygote()
    try:
        other = link.task_link()
        assert isinstance(other.sock, socket.socket)
        forker = _through_a_zygote()
        forker.link = other
        try:
            assert _task(forker)[1] == link.owner.pid
        finally:
            forker.use(None)
    finally:
        link.close()
        link.owner.wait(30)


IDLE_ZYGOTE = """
import os, sys, time
from conformance.engine.zygote import ZygoteServer, ZygoteLink, link_pair
ours, theirs = link_pair()
if os.fork() == 0:
    ours.close()
    def runner(job, fds):
        os.write(fds[0], str("zygote_idle_marker" in sys.modules).encode())
        os._exit(0)
    ZygoteServer([theirs], runner, ("zygote_idle_marker",)).serve()
theirs.close()
link = ZygoteLink(ours)
def ask():
    r, w = os.pipe()
    child = link.request({"op": "runner", "job": {}}, [w])
    os.close(w)
    return child, r
def seen(asked):
    child, r = asked
    with os.fdopen(r) as f:
        text = f.read()
    child.wait(30)
    return text
first = ask()
if float(sys.argv[1]):
    seen_first = seen(first)
    time.sleep(float(sys.argv[1]))
    print(seen_first, seen(ask()))
else:  # asked again at once: the zygote has had no quiet moment
    second = ask()
    print(seen(first), seen(second))
"""


def test_a_runner_zygote_imports_its_idle_imports_once_its_first_runner_runs(tmp_path):
    """A zygote imports `idle_imports` in its first quiet second after its first child started
    (torch._dynamo, for a runner zygote: about 1 s of every runner after the first), never
    before (the first runner would wait for it) and never in a busy moment."""
    (tmp_path / "zygote_idle_marker.py").write_text("")
    script = tmp_path / "idle.py"
    script.write_text(IDLE_ZYGOTE)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}", "OMP_NUM_THREADS": "1"}

    def seen(pause: float) -> str:
        done = subprocess.run(
            [sys.executable, str(script), str(pause)], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert seen(2.5) == "False True"  # the second runner starts with it
    assert seen(0) == "False False"  # asked at once: the zygote was never idle


def test_the_runner_zygote_warms_torch_dynamo(monkeypatch):
    """The runner zygote (harness/zygotes.py) hands torch._dynamo to its server as an idle
    import: torch imports it on the first call of one of its Python kernels, in each runner."""
    from types import SimpleNamespace

    from conformance.harness import zygotes

    seen = {}

    class Server:
        def __init__(self, links, runner, idle_imports=()):
            seen["idle_imports"] = idle_imports

        def serve(self):
            raise SystemExit

    monkeypatch.setattr(zygotes, "ZygoteServer", Server)
    session = SimpleNamespace(config=None, items=[])
    try:
        zygotes._serve(None, session, None, None)
    except SystemExit:
        pass
    assert "torch._dynamo" in seen["idle_imports"]

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
from types import MappingProxyType, SimpleNamespace

import pytest

from conformance.processes import interpreter, zygote
from conformance.processes.forker import Forker
from conformance.processes.this import ThisProcess
from conformance.processes.zygote import ZygoteLink, link_pair
from tests.helpers import clean_env

REPO = Path(__file__).resolve().parents[2]
HERE = "tests.processes.test_task_zygotes"


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
    return Forker(ThisProcess("runner"))  # as a runner: never forks itself


def test_a_task_zygote_hides_the_accelerators():
    forker = _through_a_zygote()
    try:
        value, _ = _task(forker)
    finally:
        forker.use(None)
    assert value == "" == zygote.HIDDEN_ACCELERATORS["CUDA_VISIBLE_DEVICES"]


def report_backend_loaded(payload: str, progress_fd: int) -> None:
    """A task: writes whether the module `payload` is imported in it."""
    os.write(progress_fd, str(payload in sys.modules).encode())


def test_a_task_zygote_does_not_autoload_the_backend(tmp_path, monkeypatch):
    """A backend that `import torch` loads (a `torch.backends` entry point) stays out of the task
    zygote: torch_opencl on pocl started its device threads when OpInfo's import asked it
    whether it was available, the zygote refused every fork after its op_db warm-up, and each
    integer capture of a cold sample cache imported op_db again (10 minutes instead of 2)."""
    folder = tmp_path / "autoload"
    subprocess.run(
        [sys.executable, "-m", "echo_npu.autoload", str(folder)], check=True, env=clean_env()
    )
    path = os.pathsep.join(filter(None, [str(folder), interpreter.AT_START["PYTHONPATH"]]))
    pinned = {**interpreter.AT_START, "PYTHONPATH": path}  # children get the start's PYTHONPATH
    monkeypatch.setattr(interpreter, "AT_START", MappingProxyType(pinned))
    forker = _through_a_zygote()
    read_fd, write_fd = os.pipe()
    try:
        child = forker.start(f"{HERE}:report_backend_loaded", "echo_npu", write_fd, "t")
        os.close(write_fd)
        with os.fdopen(read_fd) as f:
            loaded = f.read()
        assert child.wait(60) == 0
    finally:
        forker.use(None)
    assert loaded == "False"


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
        "from conformance.processes.zygote import ZygoteServer\n"
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
        forker.this.tasks_from = ZygoteLink(ours)
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


LAZY_ZYGOTE = """
import os, sys
from conformance.processes.zygote import ZygoteServer, ZygoteLink, link_pair
ours, theirs = link_pair()
if os.fork() == 0:
    ours.close()
    def runner(job, fds):
        os.write(fds[0], str("zygote_lazy_marker" in sys.modules).encode())
        os._exit(0)
    ZygoteServer([theirs], runner).serve()
theirs.close()
link = ZygoteLink(ours)
def seen():
    r, w = os.pipe()
    child = link.fork_runner({}, [w])
    os.close(w)
    with os.fdopen(r) as f:
        text = f.read()
    child.wait(30)
    return text
first = seen()
second = seen()
if sys.argv[1] == "report":
    link.imported(["zygote_lazy_marker"])
print(first, second, seen())
"""


@pytest.mark.parametrize("report", [True, False], ids=["reported", "not-reported"])
def test_a_runner_zygote_imports_what_a_runner_reported_before_its_next_fork(tmp_path, report):
    """A module a runner reported importing (LazyImports) is imported by the zygote before the
    next runner is forked, so that runner starts with it; one nobody reported is never imported
    (a run that never needs torch._dynamo never pays for it)."""
    (tmp_path / "zygote_lazy_marker.py").write_text("")
    script = tmp_path / "lazy.py"
    script.write_text(LAZY_ZYGOTE)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(script), "report" if report else "quiet"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "True" if report else "False"]


def test_lazy_imports_tells_the_zygote_once_after_the_case_that_imported(tmp_path, monkeypatch):
    from conformance.processes.zygote import LazyImports

    told = []
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "lazy_marker_a.py").write_text("")
    (tmp_path / "lazy_marker_b.py").write_text("")
    lazy = LazyImports(
        SimpleNamespace(imported=told.append), ("lazy_marker_a", "lazy_marker_b", "os")
    )
    lazy.check()
    assert told == []  # nothing new (os was there before)
    import lazy_marker_a  # noqa: F401

    lazy.check()
    lazy.check()
    assert told == [["lazy_marker_a"]]


def test_the_runner_zygote_reports_torch_dynamo_and_symbolic_shapes(monkeypatch):
    """Each runner the runner zygote forks (harness/zygotes.py) checks after every case whether
    it had to import torch._dynamo or symbolic_shapes (sympy), each about 1 s of a runner's
    time, and tells its zygote."""
    from conformance.harness import zygotes

    seen = {}

    class Server:
        def __init__(self, links, runner):
            seen["runner"] = runner

        def serve(self):
            raise SystemExit

    def serve(*args):
        seen["after_case"] = args[-1]
        raise SystemExit

    monkeypatch.setattr(zygotes, "ZygoteServer", Server)
    monkeypatch.setattr(zygotes, "serve", serve)
    monkeypatch.setattr(zygotes, "ZygoteLink", lambda sock: SimpleNamespace(imported=None))
    monkeypatch.setattr(zygotes, "THIS", ThisProcess("runner"))
    monkeypatch.setattr(zygotes.socket, "socket", lambda fileno: None)
    session = SimpleNamespace(config=None, items=[])
    with pytest.raises(SystemExit):
        zygotes._serve(None, session, SimpleNamespace(), None)
    with pytest.raises(SystemExit):
        seen["runner"]({"replay": False}, [0, 1, 2, 3])
    lazy = seen["after_case"].__self__
    assert set(zygotes.RUNNER_IMPORTS) == {"torch._dynamo", "torch.fx.experimental.symbolic_shapes"}
    assert isinstance(lazy, zygotes.LazyImports)

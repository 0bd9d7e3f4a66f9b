"""Streams, events, pinned memory and the asynchronous mode of echo_npu (issue 46), through the
standard APIs (torch.Stream, torch.Event, torch.accelerator, record_stream, pin_memory,
non_blocking copies); and the faults of that runtime, each shown right without it and wrong
with it. Asynchronous mode is an import-time switch: those tests run one interpreter each
(ECHO_NPU_ASYNC=1) whose script prints one line per check, with the delay injector on so that a
missing fence fails every time."""

from __future__ import annotations

import threading

import pytest
import torch

# torch.Event (a Python class of every device's events) is newer than torch.Stream
needs_event = pytest.mark.skipif(
    not hasattr(torch, "Event"), reason="this torch has no torch.Event"
)

# ---- synchronous mode (the default), in-process --------------------------------------------


@pytest.fixture
def faults(npu):
    yield npu.set_faults
    npu.set_faults([])


def test_synchronous_by_default(npu):
    assert npu.is_async() is False


def test_streams_through_torch_stream_and_accelerator(npu):
    s = torch.Stream(device="npu")
    assert s.device_type == 20 or s.device.type == "npu"
    assert s.stream_id != 0 and s.query() is True
    s.synchronize()
    assert torch.npu.current_stream().stream_id == 0
    with torch.npu.stream(s):
        assert torch.npu.current_stream() == s
        assert (torch.ones(3, device="npu") + 1).cpu().tolist() == [2.0, 2.0, 2.0]
    assert torch.npu.current_stream() == torch.npu.default_stream()
    if hasattr(torch, "accelerator") and hasattr(torch.accelerator, "set_stream"):
        torch.accelerator.set_stream(s)
        try:
            assert torch.accelerator.current_stream() == s
        finally:
            torch.accelerator.set_stream(torch.npu.default_stream())
        torch.accelerator.synchronize()


def test_current_stream_is_per_thread(npu):
    s = torch.Stream(device="npu")
    seen = []
    torch.npu.set_stream(s)
    try:
        t = threading.Thread(target=lambda: seen.append(torch.npu.current_stream().stream_id))
        t.start()
        t.join()
        assert torch.npu.current_stream() == s
    finally:
        torch.npu.set_stream(torch.npu.default_stream())
    assert seen == [0]


def test_stream_priorities(npu):
    least, greatest = torch.npu.priority_range()
    assert (least, greatest) == (0, -1)
    hi = torch.Stream(device="npu", priority=-1)
    assert torch.npu.stream_priority(hi) == -1
    assert torch.npu.stream_priority(torch.Stream(device="npu")) == 0


@needs_event
def test_events_record_query_synchronize_elapsed(npu):
    a, b = (
        torch.Event(device="npu", enable_timing=True),
        torch.Event(device="npu", enable_timing=True),
    )
    a.record()
    torch.ones(1000, device="npu").sum()
    b.record()
    b.synchronize()
    assert a.query() and b.query()
    assert a.elapsed_time(b) >= 0
    s = torch.Stream(device="npu")
    s.wait_event(b)
    s.wait_stream(torch.npu.current_stream())
    with pytest.raises((RuntimeError, ValueError), match="enable_timing"):
        e1, e2 = torch.Event(device="npu"), torch.Event(device="npu")
        e1.record()
        e2.record()
        e1.elapsed_time(e2)


def test_pinned_memory_and_non_blocking_copies(npu):
    h = torch.arange(8.0).pin_memory()
    assert h.is_pinned() and not torch.arange(8.0).is_pinned()
    d = h.to("npu", non_blocking=True)
    back = torch.empty(8).pin_memory()
    back.copy_(d, non_blocking=True)
    torch.npu.synchronize()
    assert torch.equal(back, h)


def test_record_stream_accepted(npu):
    x = torch.ones(4, device="npu")
    x.record_stream(torch.Stream(device="npu"))
    assert x.sum().item() == 4


# ---- faults of the runtime that show in synchronous mode (set at run time) ------------------


def test_guard_no_switch(npu, faults):
    assert torch.empty(2, device="npu:1").device.index == 1
    faults(["guard_no_switch"])
    assert torch.empty(2, device="npu:1").device.index == 0


def test_set_stream_ignored(npu, faults):
    s = torch.Stream(device="npu")
    with torch.npu.stream(s):
        assert torch.npu.current_stream() == s
    faults(["set_stream_ignored"])
    with torch.npu.stream(s):
        assert torch.npu.current_stream().stream_id == 0
    if hasattr(torch, "accelerator") and hasattr(torch.accelerator, "set_stream"):
        torch.accelerator.set_stream(s)
        assert torch.accelerator.current_stream().stream_id == 0


def test_pinned_refused(npu, faults):
    assert torch.empty(8).pin_memory().is_pinned()
    faults(["pinned_refused"])
    with pytest.raises(RuntimeError, match="pinned memory"):
        torch.empty(8).pin_memory()


def test_memory_stats_zero(npu, faults):
    x = torch.empty(4096, device="npu")
    assert torch.npu.memory_allocated() >= x.nbytes
    faults(["memory_stats_zero"])
    assert torch.npu.memory_allocated() == 0 and torch.npu.memory_reserved() == 0
    if hasattr(torch, "accelerator") and hasattr(torch.accelerator, "memory_allocated"):
        assert torch.accelerator.memory_allocated() == 0
    assert npu.memory_stats()["live_bytes"] >= x.nbytes  # the protocol hook still counts


# ---- asynchronous mode: one interpreter, one line per check -----------------------------------

ASYNC = r"""
import time, torch, echo_npu
N = 1 << 14
out = {}
def check(name, ok):
    out[name] = bool(ok)

check("async", echo_npu.is_async())
x = torch.arange(N, device="npu", dtype=torch.float32)
(x + 1).cpu()  # warm up (meta kernels, workers)

echo_npu.set_delay("kernel", 100)
t = time.perf_counter(); y = x + 1; launch = time.perf_counter() - t
check("kernels_queued", launch < 0.08 and not torch.npu.current_stream().query())
check("item_waits", y[5].item() == 6.0)
check("stream_done_after_sync", torch.npu.current_stream().query())

# a blocking D2H waits; a non_blocking D2H into pinned memory completes later
echo_npu.set_delay("d2h", 100)
h = torch.zeros(N).pin_memory()
z = y * 2
h.copy_(z, non_blocking=True)
check("nonblocking_d2h_unfenced_is_stale", h[5].item() == 0.0)
e = torch.Event(enable_timing=True); e.record(); e.synchronize()
check("nonblocking_d2h_after_event", h[5].item() == 12.0 and e.query())
check("blocking_d2h", torch.equal(z.cpu(), (torch.arange(N) + 1.0) * 2))
echo_npu.clear_delays()

# elapsed_time covers the queued work
echo_npu.set_delay("kernel", 50)
a, b = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
a.record(); w = y + 3; b.record(); b.synchronize()
try:
    check("elapsed_time", a.elapsed_time(b) >= 45)
except RuntimeError:  # torch: "Both events must be completed"
    check("elapsed_time", False)
echo_npu.clear_delays()

# a side stream ordered after the default stream by wait_stream
echo_npu.set_delay("kernel", 80, "default")
side = torch.Stream(device="npu")
src = torch.full((N,), 3.0, device="npu")
side.wait_stream(torch.npu.current_stream())
with torch.npu.stream(side):
    dst = src * 2
side.synchronize()
check("wait_stream", dst[0].item() == 6.0)
echo_npu.clear_delays()

# record_stream: a block freed while the side stream still reads it is not reused
echo_npu.set_delay("kernel", 150, "side")
a = torch.full((N,), 1.0, device="npu")
torch.npu.synchronize()  # nothing pending anywhere: side has only what follows
with torch.npu.stream(side):
    b = a * 2
check("work_on_side", not side.query())
a.record_stream(side)
del a
c = torch.full((N,), 5.0, device="npu")
side.synchronize()
check("record_stream", b[0].item() == 2.0 and c[0].item() == 5.0)
echo_npu.clear_delays()

# the caching allocator: reserved >= allocated, empty_cache releases
del b, c
check("cache_reserved", torch.npu.memory_reserved() > torch.npu.memory_allocated())
torch.npu.empty_cache()
check("empty_cache", torch.npu.memory_reserved() == torch.npu.memory_allocated())

# ops under a small delay equal CPU's (fallback ops, views, in-place, copies)
echo_npu.set_delay("kernel", 1); echo_npu.set_delay("h2d", 1); echo_npu.set_delay("d2d", 1)
c = torch.randn(64, 33)
d = c.to("npu")
r = ((d.t() * 2 + 1).relu().sum(0) / 3).cpu()
ref = ((c.t() * 2 + 1).relu().sum(0) / 3)
d.add_(1); d[3:].mul_(2)
c.add_(1); c[3:].mul_(2)
check("ops_match_cpu", torch.allclose(r, ref) and torch.equal(d.cpu(), c)
      and torch.allclose(torch.softmax(d, 1).cpu(), torch.softmax(c, 1))
      and torch.equal(d.cumsum(0).cpu(), c.cumsum(0)) and torch.equal(d.sin().cpu(), c.sin()))
echo_npu.clear_delays()
print("RESULT", " ".join(f"{k}={int(v)}" for k, v in out.items()))
"""

EXPECTED = {
    "async": 1,
    "kernels_queued": 1,
    "item_waits": 1,
    "stream_done_after_sync": 1,
    "nonblocking_d2h_unfenced_is_stale": 1,
    "nonblocking_d2h_after_event": 1,
    "blocking_d2h": 1,
    "elapsed_time": 1,
    "wait_stream": 1,
    "work_on_side": 1,
    "record_stream": 1,
    "cache_reserved": 1,
    "empty_cache": 1,
    "ops_match_cpu": 1,
}


def _results(run_py, **env: str) -> dict[str, int]:
    r = run_py(ASYNC, ECHO_NPU_ASYNC="1", **env)
    assert r.returncode == 0, r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("RESULT "))
    return {k: int(v) for k, v in (p.split("=") for p in line.split()[1:])}


@pytest.fixture(scope="module")
def clean(run_py):
    return _results(run_py)


@needs_event
def test_async_mode_is_right(clean):
    assert clean == EXPECTED


@pytest.mark.parametrize(
    "fault, wrong",
    [
        ("nonblocking_d2h_unfenced", {"nonblocking_d2h_after_event"}),
        ("event_sync_early", {"nonblocking_d2h_after_event", "elapsed_time"}),
        ("record_stream_ignored", {"record_stream"}),
        ("set_stream_ignored", {"work_on_side"}),
    ],
)
@needs_event
def test_async_faults(run_py, clean, fault, wrong):
    got = _results(run_py, ECHO_NPU_FAULTS=fault)
    assert {k for k, v in got.items() if v != EXPECTED[k]} == wrong, got


def test_delay_env(run_py):
    code = "import echo_npu, torch; x = torch.ones(2, device='npu'); print('OK', (x + 1).tolist())"
    spec = "kernel:2ms,side.d2h:0.5ms,default.h2d:100us"
    r = run_py(code, ECHO_NPU_ASYNC="1", ECHO_NPU_DELAY=spec)
    assert "OK [2.0, 2.0]" in r.stdout, r.stderr[-2000:]
    r = run_py("import echo_npu", ECHO_NPU_DELAY="kernel:2ms")  # the import raises
    assert "ValueError: ECHO_NPU_DELAY needs ECHO_NPU_ASYNC=1" in r.stderr, r.stderr[-2000:]


def test_delay_env_parsing(npu, monkeypatch):
    from echo_npu import _env

    spec = "kernel:2ms,side.d2h:0.5ms,default.h2d:100us,d2d:1s"
    monkeypatch.setenv("ECHO_NPU_DELAY", spec)
    assert _env.delays(True) == [
        ("all", "kernel", 2000),
        ("side", "d2h", 500),
        ("default", "h2d", 100),
        ("all", "d2d", 1_000_000),
    ]
    for bad in ("kernel:2", "gpu:2ms", "other.kernel:1ms", "kernel:-1ms", "kernel"):
        monkeypatch.setenv("ECHO_NPU_DELAY", bad)
        with pytest.raises(ValueError, match=f"invalid ECHO_NPU_DELAY item '{bad}'"):
            _env.delays(True)
    monkeypatch.setenv("ECHO_NPU_ASYNC", "yes")
    with pytest.raises(ValueError, match="invalid ECHO_NPU_ASYNC value 'yes'"):
        _env.async_mode()


FORK_ASYNC = r"""
import os, torch, echo_npu
echo_npu.set_delay("kernel", 50)
x = torch.ones(4, device="npu") * 3      # queued when the process forks
pid = os.fork()
if pid == 0:
    ok = (x + 1).cpu().tolist() == [4.0] * 4
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
print("CHILD", os.waitstatus_to_exitcode(status), "PARENT", (x + 1).cpu().tolist())
"""


def test_async_fork(run_py):
    """Work queued before a fork is done in the parent and the child (whose streams are new)."""
    r = run_py(FORK_ASYNC, ECHO_NPU_ASYNC="1")
    assert "CHILD 0 PARENT [4.0, 4.0, 4.0, 4.0]" in r.stdout, (r.stdout, r.stderr[-2000:])

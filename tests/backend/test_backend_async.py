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


def test_new_streams_come_from_a_bounded_pool(npu):
    """torch.Stream() does not create a stream (and, asynchronous, a thread) per call."""
    low = {torch.Stream(device="npu").stream_id for _ in range(100)}
    high = {torch.Stream(device="npu", priority=-1).stream_id for _ in range(100)}
    assert len(low) == 32 and len(high) == 32 and not low & high
    assert 0 not in low | high


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


def test_stats_stale(npu, faults):
    faults(["stats_stale"])
    before = torch.npu.memory_allocated()
    x = torch.empty(1 << 20, device="npu")
    assert torch.npu.memory_allocated() == before  # the module's snapshot
    if hasattr(torch, "accelerator") and hasattr(torch.accelerator, "memory_allocated"):
        assert torch.accelerator.memory_allocated() >= before + x.nbytes  # live
    torch.npu.empty_cache()
    assert torch.npu.memory_allocated() >= before + x.nbytes  # refreshed


def test_seed_only_restore(npu, faults):
    g = torch.Generator(device="npu").manual_seed(3)
    first = torch.rand(8, device="npu", generator=g).cpu()
    saved = g.get_state()
    second = torch.rand(8, device="npu", generator=g).cpu()
    g.set_state(saved)
    assert torch.equal(torch.rand(8, device="npu", generator=g).cpu(), second)
    faults(["seed_only_restore"])
    g.set_state(saved)
    assert torch.equal(torch.rand(8, device="npu", generator=g).cpu(), first)


def test_draws_come_from_the_device_generator(npu):
    """torch.npu.manual_seed and set_rng_state govern the device's draws, which equal CPU's for
    the same seed (random.cpp)."""
    torch.npu.manual_seed(11)
    a = torch.randn(16, device="npu").cpu()
    torch.npu.manual_seed(11)
    assert torch.equal(torch.randn(16, device="npu").cpu(), a)
    assert torch.equal(a, torch.randn(16, generator=torch.Generator().manual_seed(11)))
    state = torch.npu.get_rng_state()
    b = torch.randint(0, 100, (16,), device="npu").cpu()
    torch.npu.set_rng_state(state)
    assert torch.equal(torch.randint(0, 100, (16,), device="npu").cpu(), b)


def test_memory_stats_zero(npu, faults):
    x = torch.empty(4096, device="npu")
    assert torch.npu.memory_allocated() >= x.nbytes
    assert torch.npu.memory_stats()["allocated_bytes.all.current"] >= x.nbytes
    faults(["memory_stats_zero"])
    assert torch.npu.memory_allocated() == 0 and torch.npu.memory_reserved() == 0
    stats = torch.npu.memory_stats()
    assert stats and all(v == 0 for v in stats.values()), stats
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

# copies go to the current stream: a copy_ with the side stream current waits for its fill
echo_npu.set_delay("kernel", 100, "side")
src = torch.zeros(N, device="npu")
torch.npu.synchronize()
with torch.npu.stream(side):
    src.fill_(7.0)
    cp = torch.empty_like(src)
    cp.copy_(src)
torch.npu.synchronize()
check("copy_on_current_stream", cp[0].item() == 7.0)
echo_npu.clear_delays()

# a side stream's synchronize covers its kernels; the device's covers every stream
echo_npu.set_delay("kernel", 80)
with torch.npu.stream(side):
    q = x * 5
side.synchronize()
check("side_sync_covers_kernel", torch.equal(q.cpu(), torch.arange(N, dtype=torch.float32) * 5))
with torch.npu.stream(side):
    q = x * 7
torch.npu.synchronize()
check("device_sync_waits_every_stream", side.query())
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
    "copy_on_current_stream": 1,
    "side_sync_covers_kernel": 1,
    "device_sync_waits_every_stream": 1,
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
    "fault, wrong, racy",
    [
        ("nonblocking_d2h_unfenced", {"nonblocking_d2h_after_event"}, set()),
        ("event_sync_early", {"nonblocking_d2h_after_event", "elapsed_time"}, set()),
        ("record_stream_ignored", {"record_stream"}, set()),
        ("set_stream_ignored", {"work_on_side"}, set()),
        # wait_stream's `src * 2` copies its scalar operand on the default stream, behind that
        # stream's delayed kernel, a race with the side stream's read
        ("copy_on_default_stream", {"copy_on_current_stream"}, {"wait_stream"}),
        # the side stream's kernels run on a queue of their own: its copies pass them by; its
        # query() right after the launch sees only the marker that orders that queue, and an
        # undelayed kernel there races a read after side.synchronize() (wait_stream)
        (
            "side_stream_early",
            {"side_sync_covers_kernel", "copy_on_current_stream"},
            {"work_on_side", "wait_stream"},
        ),
        # the copy on the side stream is still queued when torch.npu.synchronize() returns
        (
            "sync_current_stream_only",
            {"device_sync_waits_every_stream", "copy_on_current_stream"},
            set(),
        ),
    ],
)
@needs_event
def test_async_faults(run_py, clean, fault, wrong, racy):
    got = _results(run_py, ECHO_NPU_FAULTS=fault)
    differ = {k for k, v in got.items() if v != clean[k]}
    assert differ - racy == wrong, (differ, got)


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
    for bad in (
        "kernel:2",
        "gpu:2ms",
        "other.kernel:1ms",
        "kernel:-1ms",
        "kernel",
        "kernel:infms",
        "kernel:nanus",
    ):
        monkeypatch.setenv("ECHO_NPU_DELAY", bad)
        with pytest.raises(ValueError, match=f"invalid ECHO_NPU_DELAY item '{bad}'"):
            _env.delays(True)
    assert npu._C.delay_kind_count() == len(_env.DELAY_KINDS)  # the runtime's kinds, named once
    with pytest.raises(ValueError, match="valid kinds: kernel, h2d, d2h, d2d"):
        npu.set_delay("gpu", 1)
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


# ---- asynchronous mode: races the review found (one interpreter each, a few seconds) ----------

FORK_WHILE_QUEUEING = r"""
import ctypes, os, threading, time, torch, echo_npu
x = torch.zeros(4, device="npu")
x.add_(0).cpu()  # warm up: the first call of an op is slow on the host
echo_npu.set_delay("kernel", 1)
stop = False
def queue():  # keeps queuing while the fork handler drains (it releases the GIL)
    for _ in range(2000):
        if stop:
            break
        x.add_(1)
        time.sleep(0.0002)
t = threading.Thread(target=queue)
t.start()
time.sleep(0.1)
pid = os.fork()
if pid == 0:
    before = ctypes.c_float.from_address(x.data_ptr()).value  # the child's memory, no stream
    got = (x + 0)[0].item()  # the child's own work only: the parent's queued add_ must not run
    os._exit(0 if got == before and torch.npu.current_stream().query() else 3)
stop = True
t.join()
_, status = os.waitpid(pid, 0)
print("CHILD", os.waitstatus_to_exitcode(status))
"""


def test_async_fork_while_another_thread_queues(run_py):
    """Work queued after the fork handler's drain is not run by the child."""
    r = run_py(FORK_WHILE_QUEUEING, ECHO_NPU_ASYNC="1", timeout=60)
    assert "CHILD 0" in r.stdout, (r.stdout, r.stderr[-2000:])


PEER_COPY = r"""
import torch, echo_npu
x = torch.ones(1 << 12, device="npu:0")
x.to("npu:1").cpu(), x.mul_(1).cpu()  # warm up: the first call of an op is slow on the host
echo_npu.set_delay("d2d", 200, torch.npu.default_stream(1))
y = x.to("npu:1")  # queued on npu:1's stream, reads x 200 ms from now
x.mul_(7)          # npu:0's stream: must wait for the copy
print("PEER", y.cpu()[0].item(), x.cpu()[0].item())
"""


def test_async_peer_copy_orders_the_source_stream(run_py):
    r = run_py(PEER_COPY, ECHO_NPU_ASYNC="1", timeout=60)
    assert "PEER 1.0 7.0" in r.stdout, (r.stdout, r.stderr[-2000:])


QUEUED_ERRORS = r"""
import torch, echo_npu
x = torch.ones(4, device="npu")
side = torch.Stream(device="npu")
echo_npu._C.queue_failing_work("first failure")
with torch.npu.stream(side):
    echo_npu._C.queue_failing_work("second failure")
y = x + 1  # an op: in guard mode it waits for the queued work before its red-zone check
echo_npu.check_memory()
for _ in range(3):
    try:
        torch.npu.synchronize()
        print("SYNC ok")
    except RuntimeError as e:
        print("SYNC", repr(str(e)))
"""


def test_async_errors_surface_at_the_next_synchronize(run_py):
    """Errors of queued work survive the drains of guard mode and check_memory, each is reported
    once (one per synchronisation), as one line without a C++ backtrace."""
    r = run_py(QUEUED_ERRORS, ECHO_NPU_ASYNC="1", ECHO_NPU_ALLOCATOR="guard", timeout=60)
    lines = [x for x in r.stdout.splitlines() if x.startswith("SYNC")]
    assert len(lines) == 3 and lines[2] == "SYNC ok", (r.stdout, r.stderr[-2000:])
    assert "first failure" in lines[0] and "second failure" in lines[1], lines
    assert all("\\n" not in x and "Exception raised from" not in x for x in lines), lines


CACHE_RELEASE_RACE = r"""
import threading, time, torch, echo_npu
N = 16 << 20  # 64 MiB: malloc maps it, so a freed block is unmapped at once
echo_npu.set_delay("kernel", 300)
w = torch.empty(N, device="npu") * 2  # keeps the stream busy for 300 ms
t = threading.Thread(target=torch.npu.empty_cache)  # waits for w, then releases the cache
t.start()
time.sleep(0.05)
a = torch.empty(N, device="npu")
b = a * 2  # queued after w: reads a 600 ms from now
del a      # cached while b's work is queued: empty_cache must not release it
t.join()
torch.npu.synchronize()
print("OK", torch.npu.memory_reserved() >= 4 * N)
"""


def test_async_empty_cache_keeps_blocks_queued_work_uses(run_py):
    r = run_py(CACHE_RELEASE_RACE, ECHO_NPU_ASYNC="1", timeout=60)
    assert r.returncode == 0 and "OK" in r.stdout, (r.returncode, r.stdout, r.stderr[-2000:])


STATS_RACE = r"""
import threading, torch, echo_npu
base = torch.npu.memory_allocated()
def churn():
    for _ in range(4000):
        t = torch.empty(256, device="npu")
        del t
threads = [threading.Thread(target=churn) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
torch.npu.synchronize()
print("ALLOCATED", torch.npu.memory_allocated() - base)
"""


def test_async_memory_stats_after_concurrent_free_and_alloc(run_py):
    r = run_py(STATS_RACE, ECHO_NPU_ASYNC="1", timeout=60)
    assert "ALLOCATED 0" in r.stdout, (r.stdout, r.stderr[-2000:])


GIL_WAIT = r"""
import torch, echo_npu
echo_npu.set_delay("h2d", 200)
d = torch.empty(1024, device="npu")
h = torch.ones(1024).pin_memory()
d.copy_(h, non_blocking=True)  # the queued copy holds h itself
del h                          # its Python object now lives as long as the copy's capture
echo_npu.check_memory()        # waits for the copy: must not hold the GIL a worker could need
x = torch.empty(300 << 18, device="npu")
del x                          # past the cache's limit: no waiting in a deleter
print("TRIM", torch.npu.memory_reserved() > (256 << 20))
y = torch.empty(4, device="npu")  # the next allocation trims
print("DONE", d[0].item(), torch.npu.memory_reserved() < (256 << 20))
"""


def test_async_host_waits_do_not_hold_the_gil_a_worker_needs(run_py):
    r = run_py(GIL_WAIT, ECHO_NPU_ASYNC="1", timeout=60)
    assert "TRIM True" in r.stdout and "DONE 1.0 True" in r.stdout, (r.stdout, r.stderr[-2000:])

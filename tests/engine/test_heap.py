"""The suite's heap red zones (engine/heap.py, heap_zones.c), in a fresh interpreter each (the
layer rewrites echo_npu's GOT for the life of the process): a write past a block's end is seen
at its free, a write into a freed block and a second free in the quarantine; only the backend's
own libraries are watched; a pointer the layer does not know passes through untouched."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PRELUDE = """
import ctypes, sys, torch, echo_npu
from conformance.engine import heap
zones, how = heap.watch(echo_npu, "auto", sys.argv[1])
assert zones is not None, how
libc = ctypes.CDLL(None)
"""


def _run(tmp_path, body: str) -> str:
    code = PRELUDE + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_write_past_the_end_is_seen_at_free_with_its_size(tmp_path):
    out = _run(tmp_path, """
        t = torch.empty(100, dtype=torch.uint8, device="npu")
        ctypes.memset(t.data_ptr() + 100, 0x5A, 16)
        print("live", zones.check())  # live blocks are read at their free only
        del t
        (e,) = zones.check()
        print(e.kind, e.size, e.bad, e.first, e.when)
        print(e.describe())
    """)  # fmt: skip
    assert "live []" in out
    assert "overflow 100 16 0 at free" in out
    assert "16 byte(s) written past the end of a heap block of 100 bytes allocated by _C" in out


def test_a_write_into_a_freed_block_and_a_second_free_are_seen(tmp_path):
    out = _run(tmp_path, """
        t = torch.empty(64, dtype=torch.uint8, device="npu")
        p = t.data_ptr()
        del t
        ctypes.memset(p + 8, 0x11, 4)
        (e,) = zones.check()
        print(e.kind, e.size, e.bad, e.first)
        print(zones.check())  # reported once
    """)  # fmt: skip
    assert "use-after-free 64 4 8" in out and "\n[]" in out


def test_only_the_backend_s_own_libraries_are_watched(tmp_path):
    out = _run(tmp_path, """
        print(how)
        print([p.rsplit("/", 1)[-1] for p in zones.watched])
        before = zones.stats()
        x = torch.empty(1 << 16)  # torch's CPU allocator: not watched
        after = zones.stats()
        print("cpu", after[0] - before[0])
        y = torch.empty(1 << 16, device="npu")
        print("npu", zones.stats()[0] - after[0], zones.stats()[3] >= 1 << 18)
        import types
        print(heap.libraries(types.ModuleType("pure_python"), []))
    """)  # fmt: skip
    assert "allocation imports rewritten in _C." in out
    assert "cpu 0" in out and "True" in out.split("npu ")[1]  # the device allocated through it
    assert out.strip().endswith("[]")


def test_off_and_unknown_pointers(tmp_path):
    out = _run(tmp_path, """
        print(heap.watch(echo_npu, "off", sys.argv[1]))
        libc.malloc.restype = ctypes.c_void_p
        libc.free.argtypes = [ctypes.c_void_p]
        hz = zones.lib
        hz.hz_check()
        q = libc.malloc(32)  # not through the watched library: the layer never sees it
        libc.free(q)
        print("clean", zones.check())
    """)  # fmt: skip
    assert "(None, 'off (--heap-zones off)')" in out and "clean []" in out

"""Red zones for a backend's heap blocks, whatever its allocator (the C side: heap_zones.c).

A backend whose device memory comes from the C allocator (malloc, posix_memalign, aligned_alloc,
operator new) has no red zones unless it writes them (echo_npu's guard mode does, behind the
optional `check_memory` hook). A kernel that writes past the end of its output then smashes
malloc's metadata of the next chunk, and glibc notices later, in another op, or never (issue 48:
a relu 64 bytes past the end passed a serial run). This module builds `heap_zones.c` once per
machine with the C compiler into the suite's cache, loads it and rewrites the allocation
imports of the backend's own shared objects (`libraries`: those under its package's folder, and
any the user names with --heap-zones), so that each block they allocate carries a red zone
after its end and each block they free waits in a quarantine filled with a pattern. `HeapZones`
checks both after every sample (engine/memory.py): an overflow, a write into a freed block and
a double free fail the case whose sample made them, naming the block's size, the bytes written
and the library that allocated it.

Where the device's memory goes through those libraries is measured by the device probe
(engine/device_probe.py: a 1 KiB tensor allocated through them, or not), and the run header says it.
The first installation happens in the probe's own process, so a layer that cannot patch a
library crashes the probe, never a case.

The `free` and `realloc` imports of every other library are rewritten as well (`observe`,
again before each case for libraries loaded since): a block of the backend's that torch or
another library frees is checked there, and its entry cannot go stale. A stale entry whose
address another library reused for a larger block read that block's bytes as an overflow of
the backend's block when the reused block was freed through the backend's library (a false
`memory` failure, seen once in 13,000 cases with echo_npu's stream worker threads).
"""

from __future__ import annotations

import contextlib
import ctypes
import fnmatch
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

from conformance.processes import launch

PAD = 256  # bytes of red zone after each block (heap_zones.c's PAD)
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "heap_zones.c")
# -fexceptions: the real operator new may throw through the layer's hook
FLAGS = ("-O2", "-fexceptions", "-shared", "-fPIC")
# the user's --heap-zones text: "auto" (the backend's package), "off", or extra library globs
AUTO, OFF = "auto", "off"


class HeapUnavailable(Exception):
    """The layer cannot be built or loaded here (no C compiler, another architecture)."""


@dataclass(frozen=True)
class HeapError:
    """One finding of the layer."""

    kind: str  # "overflow", "use-after-free", "double-free"
    size: int  # the block's size in bytes
    first: int  # the first bad byte (past the block's end, or from its start)
    bad: int  # bytes that differ from the fill
    when: str  # "at free", "at check", "evicted"
    library: str  # the shared object whose call allocated the block

    def describe(self) -> str:
        lib = os.path.basename(self.library)
        if self.kind == "overflow":
            return (
                f"{self.bad} byte(s) written past the end of a heap block of {self.size} bytes "
                f"allocated by {lib} (the suite's red zone; the first at +{self.first} past the "
                "end)"
            )
        if self.kind == "use-after-free":
            return (
                f"{self.bad} byte(s) written into a freed heap block of {self.size} bytes "
                f"allocated by {lib} (use after free; the first at offset {self.first})"
            )
        return f"a heap block of {self.size} bytes allocated by {lib} freed twice"


def build(cache_dir: str) -> str:
    """The layer's shared object, compiled once per source and compiler into `cache_dir`."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise HeapUnavailable("no C compiler (cc) to build the suite's heap layer")
    with open(SOURCE, "rb") as f:
        source = f.read()
    built_with = " ".join((compiler, *FLAGS, sys.platform)).encode()
    key = hashlib.sha1(source + built_with).hexdigest()[:12]
    os.makedirs(cache_dir, exist_ok=True)
    path = os.path.join(cache_dir, f"heap_zones-{key}.so")
    if os.path.exists(path):
        return path
    tmp = f"{path}.{os.getpid()}.tmp"
    cmd = [compiler, *FLAGS, "-o", tmp, SOURCE, "-ldl", "-lpthread"]
    try:
        done = launch.tool(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HeapUnavailable(f"building the heap layer failed: {exc}") from None
    if done.returncode:
        first = (done.stderr.strip().splitlines() or ["?"])[0]
        raise HeapUnavailable(f"building the heap layer with {compiler} failed: {first}")
    os.replace(tmp, path)
    return path


def mapped_libraries() -> list[str]:
    """The shared objects mapped into this process (from /proc/self/maps)."""
    found: dict[str, None] = {}
    with contextlib.suppress(OSError), open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and ".so" in os.path.basename(parts[5].strip()):
                found[parts[5].strip()] = None
    return list(found)


def libraries(module: object, extra: list[str]) -> list[str]:
    """The backend's own shared objects: those under its top-level package's folder (and a
    wheel's `<package>.libs` folder beside it), and those matching the `extra` globs."""
    name = getattr(module, "__name__", "").split(".")[0]
    top = sys.modules.get(name, module)
    where = getattr(top, "__file__", None)
    roots: list[str] = []
    if where:
        folder = os.path.dirname(os.path.realpath(where))
        if os.path.basename(where).startswith("__init__."):
            roots = [
                folder + os.sep,
                os.path.join(os.path.dirname(folder), f"{name}.libs") + os.sep,
            ]
    out = []
    for path in mapped_libraries():
        real = os.path.realpath(path)
        if any(real.startswith(r) for r in roots) or any(fnmatch.fnmatch(real, g) for g in extra):
            out.append(path)
    return out


class HeapZones:
    """The layer loaded into this process, and the libraries it watches."""

    def __init__(self, path: str) -> None:
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as exc:
            raise HeapUnavailable(f"loading the heap layer failed: {exc}") from None
        self.lib.hz_install.argtypes = [ctypes.c_char_p]
        self.lib.hz_error_at.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        self.lib.hz_stats.argtypes = [ctypes.POINTER(ctypes.c_ulonglong)]
        self.watched: dict[str, int] = {}  # library -> GOT entries rewritten
        self.observed = 0  # other libraries whose frees are seen

    def install(self, paths: list[str]) -> dict[str, int]:
        """Rewrite the allocation imports of each library (once): {library: entries}."""
        for path in paths:
            if path not in self.watched:
                self.watched[path] = int(self.lib.hz_install(path.encode()))
        return {p: n for p, n in self.watched.items() if n > 0}

    def observe(self) -> int:
        """Rewrite the `free`/`realloc` imports of every library loaded since the last call
        and not watched (cheap when none was): the number of libraries observed in all."""
        self.observed += max(0, int(self.lib.hz_observe_others()))
        return self.observed

    def stats(self) -> tuple[int, int, int, int]:
        """(allocations, frees, live blocks, largest malloc'd block) through the layer."""
        out = (ctypes.c_ulonglong * 4)()
        self.lib.hz_stats(out)
        return int(out[0]), int(out[1]), int(out[2]), int(out[3])

    def check(self) -> list[HeapError]:
        """Every error since the last check (red zones of live blocks, the quarantine)."""
        count = int(self.lib.hz_check())
        found = []
        buf = ctypes.create_string_buffer(512) if count else None  # most checks find nothing
        for i in range(count):
            if self.lib.hz_error_at(i, buf, len(buf)) == 0:
                kind, size, first, bad, when, library = buf.value.decode().split("|", 5)
                found.append(HeapError(kind, int(size), int(first), int(bad), when, library))
        self.lib.hz_clear()
        return found

    def clear(self) -> None:
        """Before a case: what was found before it is not its own; libraries loaded since the
        last case get observed."""
        self.check()
        self.observe()


def watch(module: object, setting: str, cache_dir: str | None) -> tuple[HeapZones | None, str]:
    """The layer installed for the backend `module` in this process, per --heap-zones
    `setting`, and how it went (for the probe's report): (None, why) where it is off or
    unavailable, or where the backend has no library of its own to watch."""
    if setting == OFF:
        return None, "off (--heap-zones off)"
    if setting == AUTO and getattr(module, "__name__", "").split(".")[0] == "torch":
        return None, "the device's kernels and allocator are torch's own (an in-tree device)"
    extra = [] if setting == AUTO else [g.strip() for g in setting.split(",") if g.strip()]
    paths = libraries(module, extra)
    if not paths:
        return None, "no shared object of the backend's own to watch (--heap-zones GLOB names one)"
    try:
        zones = HeapZones(build(cache_dir or os.path.join(os.path.expanduser("~"), ".cache")))
    except HeapUnavailable as exc:
        return None, f"unavailable: {exc}"
    installed = zones.install(paths)
    if not installed:
        return None, f"no allocation import to rewrite in {', '.join(map(os.path.basename, paths))}"
    names = ", ".join(f"{os.path.basename(p)} ({n})" for p, n in installed.items())
    others = zones.observe()
    return zones, (
        f"allocation imports rewritten in {names}; frees of {others} other libraries "
        "observed (a block of the backend's freed there is checked too)"
    )

"""Which memory checkers a process can be started under: the runtime libraries to preload.

A checker that replaces or wraps malloc must be in place before the process starts, so it is
preloaded (``LD_PRELOAD``): gcc's ASan runtime for an ASan-built backend, glibc's malloc debugging
library for ``MALLOC_CHECK_=3``. :mod:`conformance.ci.launch` starts commands under them; the
harness re-runs a crashed case under the malloc checker to name the culprit.
"""

from __future__ import annotations

import glob
import os
import subprocess

from conformance.processes import launch

__all__ = ["MALLOC_DEBUG_GLOBS", "LaunchError", "asan_runtime", "malloc_debug_library"]

MALLOC_DEBUG_GLOBS = (
    "/lib/*-linux-gnu/libc_malloc_debug.so.0",
    "/usr/lib/*-linux-gnu/libc_malloc_debug.so.0",
    "/lib64/libc_malloc_debug.so.0",
)


class LaunchError(Exception):
    """A missing runtime library: one line naming the fix."""


def _gcc_library(name: str) -> str:
    try:
        path = launch.tool(
            ["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        path = ""
    if not path or not os.path.isabs(path) or not os.path.exists(path):
        raise LaunchError(f"--asan: gcc's {name} not found; install gcc (with libasan) first")
    return os.path.realpath(path)


def asan_runtime() -> list[str]:
    """The ASan runtime, then libstdc++: a stock python does not link libstdc++, and without it
    preloaded ASan's __cxa_throw interceptor aborts at the first C++ exception."""
    return [_gcc_library("libasan.so"), _gcc_library("libstdc++.so.6")]


def malloc_debug_library() -> str:
    """glibc's malloc debugging library (glibc >= 2.34); :class:`LaunchError` where absent."""
    for pattern in MALLOC_DEBUG_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    raise LaunchError("--malloc-check: libc_malloc_debug.so.0 not found (glibc >= 2.34 ships it)")

"""The checker launcher's environments (ci/launch.py), and a run under ASan."""

import json
import subprocess
import sys

import pytest

from conformance.ci import launch
from tests.helpers import REPO, clean_env


def test_launch_environments(monkeypatch):
    monkeypatch.setattr(launch, "asan_runtime", lambda: ["/x/libasan.so", "/x/libstdc++.so.6"])
    monkeypatch.setattr(launch, "malloc_debug_library", lambda: "/y/libc_malloc_debug.so.0")
    env = launch.environment(True, True, {"LD_PRELOAD": "/z/other.so", "ASAN_OPTIONS": "a=1"})
    assert env["LD_PRELOAD"] == (
        "/x/libasan.so:/x/libstdc++.so.6:/z/other.so:/y/libc_malloc_debug.so.0"
    )
    assert env["ASAN_OPTIONS"] == "a=1:detect_leaks=0"
    assert env["MALLOC_CHECK_"] == "3"


def test_launch_finds_the_real_libraries_here():
    asan, stdcpp = launch.asan_runtime()
    assert "libasan" in asan and "libstdc++" in stdcpp
    assert launch.malloc_debug_library().endswith("libc_malloc_debug.so.0")


def test_launch_without_command_is_a_usage_error():
    with pytest.raises(SystemExit) as info:
        launch.main([])
    assert info.value.code == 2


def test_the_suite_runs_under_asan_with_its_heap_red_zones(tmp_path):
    """`ci.launch --asan` (the README's command) with the heap red zones on: the device probe
    and the cases run. The layer enlarged operator new's blocks by its red zone and freed other
    libraries' strings with free, which ASan aborts on (new-delete size and alloc-dealloc
    mismatches): under ASan it leaves C++ objects to ASan."""
    cmd = [sys.executable, "-m", "conformance.ci.launch", "--asan", "--", sys.executable, "-m"]
    cmd += ["pytest", "conformance", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]
    cmd += ["--ops", "relu,masked_fill_.Scalar", "--dtypes", "float32", "--modes", "none"]
    cmd += ["--results", str(tmp_path / "results")]
    done = subprocess.run(
        cmd, cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=600
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "0 failing cases" in out, out[-3000:]
    run = json.loads((tmp_path / "results" / "run.json").read_text())
    heap = [line for line in run["header"] if line.startswith("device profile: heap_zones: yes")]
    assert heap, run["header"]

"""The checker launcher's environments (ci/launch.py)."""

import pytest

from conformance.ci import launch


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

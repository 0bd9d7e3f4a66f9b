"""echo_npu switched to behave like backends nobody on this project wrote: the suite runs with no
extra option, no case fails because of the harness, and a planted fault still fails the right
case with the right check (docs/BACKEND_PROTOCOL.md, "What the suite uses ...").

Switches (backend/echo_npu/_env.py): ECHO_NPU_REFUSE_FORK, ECHO_NPU_NO_FALLBACK, ECHO_NPU_NO_HOOKS,
the `torch.backends` entry point (`python -m echo_npu.autoload DIR`), fault `accelerator_leak`.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import clean_env

REPO = Path(__file__).resolve().parents[2]
BACKENDS = str(REPO / "tests" / "backends")
LEAK_AND_CRASH = [
    "--ops", "mul.Tensor,sum.dim_IntList", "--dtypes", "float32",
    "--layouts", "contiguous,zero_size",
]  # fmt: skip


def header(run) -> str:
    return "\n".join(run.info["header"])


def harness_failures(run) -> list[dict]:
    return [r for r in run.results if r["status"] == "error" or r["check"] == "harness"]


def assert_leak_and_crash_caught(run, leak_text: str) -> None:
    """mul.Tensor's leak fails its case with `leak`; sum's segfault costs exactly one case."""
    assert not harness_failures(run), harness_failures(run)
    leak = run.case("mul.Tensor-float32-contiguous-native")
    assert leak["status"] == "failed" and leak["check"] == "leak", leak
    assert leak_text in leak["message"]
    crashed = [r["id"] for r in run.results if r["status"] == "crashed"]
    assert crashed == ["test_matches_cpu[sum.dim_IntList-float32-zero_size-native]"], crashed
    assert run.case("sum.dim_IntList-float32-contiguous-native")["status"] == "passed"


def test_fork_refusing_device_untouched_by_the_parent_runs_in_forked_children(run_suite):
    run = run_suite(
        *LEAK_AND_CRASH,
        env={"ECHO_NPU_REFUSE_FORK": "1", "ECHO_NPU_FAULTS": "leak,segfault_empty"},
    )
    # forked: one per core side by side without -n (--runners auto)
    assert "processes at a time, a child forked by the runner zygote" in header(run)
    assert_leak_and_crash_caught(run, "allocated by mul.Tensor")


def test_device_initialised_before_forking_switches_to_spawned_runners(run_suite):
    """A backend that initialises its device at import (tests/backends/eager_backend.py) and
    refuses forked children: cases run in fresh interpreters, and the header says why."""
    env = {
        "ECHO_NPU_REFUSE_FORK": "1",
        "ECHO_NPU_FAULTS": "leak,segfault_empty",
        "PYTHONPATH": BACKENDS,
    }
    run = run_suite("--backend", "eager_backend", *LEAK_AND_CRASH, env=env)
    text = header(run)
    assert "isolation: running its cases in a runner process, a fresh interpreter spawned" in text
    assert "torch.npu.is_initialized() is True before any case ran" in text
    assert_leak_and_crash_caught(run, "allocated by mul.Tensor")
    assert "ECHO_NPU_REFUSE_FORK=1" in run.case("mul.Tensor-float32-contiguous-native")["repro"]


def test_forced_fork_on_an_initialised_device_is_one_line(run_suite):
    env = {"ECHO_NPU_REFUSE_FORK": "1", "PYTHONPATH": BACKENDS}
    run = run_suite("--backend", "eager_backend", "--ops", "abs", "--isolate", "fork", env=env)
    assert run.returncode == 4 and "Traceback" not in run.output
    assert "--isolate fork: torch.npu.is_initialized() is True" in run.output
    assert "use --isolate auto or spawn" in run.output


@pytest.fixture
def autoload(tmp_path) -> str:
    """A folder that, on PYTHONPATH, makes `import torch` import echo_npu (entry point)."""
    folder = tmp_path / "autoload"
    subprocess.run(
        [sys.executable, "-m", "echo_npu.autoload", str(folder)], check=True, env=clean_env()
    )
    return str(folder)


def test_backend_registered_by_import_torch_is_used_without_backend(run_suite, autoload):
    run = run_suite(
        *LEAK_AND_CRASH,
        env={"PYTHONPATH": autoload, "ECHO_NPU_FAULTS": "leak,segfault_empty"},
    )
    assert re.search(
        r"backend echo_npu \(registered by import torch \(torch.backends entry point "
        r"'echo_npu = echo_npu:_autoload'\)",
        header(run),
    ), header(run)
    assert_leak_and_crash_caught(run, "allocated by mul.Tensor")
    assert "--backend" not in run.case("mul.Tensor-float32-contiguous-native")["repro"]


def test_another_backend_next_to_an_autoloaded_one_is_one_line_never_an_abort(run_suite, autoload):
    run = run_suite(
        "--backend", "hang_backend", "--ops", "abs",
        env={"PYTHONPATH": f"{autoload}:{BACKENDS}"},
    )  # fmt: skip
    assert run.returncode == 4, run.output  # a usage error, not SIGABRT (134)
    assert "Traceback" not in run.output and "registered once" not in run.output
    assert (
        "--backend hang_backend: import torch already registered the PrivateUse1 backend 'npu' "
        "(module echo_npu" in run.output
    )
    assert "set TORCH_DEVICE_BACKEND_AUTOLOAD=0 to test hang_backend" in run.output


def test_autoload_off_imports_the_backend_itself(run_suite, autoload):
    env = {"PYTHONPATH": autoload, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    run = run_suite("--ops", "abs", "--dtypes", "float32", "--layouts", "contiguous", env=env)
    assert run.returncode == 0, run.output
    assert "backend echo_npu (imported;" in header(run)
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in run.results[0]["repro"]


def test_no_boxed_fallback(run_suite):
    env = {"ECHO_NPU_NO_FALLBACK": "1", "ECHO_NPU_FAULTS": "leak,segfault_empty"}
    run = run_suite(*LEAK_AND_CRASH, env=env)
    assert "coverage: no boxed fallback: aten overloads without a kernel are unsupported" in (
        header(run)
    )
    assert_leak_and_crash_caught(run, "allocated by mul.Tensor")
    usage = run_suite("--fallback-ops", "nonzero", env={"ECHO_NPU_NO_FALLBACK": "1"})
    assert usage.returncode == 4 and "registered no boxed fallback" in usage.output


def test_no_protocol_hooks_standard_apis_only(run_suite):
    env = {"ECHO_NPU_NO_HOOKS": "1", "ECHO_NPU_FAULTS": "accelerator_leak,segfault_empty"}
    run = run_suite(*LEAK_AND_CRASH, env=env)
    text = header(run)
    assert "backend hooks: none" in text
    assert "red zones: unavailable, backend has no check_memory" in text
    assert "leaks: torch.accelerator.memory_allocated();" in text
    assert "registered overloads run natively only (backend has no set_fallback_routes)" in text
    assert {r["path"] for r in run.results} == {"native"}
    assert_leak_and_crash_caught(run, "torch.accelerator.memory_allocated() went from")


def test_leak_seen_only_by_the_standard_statistics(run_suite):
    """accelerator_leak hides from live_blocks (the hook) but not from torch.accelerator."""
    run = run_suite(*LEAK_AND_CRASH, env={"ECHO_NPU_FAULTS": "accelerator_leak,segfault_empty"})
    assert "leaks: torch.accelerator.memory_allocated() + live_blocks" in header(run)
    assert_leak_and_crash_caught(run, "bytes of device memory allocated during mul.Tensor")

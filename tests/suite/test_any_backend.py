"""A backend unlike echo_npu still gets a verdict: hangs cost one case, registrations without a
schema are listed (never a crash), coverage gaps are named once, repro lines recreate the case.

Properties echo_npu has no switch for are planted by tiny modules in tests/backends/.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BACKENDS = str(REPO / "tests" / "backends")


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["runner-processes", "xdist"])
def test_a_hang_marks_one_case_hung_and_the_run_goes_on(run_suite, xdist):
    args = ["--backend", "hang_backend", "--ops", "abs", "--dtypes", "float32"]
    args += ["--layouts", "contiguous,zero_size,transposed", "--paths", "native"]
    args += ["--values", "ordinary"]
    run = run_suite(*args, "--case-timeout", "5", *xdist, env={"PYTHONPATH": BACKENDS})
    assert run.returncode == 1, run.output
    hung = run.case("abs-float32-zero_size-native")
    assert hung["status"] == "hung" and hung["check"] == "hang", hung
    assert "ran past its time limit of 5 s (--case-timeout)" in hung["message"]
    assert "--case-timeout=5" in hung["repro"] and "--backend=hang_backend" in hung["repro"]
    others = [r for r in run.results if r is not hung]
    assert len(others) == 2 and {r["status"] for r in others} == {"passed"}
    if not xdist:  # the runner's stack names the frame that hung
        assert "hang_backend.py" in hung["message"], hung["message"]


def test_registration_without_schema_is_listed_once_and_never_a_case(run_suite):
    run = run_suite(
        "--backend",
        "schemaless_backend",
        "--ops",
        "abs",
        "--dtypes",
        "float32",
        "--layouts",
        "contiguous",
        env={"PYTHONPATH": BACKENDS},
    )
    assert run.returncode == 0, run.output
    assert "Traceback" not in run.output
    header = "\n".join(run.info["header"])
    assert "no schema, never called, not tested): isfinite.out" in header
    assert run.info["coverage"]["schemaless"] == ["isfinite.out"]
    assert not [r for r in run.results if "isfinite" in r["id"]]


def test_overloads_without_samples_are_named_once_not_skipped_per_case(run_suite):
    lone = "_debug_has_internal_overlap"
    run = run_suite(
        "--backend", "nosamples_backend", "--ops", f"abs,{lone}", "--layouts", "contiguous",
        env={"PYTHONPATH": BACKENDS},
    )  # fmt: skip
    assert run.returncode == 0, run.output
    header = run.info["header"]
    assert any(
        line.startswith("coverage: untested, no samples") and lone in line for line in header
    ), header
    assert any("no samples for some dtypes (not collected): abs (bool)" in ln for ln in header)
    ids = [r["id"] for r in run.results]
    assert not [i for i in ids if lone in i or "abs-bool" in i], ids
    assert not [r for r in run.results if "no samples" in (r.get("message") or "")]
    cov = run.info["coverage"]
    assert cov["tested"] == ["abs"] and lone in cov["untested"]


def _rerun(repro: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONFORMANCE_", "ECHO_NPU_"))}
    return subprocess.run(
        ["bash", "-c", repro.replace("pytest ", f"{shlex.quote(sys.executable)} -m pytest ", 1)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_repro_line_carries_every_option_that_created_the_case(run_suite):
    """A fallback-only case exists only with --fallback-ops; options set through CONFORMANCE_*
    become flags; the repro selects exactly that case and nothing else."""
    run = run_suite(
        "--fallback-ops",
        "nonzero",
        "--ops",
        "abs",
        "--dtypes",
        "float32",
        "--layouts",
        "contiguous",
        "--paths",
        "fallback",
        env={"CONFORMANCE_ISOLATE": "spawn", "CONFORMANCE_CASE_TIMEOUT": "120"},
    )
    assert run.returncode == 0, run.output
    repro = run.case("nonzero-float32-contiguous-fallback")["repro"]
    for flag in (
        "--fallback-ops=nonzero",
        "--isolate=spawn",
        "--case-timeout=120",
        "--dtypes=float32",
        "--layouts=contiguous",
        "--paths=fallback",
    ):
        assert flag in repro, repro
    assert "--ops" not in repro and "CONFORMANCE_" not in repro
    again = _rerun(repro)
    assert again.returncode == 0 and " 1 passed" in again.stdout, again.stdout + again.stderr


def test_repro_script_uses_the_cpu_reference_and_the_suites_read_back(run_suite, tmp_path):
    """_copy_from has no CPU kernel: the script runs the op spec's reference on CPU; device
    results are read back through the whole storage as the suite does, never printed; no dead
    code."""
    repros = tmp_path / "repros"
    args = ["--ops", "_copy_from", "--dtypes", "float32", "--layouts", "contiguous,offset"]
    faulty = {"ECHO_NPU_FAULTS": "copy_ignores_offset"}
    run = run_suite(*args, "--paths", "native", "--repro-dir", str(repros), env=faulty)
    assert run.returncode == 1, run.output
    script = repros / "_copy_from-float32-offset-native.py"
    text = script.read_text()
    assert "spec_for('_copy_from').reference" in text
    assert "if False" not in text and "if True" not in text
    assert 'print("device:", repr(dev_exc) if dev_exc else "returned")' in text

    def replay(extra: dict[str, str]) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ECHO_NPU_")}
        return subprocess.run(
            [sys.executable, str(script)],
            env={**env, **extra},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )

    broken = replay(faulty)
    assert broken.returncode == 1 and "differs" in broken.stdout, broken.stdout + broken.stderr
    fixed = replay({})
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr


def test_set_seed_warning_is_said_once_in_the_header_not_per_test():
    """A device module without manual_seed_all makes torch warn at every torch.manual_seed."""
    from tests.helpers import run_pytest

    proc = run_pytest(
        "conformance/scenarios/test_save_load.py", "--backend", "noseed_backend",
        "--results", "none", "-v", env={"PYTHONPATH": BACKENDS},
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Set seed for" not in out
    assert "seeding: torch.manual_seed does not seed the device (torch.npu lacks" in out


def test_header_says_what_the_fallback_path_cannot_prove(run_suite):
    run = run_suite(
        "--backend", "routes_only_backend", "--ops", "abs", "--dtypes", "float32",
        "--layouts", "contiguous", env={"PYTHONPATH": BACKENDS},
    )  # fmt: skip
    assert run.returncode == 0, run.output
    checks = next(line for line in run.info["header"] if line.startswith("checks: "))
    assert "routing not proven (backend has no fallback_counts)" in checks
    assert "cleared by the first routed case (backend has no get_fallback_routes)" in checks
    assert "leaks: torch.accelerator.memory_allocated();" in checks  # no live_blocks here
    assert {r["path"] for r in run.results} == {"native", "fallback"}


def test_a_runner_dies_with_the_process_that_owns_it(tmp_path):
    """A run killed while a case hangs (SIGKILL: no cleanup runs) must not leave its runner
    computing: on torch_xla one compiled on for 20 minutes after its run was stopped."""
    import contextlib
    import signal
    import time

    from tests.helpers import clean_env

    mark = tmp_path / "hanging"
    args = ["--backend", "hang_backend", "--ops", "abs", "--dtypes", "float32"]
    args += ["--layouts", "zero_size", "--paths", "native", "--values", "ordinary"]
    env = {"PYTHONPATH": os.pathsep.join([BACKENDS, str(REPO)]), "HANG_BACKEND_MARK": str(mark)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "--pyargs", "conformance",
         *args, "--case-timeout", "600", "--results", str(tmp_path / "results")],
        # the repository too: an ablation plugin (tests/meta/ablation.py) may ride on PYTEST_ADDOPTS
        cwd=tmp_path, env=clean_env(env),
        stdout=(tmp_path / "log").open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip

    def descendants() -> list[int]:
        """Every descendant: a forked runner is the runner zygote's child, not pytest's."""
        found, parents = [], [proc.pid]
        while parents:
            out = subprocess.run(
                ["pgrep", "-P", ",".join(map(str, parents))], capture_output=True, text=True
            )
            parents = [int(p) for p in out.stdout.split()]
            found += parents
        return found

    # Wait for the runner to be inside the hanging case (the backend writes its pid), not for
    # any descendant: a probe's short-lived child was one, and had gone by the next look (CI).
    deadline = time.monotonic() + 300
    while not mark.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
    time.sleep(0.5)  # the pid is written
    hanging = int(mark.read_text()) if mark.exists() else None
    children = descendants()
    log = (tmp_path / "log").read_text(errors="replace")[-3000:]
    assert hanging in children, (
        f"no runner inside the hanging case (pid {hanging}, descendants {children}, "
        f"exit status {proc.poll()}): {log}"
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    alive = children
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [p for p in children if os.path.exists(f"/proc/{p}") and _not_zombie(p)]
    for pid in alive:  # a hanging runner left behind would spin on a core for the whole run
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not alive, f"runner(s) {alive} outlived the pytest process that owned them"


def _not_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize(
    "how", [["--isolate", "spawn"], ["-n", "2"]], ids=["spawned-runner", "spawned-zygote"]
)
def test_a_spawned_process_collects_the_cases_its_owner_collected(run_suite, how):
    """bool has no samples of abs.out and abs_: the owner's coverage account makes float32
    their first dtype, the one an -inference case uses. A spawned runner (a device that refuses
    forked children, as CUDA) or zygote (an xdist worker's) skips that account: it chose bool,
    and each such case was a harness error, "the spawned runner did not collect it" (30 cases of
    a torch_xla run). It now collects the op cases its owner names."""
    run = run_suite(
        "--dtypes", "bool,float32", "--modes", "inference", "-k", "abs and inference", *how
    )
    assert run.returncode == 0, run.output
    assert len(run.results) == 4 and {r["status"] for r in run.results} == {"passed"}, run.output

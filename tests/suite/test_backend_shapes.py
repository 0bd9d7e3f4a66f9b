"""A backend of another shape than echo_npu, tried as a new user would (issue 31).

`tests/backends/pyreg_npu`: kernels registered from Python with `torch.library`, the device
registered by a function the user calls, initialised at import (so every case runs in spawned
runners), no `as_strided`, a runtime that sets PYTHONEXECUTABLE to the first `python3` on PATH.
It runs through the README's own-backend recipe: the suite installed, `python -m pytest --pyargs
conformance -n 2` from another folder, `--results` elsewhere, a `python3` on PATH that is not
this interpreter. The run is usable, the missing `as_strided` is one finding and the bugs behind
it are named, accounting and repro lines do not depend on how pytest named the nodes, and the
baseline's next run is green.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import clean_env, once_per_run, write_baseline

# slow: a default run of another backend, reused by each test
# (pyproject.toml: `python -m pytest tests` leaves it out, CI runs it with `-m slow`)
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BACKENDS = str(REPO / "tests" / "backends")
BACKEND = "pyreg_npu:register_devices"
# the kernels with the backend's bugs, one that needs as_strided in every layout, and scenarios:
# one that hits the 0-dim CPU operand bug, one that needs as_strided
SELECTION = (
    "cos or _to_copy or view or empty_permuted or empty_strided or add.Tensor "
    "or test_cpu_scalar_tensor_is_allowed or test_attention_masks"
)


def user_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The backend importable, and a `python3` first on PATH that is another Python."""
    fake = tmp_path / "otherbin"
    fake.mkdir(exist_ok=True)
    python3 = fake / "python3"
    if not python3.exists():
        if os.path.exists("/usr/bin/python3"):
            python3.symlink_to("/usr/bin/python3")
        else:
            python3.write_text("#!/bin/sh\necho 'not the venv python' >&2\nexit 3\n")
            python3.chmod(0o755)
    path = f"{fake}{os.pathsep}{os.environ.get('PATH', '')}"
    return clean_env({"PYTHONPATH": BACKENDS, "PATH": path, **extra})


def pytest_in(folder: Path, *args: str, env: dict[str, str], timeout: int = 600):
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:randomly", *args]
    return subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    """One run of the README's own-backend recipe on pyreg_npu: (process, results folder),
    shared by the xdist workers that run this module's tests."""

    def run(tmp: Path) -> tuple[subprocess.CompletedProcess, Path, Path]:
        results = tmp / "elsewhere" / "results"
        proc = pytest_in(
            tmp / "user",
            "--pyargs", "conformance", "-n", "2", "--backend", BACKEND,
            "-k", SELECTION, "--results", str(results),
            env=user_env(tmp),
        )  # fmt: skip
        return proc, results, tmp

    return once_per_run(tmp_path_factory, "shapes", run)


def findings(results: Path) -> list[dict]:
    return json.loads((results / "run.json").read_text())["findings"]


def test_a_package_that_registers_its_device_through_a_function_is_one_line_away(tmp_path):
    env = user_env(tmp_path)
    bare = pytest_in(tmp_path, "--pyargs", "conformance", "--backend", "pyreg_npu", env=env)
    assert bare.returncode == 4 and "Traceback" not in bare.stdout + bare.stderr
    assert "pass --backend pyreg_npu:register_devices" in bare.stderr, bare.stderr
    wrong = pytest_in(tmp_path, "--pyargs", "conformance", "--backend", "pyreg_npu:nope", env=env)
    assert wrong.returncode == 4 and "Traceback" not in wrong.stderr
    assert "pyreg_npu has no function 'nope'" in wrong.stderr
    assert "register_devices" in wrong.stderr
    device = pytest_in(tmp_path, "--pyargs", "conformance", "--device", "nosuch", env=env)
    assert device.returncode == 4 and "Traceback" not in device.stdout + device.stderr
    assert "--device nosuch: is not a device type torch knows" in device.stderr


def test_the_recipe_runs_every_case_in_reused_spawned_runners(recipe):
    proc, results, _ = recipe
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-3000:]
    info = json.loads((results / "run.json").read_text())
    isolation = next(line for line in info["header"] if line.startswith("isolation:"))
    assert "a fresh interpreter spawned where no clean fork is possible" in isolation
    assert "torch.pyreg.is_initialized() is True before any case ran" in isolation
    accounting = info["accounting"]
    assert accounting["collected"] == accounting["recorded"] > 100 and not accounting["not_run"]
    assert f"{accounting['collected']} collected = {accounting['recorded']} recorded" in out
    assert "No module named" not in out  # no child ran the python3 of PATH
    # a kernel registered from Python for a name the dispatcher has no schema for (aten::floordiv
    # exists only as a TorchScript operator): named as such, not "add an op spec"
    assert info["coverage"]["schemaless"] == ["floordiv"]


def test_the_missing_as_strided_is_one_finding_and_the_bugs_behind_it_are_named(recipe):
    _, results, _ = recipe
    found = findings(results)
    titles = [f["title"] for f in found]
    assert not any("empty_strided is broken" in t for t in titles), titles
    (missing,) = [f for f in found if f["title"].startswith("as_strided has no kernel")]
    assert {"cos", "add.Tensor", "test_attention_masks"} & {o.split(".")[0] for o in missing["ops"]}
    # the real bugs, each a finding of its own
    strides = [f for f in found if f["check"] == "strides"]
    assert strides and {"_to_copy", "empty_permuted"} <= set(strides[0]["ops"])
    assert any(f["check"] == "view" and f["ops"] == ["view"] for f in found), titles
    (cpu_operand,) = [f for f in found if "got a cpu tensor" in f["title"]]
    assert "scenario.test_cpu_scalar_tensor_is_allowed" in cpu_operand["ops"]
    (unsupported,) = [f for f in found if f["kernels"]]
    assert any(k.startswith("cos (") for k in unsupported["kernels"]), unsupported["kernels"]
    # every forward op case ran before any -grad case (the other families come after them)
    # (per worker: which worker gets any -grad case depends on xdist's scheduling)
    grads = 0
    for path in results.glob("cases-*.jsonl"):
        rows = [json.loads(line) for line in path.open()]
        order = [r.get("values") == "grad" for r in rows if r.get("family", "ops") == "ops"]
        assert order == sorted(order), path.name
        grads += sum(order)
    assert grads


def test_printed_repro_lines_run_from_another_folder(recipe):
    _, results, tmp = recipe
    repros = [f["repro"] for f in findings(results)][:1]  # one finding's line, one scenario's
    rows = [json.loads(line) for p in results.glob("cases-*.jsonl") for line in p.open()]
    scenario = [r["repro"] for r in rows if r["path"] == "scenario" and r["status"] == "failed"]
    assert scenario and "None" not in scenario[0]
    for line in [*repros, scenario[0]]:
        assert "--pyargs" in line and "--backend=pyreg_npu:register_devices" in line, line
        cmd = line.replace("pytest ", f"{shlex.quote(sys.executable)} -m pytest ", 1)
        (tmp / "other").mkdir(exist_ok=True)
        proc = subprocess.run(
            ["bash", "-c", cmd],
            cwd=tmp / "other",
            env=user_env(tmp),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 1 and "1 failed" in proc.stdout, (line, proc.stdout[-2000:])


def test_the_baseline_of_that_run_makes_the_next_run_green(recipe):
    _, results, tmp = recipe
    manifest = tmp / "pyreg.toml"
    text = write_baseline(results, manifest)
    assert 'pattern = "scenario:test_cpu_scalar_tensor_is_allowed"' in text or (
        '"scenario:test_cpu_scalar_tensor_is_allowed"' in text
    )
    assert "the device has no kernel for cos where cpu computes" in text
    again = pytest_in(
        tmp / "user",
        "--pyargs", "conformance", "-n", "2", "--backend", BACKEND, "-k", SELECTION,
        "--results", str(tmp / "elsewhere" / "again"), "--expectations", str(manifest),
        env=user_env(tmp),
    )  # fmt: skip
    assert again.returncode == 0, again.stdout[-4000:]
    assert "0 failing cases" in again.stdout


def test_sigterm_records_every_case_that_did_not_run(tmp_path):
    """A CI timeout's SIGTERM ends the run as Ctrl-C does: not-run records for the rest."""
    results = tmp_path / "results"
    cmd = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "conformance", "-n", "2",
        "--modes", "none", "--values", "ordinary", "--dtypes", "float32,int64",
        "--results", str(results),
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        lines = sum(1 for p in results.glob("cases-*.jsonl") for _ in p.open())
        if lines >= 50:
            break
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=120)[0].decode(errors="replace")
    info = json.loads((results / "run.json").read_text())
    accounting = info["accounting"]
    assert accounting["collected"] == accounting["recorded"] and accounting["not_run"] > 0, out
    rows = [json.loads(line) for p in results.glob("cases-*.jsonl") for line in p.open()]
    not_run = [r for r in rows if r["status"] == "not-run"]
    assert not_run and "interrupted (SIGTERM)" in not_run[0]["message"]
    assert re.search(r"\d+ not run \(the run fails\)", out), out[-2000:]


def test_a_worker_that_cannot_load_the_backend_stops_the_run(tmp_path):
    """A backend that fails only in pytest-xdist's workers: xdist would replace them for ever
    (the suite raises --max-worker-restart for crashes); the run stops, naming them."""
    (tmp_path / "worker_fails.py").write_text(
        "import os\n"
        "if os.environ.get('PYTEST_XDIST_WORKER'):\n"
        "    raise RuntimeError('boom in the worker')\n"
        "from echo_npu import *  # noqa: F403\n"
    )
    env = clean_env({"PYTHONPATH": str(tmp_path)})
    args = ["--pyargs", "conformance", "-n", "2", "--backend", "worker_fails", "--ops", "abs"]
    proc = pytest_in(
        tmp_path / "user", *args, "--results", str(tmp_path / "r"), env=env, timeout=120
    )
    assert proc.returncode == 3, proc.stdout[-2000:]
    assert "boom in the worker" in proc.stdout + proc.stderr
    assert "stopped before collecting (the error is above); the run stops" in proc.stdout

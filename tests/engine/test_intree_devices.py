"""A backend whose kernels live under the dispatch key of a device torch names itself (XLA,
HPU, XPU, MTIA) is found, its kernels discovered under that key; a wrong --device is one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BACKENDS = str(Path(__file__).resolve().parents[1] / "backends")
ENV = {**os.environ, "PYTHONPATH": BACKENDS, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **__import__("os").environ,
            "PYTHONPATH": BACKENDS,
            "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
        },
    )


def test_the_one_in_tree_device_an_import_gave_kernels_is_the_device_under_test():
    proc = _run(
        "from conformance.engine.backend import load_backend\n"
        "from conformance.engine import discovery\n"
        "b = load_backend('intree_backend')\n"
        "print(b.device_type, b.dispatch_key, discovery.registered_overloads(b.dispatch_key))\n"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "mtia MTIA ['abs']"


def test_a_device_without_kernels_is_one_line_naming_those_with_them():
    proc = _run(
        "from conformance.engine.backend import load_backend\n"
        "from conformance.errors import ConformanceUsageError\n"
        "try:\n"
        "    load_backend('intree_backend', 'xpu')\n"
        "except ConformanceUsageError as exc:\n"
        "    print(exc)\n"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().startswith(
        "--device xpu: nothing registered kernels under its dispatch key XPU in this process; "
        "devices with kernels of their own key: mtia"
    ), proc.stdout


def test_the_run_reaches_the_device_and_says_it_is_unusable_in_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", "--pyargs", "conformance",
         "--backend", "intree_backend", "--ops", "abs", "--results", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env=ENV,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4 and "Traceback" not in out, out[-3000:]
    assert "registered device 'mtia' but it is not usable" in out, out[-3000:]

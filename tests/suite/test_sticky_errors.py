"""A sticky device error (issue 55, seen on an H200): a CUDA kernel's device-side assert leaves
the process's CUDA context unusable, so every later call fails. On a real GPU one planted
`embedding_bag` assert turned the next 421 cases of that runner into "[harness]" errors.

echo_npu's fault `index_assert_sticky` does the same: `index_select` with a non-contiguous index
returns normally, then every later call of the process fails. The suite must fail that case with
the device's error (not the harness's), replace the runner, and pass every later case.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import clean_env, once_per_run, run_pytest

REPO = Path(__file__).resolve().parents[2]
# index_select's native cases whose index is not contiguous trip it; abs and neg run after them
OPS = "index_select,abs,neg"
TRIPPING = {"noncontiguous", "sliced", "expanded"}  # layouts that leave a 1-d index strided


def _trips(r: dict) -> bool:
    return r["op"] == "index_select" and r["layout"] in TRIPPING and r["path"] == "native"


def _run(tmp_path: Path) -> tuple[subprocess.CompletedProcess, list[dict]]:
    results = tmp_path / "results"
    proc = run_pytest(
        "-p", "no:xdist", "conformance", "--backend", "echo_npu", "--ops", OPS,
        "--fallback-ops", "none", "--dtypes", "float32", "--results", str(results),
        env={"ECHO_NPU_FAULTS": "index_assert_sticky"}, timeout=900,
    )  # fmt: skip
    records = [json.loads(line) for f in sorted(results.glob("cases-*.jsonl")) for line in f.open()]
    return proc, records


@pytest.fixture(scope="module")
def sticky(tmp_path_factory):
    return once_per_run(tmp_path_factory, "sticky", _run)


def test_the_case_that_trips_the_assert_fails_with_the_device_s_error(sticky):
    proc, records = sticky
    assert "INTERNALERROR" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    tripped = [r for r in records if _trips(r)]
    assert {r["layout"] for r in tripped} == TRIPPING, [r["id"] for r in records]
    for r in tripped:
        assert r["status"] == "failed" and r["check"] == "error", r
        assert "device-side assert triggered" in r["message"], r["message"]
        assert "unusable in this process" in r["message"], r["message"]


def test_no_later_case_inherits_it(sticky):
    proc, records = sticky
    others = [r for r in records if not _trips(r) and r["status"] not in ("passed", "skipped")]
    assert not others, [(r["id"], r["status"], r["message"]) for r in others]
    after = [r for r in records if r["op"] in ("abs", "neg") and r["status"] == "passed"]
    assert after, proc.stdout[-3000:]


def test_an_error_that_surfaces_only_at_the_synchronize_is_the_case_s():
    """Work whose results are never read (CPU raised, say) still ends with a synchronize: the
    assert is reported by the case that queued it."""
    code = (
        "from tests.meta import ablation; ablation.apply()\n"  # ABLATE reaches this process too
        "import torch, echo_npu\n"
        "from conformance.engine.backend import load_backend\n"
        "from conformance.engine.runner import _settled\n"
        "b = load_backend('echo_npu')\n"
        "echo_npu.set_faults(['index_assert_sticky'])\n"
        "x = torch.arange(6.0, device='npu')\n"
        "i = torch.tensor([0, 9, 1, 9], device='npu')[::2]\n"
        "torch.index_select(x, 0, i)\n"
        "m = _settled(b, 'index_select')\n"
        "print(m.check, '|', m.message)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    check, _, message = done.stdout.strip().rpartition("\n")[2].partition(" | ")
    assert check == "error", done.stdout
    assert "device-side assert triggered" in message and "at the synchronize" in message

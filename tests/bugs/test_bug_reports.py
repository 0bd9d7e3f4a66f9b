"""`--bug-reports` on a run with two echo_npu faults: two reports whose scripts run alone (a fresh
interpreter in which the suite cannot be imported) and show the divergence, with versions, the
claim, its documentation, since when it fails and the suite's command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.bugs.report import ALONE
from conformance.bugs.script import DIFFERS
from tests.helpers import REPO, clean_env, run_pytest

pytestmark = pytest.mark.slow

FAULTS = "mul_rounds_toward_zero,neg_signed_zero"


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("bugs")
    results = root / "conformance-2.13"
    done = run_pytest("conformance", "--ops", "neg,mul.Tensor", "-n", "0", "--results",
                      str(results), env={"ECHO_NPU_FAULTS": FAULTS})  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:]
    out = root / "reports"
    made = subprocess.run(
        [sys.executable, "-m", "conformance.report", str(results), "--bug-reports", str(out)],
        cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert made.stdout.count("its script shows the divergence") == 2, made.stdout
    return results, out


def _alone(script: Path, faults: str | None) -> subprocess.CompletedProcess:
    env = clean_env({"ECHO_NPU_FAULTS": faults} if faults else None)
    return subprocess.run([sys.executable, "-I", "-c", ALONE, str(script)], cwd=script.parent,
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip


def test_one_report_per_finding_whose_script_shows_the_divergence_alone(reports) -> None:
    results, out = reports
    findings = json.loads((results / "run.json").read_text())["findings"]
    assert len(findings) == 2
    scripts = sorted(out.glob("*.py"))
    assert [p.stem for p in sorted(out.glob("*.md"))] == [p.stem for p in scripts]
    assert {p.stem.split("-")[0] for p in scripts} == {f["id"] for f in findings}
    for script in scripts:
        text = script.read_text()
        assert "conformance" not in text.split('"""', 2)[2].replace("torch-conformance", "")
        faulty = _alone(script, FAULTS)
        assert faulty.returncode == DIFFERS and "differ bit for bit" in faulty.stdout, faulty
        clean = _alone(script, None)  # the divergence is the fault's
        assert clean.returncode == 0 and "the device agrees with cpu" in clean.stdout, clean


def test_a_report_says_what_a_kernel_team_needs(reports) -> None:
    _, out = reports
    (mul,) = out.glob("*-mul-Tensor.md")
    text = mul.read_text()
    docs = "https://docs.pytorch.org/docs/stable/generated/torch.mul.html"
    for part in ("## Versions", "| torch git |", "| backend | echo_npu", "## What is promised",
                 "check `rounding`", docs, "## Since when", "## With the suite",
                 f"ECHO_NPU_FAULTS={FAULTS} pytest"):  # fmt: skip
        assert part in text, part
    # the smallest failing sample: its inputs are written into the script, none beside it
    assert (
        not list(out.glob("*-mul-Tensor.pt"))
        and "torch.tensor([" in (out / f"{mul.stem}.py").read_text()
    )
    assert "element(s) differ bit for bit" in text


def test_since_when_comes_from_the_store(reports, tmp_path) -> None:
    results, _ = reports
    store = tmp_path / "h.db"
    history = [sys.executable, "-m", "conformance.history", "--store", str(store)]
    subprocess.run([*history, "add", str(results)], cwd=REPO, env=clean_env(), check=True)
    out = tmp_path / "reports"
    bugs = [sys.executable, "-m", "conformance.bugs", str(results), "--out", str(out)]
    done = subprocess.run([*bugs, "--store", str(store)], cwd=REPO, env=clean_env(),
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (mul,) = out.glob("*-mul-Tensor.md")
    assert "it fails on every torch in the store" in mul.read_text()

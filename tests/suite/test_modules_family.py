"""The modules family (conformance/modules, docs/MODULES.md) in a run: the header names the
selection; clean echo_npu passes; with the BatchNorm fault the training cases fail with check
`module`, what differed (`state`) and the op that diverged (native_batch_norm), as one finding,
while eval cases pass; a manifest entry `module:<case id>` marks a case (strict xfail); a narrow
`-k` run of op cases reads the cached case list (no module_db import)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import run_pytest

FAMILY = "conformance/modules"
PICKED = "BatchNorm2d and contiguous-0"
NORMS = "Norm and float32 and contiguous-0"  # Batch-, Instance-, Group-, Layer-, RMSNorm


def modules_run(tmp_path: Path, *args: str, env: dict[str, str] | None = None):
    """The family alone: (process, records by case id, run.json)."""
    results = tmp_path / f"results-{len(list(tmp_path.iterdir()))}"
    proc = run_pytest(FAMILY, "--results", str(results), *args, env=env, timeout=600)
    rows = []
    for f in sorted(results.glob("cases-*.jsonl")) if results.exists() else []:
        rows += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    info = json.loads((results / "run.json").read_text()) if results.exists() else {}
    return proc, {r["module_case"]: r for r in rows}, info


def test_clean_run_passes_and_the_header_names_the_selection(tmp_path):
    proc, records, info = modules_run(tmp_path, "-k", PICKED)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "modules: torch's module_db, selection full" in out, out[:3000]
    assert records and {r["status"] for r in records.values()} == {"passed"}, records
    assert {r["family"] for r in records.values()} == {"modules"}
    assert info["accounting"]["collected"] == len(records)


def test_biased_running_var_is_one_finding_naming_the_op(tmp_path):
    proc, records, info = modules_run(
        tmp_path, "-k", NORMS, env={"ECHO_NPU_FAULTS": "bn_running_var_biased"}
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    failed = {c: r for c, r in records.items() if r["status"] == "failed"}
    modules = {r["overload"] for r in failed.values()}
    assert {"nn.BatchNorm1d", "nn.BatchNorm2d", "nn.BatchNorm3d"} <= modules, modules
    assert all("-train-" in c for c in failed), sorted(failed)
    assert all(r["status"] == "passed" for c, r in records.items() if "-eval-" in c)
    assert all(r["status"] == "passed" for r in records.values() if "LayerNorm" in r["overload"])
    for r in failed.values():
        assert r["check"] == "module" and r["differs"] == "state", r
        assert r["diverged"].startswith("aten.native_batch_norm.default: running_var"), r
        first, second = r["message"].splitlines()[:2]
        assert first.startswith("[module] aten.native_batch_norm.default: running_var"), first
        assert second.startswith(f"  in {r['overload']}: running_var after the step"), second
        assert r["repro"].startswith("ECHO_NPU_FAULTS=bn_running_var_biased pytest ")
        assert "conformance/modules/test_modules.py::test_module[" in r["repro"]
        assert (
            r["script"]
            == f"python -m conformance.engine.modules {r['module_case']} --backend echo_npu"
        )
    # one root cause, however many modules it breaks: one finding
    findings = [f for f in info["findings"] if f["count"]]
    assert len(findings) == 1 and findings[0]["count"] == len(failed), findings


def test_a_manifest_entry_marks_a_case(tmp_path):
    case = "nn.BatchNorm2d-float32-train-contiguous-0"
    manifest = tmp_path / "expect.toml"
    manifest.write_text(
        f'[[entry]]\npattern = "module:{case}"\nstatus = "xfail"\n'
        'category = "backend-bug"\nreason = "x"\n'
    )
    proc, records, _ = modules_run(
        tmp_path, "-k", case, "--expectations", str(manifest),
        env={"ECHO_NPU_FAULTS": "bn_running_var_biased"},
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert records[case]["status"] == "xfailed", records[case]
    proc, records, _ = modules_run(tmp_path, "-k", case, "--expectations", str(manifest))
    assert proc.returncode != 0 and records[case]["status"] == "xpassed", records[case]
    assert f"module:{case}" in records[case]["message"]


def test_a_device_error_is_shown_as_python_prints_it(tmp_path):
    """A module case whose device step raises (no kernel: ECHO_NPU_NO_FALLBACK) is shown under
    FAILURES as Python prints the exception, from the test function down, with no frame's
    arguments printed through the backend's ops and no source file parsed (pytest's long style
    did both; on torch_opencl it was most of a run's time: harness/failure_reprs.py). Its
    record's message is the exception's line as before; `--tb=long` gives pytest's own."""
    case = "AdaptiveAvgPool1d and float32 and train and contiguous-0"
    env = {"ECHO_NPU_NO_FALLBACK": "1"}
    proc, records, _ = modules_run(tmp_path, "-k", case, env=env)
    out = proc.stdout
    (record,) = records.values()
    assert record["status"] == "failed", record
    assert "(NotImplementedError: Could not run 'aten::_adaptive_avg_pool2d'" in record["message"]
    shown = out[out.index("= FAILURES =") : out.index("short test summary")]
    assert shown.count("The case raised (most recent call last;") == 1, shown[:3000]
    assert "in test_module\n" in shown and "in run_step\n" in shown, shown[:3000]
    assert "self = " not in shown and "input = tensor(" not in shown, shown[:3000]
    assert "_pytest" not in shown and "Traceback" not in shown, shown[:3000]  # the suite's own
    proc, _, _ = modules_run(tmp_path, "-k", case, "--tb=long", env=env)
    assert "self = " in proc.stdout and "The case raised" not in proc.stdout

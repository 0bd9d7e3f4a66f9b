"""The runtime contract cases (conformance/contract, engine/runtime_contract.py) and the
-asynchronous mode (engine/modes/asynchronous.py) on echo_npu, synchronous and asynchronous
with the delay injector on and hidden (streams held by calibrated work, engine/busy.py), and with
each of the runtime faults; and on pyreg_npu, whose device module declares no streams: one
header line, no failures (issues 46, 57)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.engine.runtime_contract import BY_NAME
from tests.helpers import clean_env, run_pytest

REPO = Path(__file__).resolve().parents[2]
CONTRACT = "conformance/contract"
ASYNC = {"ECHO_NPU_ASYNC": "1", "ECHO_NPU_DELAY": "kernel:1ms,d2h:1ms"}

# each fault of echo_npu's runtime -> the contract items it must fail (at least these)
FAULTS = {
    "nonblocking_d2h_unfenced": {"nonblocking-d2h"},
    "event_sync_early": {"event-synchronize"},
    "record_stream_ignored": {"record-stream"},
    "guard_no_switch": {"device-guard"},
    "set_stream_ignored": {"current-stream", "stream-guard"},
    "pinned_refused": {"pinned-memory"},
    "memory_stats_zero": {"memory-stats"},
    "copy_on_default_stream": {"current-stream"},
    "side_stream_early": {"stream-synchronize"},
    "sync_current_stream_only": {"accelerator-synchronize"},
    "stats_stale": {"memory-stats"},
    "seed_only_restore": {"generator-state"},
}
#: the items that order work across a fence: on a synchronous device they cannot observe it
ORDERING = {
    "current-stream", "stream-synchronize", "accelerator-synchronize", "event-synchronize",
    "event-elapsed-time", "wait-stream", "wait-event", "nonblocking-h2d", "nonblocking-d2h",
    "record-stream",
}  # fmt: skip
#: echo_npu declares no dtypes (get_device_capability raises): said, not judged
DECLARES_NOTHING = {"declared-dtypes"}
HOOKLESS = {"PYTHONPATH": str(REPO / "tests" / "backends")}
HOOKLESS_ARGS = ("--backend", "hookless_backend", "--device", "npu")
RUNS = 10  # runs of each fault's items (tests/suite/contract_faults.py, one process)


def contract_run(tmp_path: Path, *args: str, env: dict[str, str] | None = None):
    """The contract cases alone: (process, records by contract item)."""
    results = tmp_path / f"results-{len(list(tmp_path.iterdir()))}"
    proc = run_pytest(
        CONTRACT, "-p", "no:cacheprovider", "--results", str(results), *args, env=env, timeout=600
    )
    rows = []
    for f in sorted(results.glob("cases-*.jsonl")) if results.exists() else []:
        rows += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return proc, {r["overload"]: r for r in rows}


def test_echo_npu_synchronous_passes_every_item_and_says_what_it_could_not_observe(tmp_path):
    proc, records = contract_run(tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert set(records) == set(BY_NAME), out[-2000:]
    assert {r["status"] for r in records.values()} == {"passed"}, records
    assert "contract: busy streams: the backend's set_delay hook" in out
    unobserved = {name for name, r in records.items() if r.get("not_observable")}
    assert unobserved == ORDERING | DECLARES_NOTHING, unobserved
    for name in ORDERING:
        assert records[name]["message"].startswith(f"[contract {name}] not observable: "), name
        assert "(synchronous)" in records[name]["not_observable"], records[name]
    count = len(ORDERING | DECLARES_NOTHING)
    assert f"contract: {count} item(s) passed without being observed" in out, out[-2000:]


@pytest.mark.parametrize("hook", ["set_delay", "hidden"])
def test_echo_npu_asynchronous_passes_every_item_with_every_fence_observed(tmp_path, hook):
    args, env = ((), ASYNC) if hook == "set_delay" else (HOOKLESS_ARGS, {**ASYNC, **HOOKLESS})
    proc, records = contract_run(tmp_path, *args, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert {r["status"] for r in records.values()} == {"passed"}, records
    unobserved = {name for name, r in records.items() if r.get("not_observable")}
    assert unobserved == DECLARES_NOTHING, records
    held = {r.get("held_by", "")[:28] for name, r in records.items() if name in ORDERING}
    want = "the backend's set_delay hook" if hook == "set_delay" else "calibrated work ("
    assert {h[: len(want)] for h in held} == {want}, held


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_fault_fails_its_contract_item_with_a_record_naming_it(tmp_path, fault):
    selection = " or ".join(BY_NAME[name].test for name in FAULTS[fault])
    proc, records = contract_run(
        tmp_path,
        "-k",
        selection,
        env={**ASYNC, "ECHO_NPU_FAULTS": fault},
    )
    failed = {name for name, r in records.items() if r["status"] == "failed"}
    assert proc.returncode != 0 and failed == FAULTS[fault], (fault, failed, proc.stdout[-3000:])
    for name in FAULTS[fault]:
        record = records[name]
        assert record["check"] == "contract", record
        assert record["message"].startswith(f"[contract {name}]"), record["message"]
        assert record["doc"] == BY_NAME[name].doc, record


@pytest.mark.slow
@pytest.mark.parametrize("hook", ["set_delay", "hidden"])
def test_each_fault_fails_its_items_ten_runs_out_of_ten(hook):
    """Held streams make every race lose, with the delay injector and without it (calibrated
    work): 10 runs of each fault's items, all failing (and every item without a fault, all
    passing with each fence observed)."""
    plan = [f"{fault}={','.join(sorted(names))}" for fault, names in FAULTS.items()]
    hidden = ["--no-hook"] if hook == "hidden" else []
    proc = subprocess.run(
        [sys.executable, "-m", "tests.suite.contract_faults", *hidden, str(RUNS), *plan],
        cwd=REPO, env=clean_env({"ECHO_NPU_ASYNC": "1"}), capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    result = json.loads(line.removeprefix("RESULT "))
    clean = {n: v for n, v in result[""].items() if n not in DECLARES_NOTHING}
    assert {n: v[0] for n, v in clean.items() if v[0] or v[2]} == {}, result[""]
    for fault, names in FAULTS.items():
        got = {name: result[fault][name][:2] for name in names}
        assert got == {name: [RUNS, RUNS] for name in names}, (fault, result[fault])


def test_a_device_without_streams_gets_one_line_not_failures(tmp_path):
    env = {"PYTHONPATH": str(REPO / "tests" / "backends")}
    proc, records = contract_run(tmp_path, "--backend", "pyreg_npu:register_devices", env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    streams = [line for line in out.splitlines() if "contract: streams: none" in line]
    assert len(streams) == 1 and "torch.pyreg has no current_stream()" in streams[0], out[-3000:]
    needing = {name for name, item in BY_NAME.items() if "streams" in item.needs}
    assert f": {len(needing)} cases not applicable" in streams[0]
    assert {records[name]["status"] for name in needing} == {"skipped"}
    assert not [r for r in records.values() if r["status"] == "failed"]


def _async_run(tmp_path: Path, fault: str | None, hookless: bool = False):
    results = tmp_path / f"async-{fault}-{hookless}"
    env = {
        **ASYNC,
        **({"ECHO_NPU_FAULTS": fault} if fault else {}),
        **(HOOKLESS if hookless else {}),
    }
    proc = run_pytest(
        "conformance", "-p", "no:cacheprovider", "--modes", "asynchronous", "--values", "ordinary",
        "--fallback-ops", "none", "--ops", "add.Tensor,mul.Tensor,relu,sum.dim_IntList",
        "-k", "asynchronous", "--results", str(results), *(HOOKLESS_ARGS if hookless else ()),
        env=env, timeout=600,
    )  # fmt: skip
    rows = []
    for f in sorted(results.glob("cases-*.jsonl")) if results.exists() else []:
        rows += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return proc, [r for r in rows if r["id"].endswith("-asynchronous]")]


@pytest.mark.slow
def test_async_mode_passes_on_a_right_device_and_names_a_missing_fence(tmp_path):
    for hookless in (False, True):
        proc, cases = _async_run(tmp_path, None, hookless)
        assert proc.returncode == 0 and cases, (proc.stdout + proc.stderr)[-3000:]
        assert {r["status"] for r in cases} == {"passed"}
        assert not [r for r in cases if r.get("notes")], cases  # every fence observed
    for fault, hookless in (
        ("nonblocking_d2h_unfenced", False),
        ("event_sync_early", False),
        ("event_sync_early", True),
    ):
        proc, cases = _async_run(tmp_path, fault, hookless)
        failed = [r for r in cases if r["status"] == "failed"]
        assert failed and len(failed) == len(cases), (fault, cases)
        message = failed[0]["message"]
        assert failed[0]["check"] == "asynchronous" and "[contract nonblocking-d2h]" in message, (
            message
        )
        assert "stream 1 of npu:0" in message and "event recorded" in message, message
    # the op runs with a side stream current: a stream guard that does nothing is named
    proc, cases = _async_run(tmp_path, "set_stream_ignored")
    assert cases and all("[contract current-stream]" in r["message"] for r in cases), cases


def test_async_mode_on_a_synchronous_device_says_it_could_not_observe(tmp_path):
    results = tmp_path / "sync"
    proc = run_pytest(
        "conformance", "-p", "no:cacheprovider", "--modes", "asynchronous", "--values", "ordinary",
        "--fallback-ops", "none", "--ops", "add.Tensor,relu", "-k", "asynchronous",
        "--results", str(results), timeout=600,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    rows = [
        json.loads(x) for f in results.glob("cases-*.jsonl") for x in f.read_text().split("\n") if x
    ]
    cases = [r for r in rows if r["id"].endswith("-asynchronous]")]
    assert proc.returncode == 0 and len(cases) == 2, out[-3000:]
    for r in cases:
        assert r["status"] == "passed" and "asynchronous: not observable: " in r["message"], r
    assert "-asynchronous: 2 case(s) passed without being observed" in out, out[-2000:]


def test_a_manifest_expects_a_contract_item_strictly(tmp_path):
    """`contract:<item>` in a manifest: the item's failure is expected (xfailed, the run
    passes); once the device keeps its contract the entry must go ("remove this entry")."""
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        '[[entry]]\npattern = "contract:memory-stats"\nstatus = "xfail"\n'
        'category = "backend-bug"\nreason = "statistics stay 0"\n'
    )
    args = ("-k", "memory_stats", "--expectations", str(manifest))
    env = {"ECHO_NPU_FAULTS": "memory_stats_zero"}
    proc, records = contract_run(tmp_path, *args, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert records["memory-stats"]["status"] == "xfailed", records["memory-stats"]
    proc, records = contract_run(tmp_path, *args)
    record = records["memory-stats"]
    assert proc.returncode != 0 and record["status"] == "xpassed", record
    assert "remove the entry 'contract:memory-stats'" in record["message"], record["message"]


def test_events_that_time_the_host_fail_elapsed_time_under_calibrated_holds(tmp_path):
    """Issue 79, hole 5: with streams held by calibrated work (no set_delay, no _sleep: most
    real devices) the hold's floor is unknown and the coverage check was skipped: a runtime
    whose elapsed_time reports host enqueue times passed plainly. The host's own view (a seen
    done while c was not) bounds the span from below."""
    env = {**ASYNC, "PYTHONPATH": str(REPO / "tests" / "backends")}
    args = ("--backend", "host_timed_backend", "--device", "npu", "-k", "elapsed")
    _, records = contract_run(tmp_path, *args, env=env)
    row = records["event-elapsed-time"]
    assert row["status"] == "failed", row
    assert "the events do not time the device's work" in row["message"], row["message"]
    _, records = contract_run(tmp_path, *HOOKLESS_ARGS, "-k", "elapsed", env={**ASYNC, **HOOKLESS})
    assert records["event-elapsed-time"]["status"] == "passed", records

"""What the CI relay asks of the store: a selection that fits a budget (changed ops, then those
that failed recently, then a stable sample) and the level-3 figures, warned about early."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from conformance.history.relay import parse_budget, touched_ops
from tests.history.conftest import Ask
from tests.history.synthetic import write_run

OPS = ["abs", "neg", "sqrt", "sort", "softmax", "mul", "add", "exp", "log", "sin"]


def test_budgets_and_touched_ops() -> None:
    assert [parse_budget(t) for t in ("20m", "1h30m", "90s", "1200", "2h")] == [
        1200,
        5400,
        90,
        1200,
        7200,
    ]
    with pytest.raises(ValueError, match="not a time budget"):
        parse_budget("soon")
    changed = ["aten/src/ATen/native/cpu/SortingKernel.cpp", "torch/nn/functional.py"]
    assert touched_ops(["sort.default", "softmax", "abs", "add.Tensor"], changed) == [
        "sort.default"
    ]


def _store(tmp_path, capsys) -> Ask:
    """Two runs of cell crcr: every op 10 cases of 1 s (recorded), `exp` failing last time."""
    ask = Ask(str(tmp_path / "h.db"))
    for night, failing in enumerate(([], ["exp"])):
        cases = {f"{op}-float{k}": ("failed" if op in failing else "passed")
                 for op in OPS for k in range(10)}  # fmt: skip
        ask.add(write_run(tmp_path / f"n{night}" / "crcr", cases, duration=1.0,
                          started=f"2026-11-0{night + 1}T02:00:00+00:00"))  # fmt: skip
    capsys.readouterr()
    return ask


def test_the_selection_takes_changed_then_failing_then_a_stable_sample(tmp_path, capsys) -> None:
    ask = _store(tmp_path, capsys)
    changed = tmp_path / "changed.txt"
    changed.write_text("aten/src/ATen/native/Sorting.cpp\n")
    # a run took 30 s of wall for 100 case-seconds, 10 s of it fixed: 2 s of wall per op
    args = ["select", "--cell", "crcr", "--budget", "20s", "--fixed", "10", "--changed",
            str(changed)]  # fmt: skip
    chosen = ask(*args, capsys=capsys)
    assert list(chosen["reasons"].items())[:2] == [("sort", "changed"), ("exp", "failed")]
    assert len(chosen["ops"]) == 5 and chosen["estimate_s"] <= 20 and chosen["left_out"] == 5
    again = ask(*args, capsys=capsys)
    assert again["ops"] == chosen["ops"]  # stable: the same sample every time
    everything = ask("select", "--cell", "crcr", "--budget", "20m", capsys=capsys)
    assert sorted(everything["ops"]) == sorted(OPS) and everything["left_out"] == 0


def test_level_figures_warn_before_a_threshold_is_crossed(tmp_path, capsys) -> None:
    ask = Ask(str(tmp_path / "h.db"))
    now = datetime.now(timezone.utc)  # noqa: UP017
    nights = [(0, True), (1, True), (1, True), (0, False)] + [(0, True)] * 6  # 7 of 10 pass
    for night, (status, finished) in enumerate(nights):
        started = (now - timedelta(hours=60 - 5 * night)).replace(microsecond=0, second=0)
        ask.add(write_run(tmp_path / f"n{night}" / "crcr", {"abs-float32": "passed"},
                          started=started.isoformat(), exitstatus=status,
                          finished=finished))  # fmt: skip
    capsys.readouterr()
    level = ask("relay", "--cell", "crcr", capsys=capsys)
    assert level["runs"] == 10 and level["pass_rate"] == 0.7 and level["timeout_rate"] == 0.1
    warnings = " ".join(level["warnings"])
    assert "job pass rate 70.0%" in warnings and "timeout rate 10.0%" in warnings
    assert "degraded" not in warnings  # the last run is 15 h old
    assert ask("relay", "--cell", "crcr", "--days", "1", capsys=capsys)["runs"] == 2
    old = (now - timedelta(hours=40)).replace(microsecond=0, second=0).isoformat()
    ask.add(write_run(tmp_path / "old" / "nightly", {"abs-float32": "passed"}, started=old))
    capsys.readouterr()
    assert "degraded" in " ".join(ask("relay", "--cell", "nightly", capsys=capsys)["warnings"])


def test_a_selection_run_never_narrows_the_next_selection(tmp_path, capsys) -> None:
    """The ops chosen from are those of the cell's runs of 30 days, not of its latest run."""
    ask = _store(tmp_path, capsys)
    ask.add(write_run(tmp_path / "n9" / "crcr", {"abs-float32": "passed"}, duration=1.0,
                      started="2026-11-05T02:00:00+00:00"))  # fmt: skip
    capsys.readouterr()
    chosen = ask("select", "--cell", "crcr", "--budget", "20m", capsys=capsys)
    assert sorted(chosen["ops"]) == sorted(OPS)

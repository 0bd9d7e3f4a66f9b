"""The questions over ten real echo_npu runs (conftest.PLAN: faults switched on and off between
runs, one run with a fault its configuration does not show), in SQLite and in PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.history.conftest import Ask

pytestmark = pytest.mark.slow


def _started(run: Path) -> str:
    return json.loads((run / "run.json").read_text())["started"]


def _op(case: str) -> str:
    return case.split("[", 1)[1].split("-", 1)[0]


def _failing(run: Path) -> dict[str, str]:
    """case id -> check of the run's failing cases, from its results folder."""
    out = {}
    for lines in run.glob("cases-*.jsonl"):
        for line in lines.read_text().splitlines():
            case = json.loads(line)
            if case["status"] == "failed":
                out[case["id"]] = case["check"]
    return out


def _findings(run: Path, op: str) -> set[str]:
    found = json.loads((run / "run.json").read_text())["findings"]
    return {f["id"] for f in found if any(o.startswith(op) for o in f["ops"])}


def test_since_when_each_case_fails(ten_runs, new_store, capsys) -> None:
    ask: Ask = new_store("since")
    ask.add(*ten_runs[:5])
    failing = ask("failing", capsys=capsys)
    since = {(_op(t["case"]), t["failing_since"], t["last_passed"]) for t in failing}
    assert since == {
        ("mul.Tensor", _started(ten_runs[2]), _started(ten_runs[1])),
        ("sqrt", _started(ten_runs[4]), _started(ten_runs[3])),
    }, since
    assert {t["case"] for t in failing} == set(_failing(ten_runs[4]))


def test_new_and_fixed_findings(ten_runs, new_store, capsys) -> None:
    ask: Ask = new_store("changes")
    mul, sqrt = _findings(ten_runs[2], "mul"), _findings(ten_runs[4], "sqrt")
    assert mul and sqrt
    ask.add(*ten_runs[:5])
    change = ask("changes", capsys=capsys)
    assert {f["finding"] for f in change["new"]} == sqrt
    assert change["fixed"] == [] and change["kept"] == len(mul)
    ask.add(ten_runs[5])  # mul's fault switched off
    change = ask("changes", capsys=capsys)
    assert {f["finding"] for f in change["fixed"]} == mul and change["new"] == []
    assert all("pass now" in f["note"] for f in change["fixed"])
    ask.add(*ten_runs[6:9])  # 9: sqrt's fault switched off
    change = ask("changes", capsys=capsys)
    assert {f["finding"] for f in change["fixed"]} == sqrt


def test_the_flaky_case_is_found_and_no_other(ten_runs, new_store, capsys) -> None:
    ask: Ask = new_store("flaky")
    ask.add(*ten_runs)
    flaky = ask("flaky", capsys=capsys)
    unseen = {c for c, check in _failing(ten_runs[6]).items() if check == "signed-zero"}
    assert unseen and {_op(c) for c in unseen} == {"neg"}
    assert {f["case"] for f in flaky} == unseen  # mul and sqrt changed with the switches: no flake
    assert all(f["statuses"] == ["passed", "failed", "passed"] for f in flaky), flaky


def test_a_case_and_a_finding_over_time(ten_runs, new_store, capsys) -> None:
    ask: Ask = new_store("timeline")
    ask.add(*ten_runs)
    case = next(c for c in _failing(ten_runs[2]) if "contiguous-native]" in c)
    line = ask("case", case, capsys=capsys)
    assert [status for _, status in line["points"]] == ["passed"] * 2 + ["failed"] * 3 + [
        "passed"
    ] * 5
    assert line["flips"] == 2 and line["failing_since"] is None
    assert line["last_passed"] == _started(ten_runs[9])
    finding = sorted(_findings(ten_runs[2], "mul"))[0]
    seen = ask("finding", finding, capsys=capsys)
    assert [bool(n) for _, n in seen["counts"]] == [False] * 2 + [True] * 3 + [False] * 5


def test_pass_rates_and_run_times(ten_runs, new_store, capsys) -> None:
    ask: Ask = new_store("rates")
    ask.add(*ten_runs)
    checks = ask("rates", "--by", "check", capsys=capsys)["table"]
    assert [bool(n) for n in checks["signed-zero"]] == [False] * 6 + [True] + [False] * 3
    assert [bool(n) for n in checks["rounding"]] == [False] * 2 + [True] * 6 + [False] * 2
    family = ask("rates", "--by", "family", capsys=capsys)["table"]["ops"]
    assert family[0] == family[-1] == 1.0 and family[4] < family[2] < 1.0
    times = ask("times", capsys=capsys)
    assert len(times) == 10
    assert all(t["run"]["cases"] > 50 and t["run"]["wall_s"] > 0 and t["hung"] == 0 for t in times)


def test_the_pytest_flag_appends_every_run(ten_runs, capsys) -> None:
    """`--store` on each run (the user's one flag) holds what the command line appends."""
    ask = Ask(str(ten_runs[0].parents[1] / "flag.db"))
    assert len(ask("runs", capsys=capsys)) == 10
    unseen = {c for c, check in _failing(ten_runs[6]).items() if check == "signed-zero"}
    assert {f["case"] for f in ask("flaky", capsys=capsys)} == unseen


def test_the_report_of_the_ten_runs_draws_their_trends(ten_runs, tmp_path, capsys) -> None:
    """The pictures of the ten runs in the HTML report, the flaky neg cases marked."""
    from html.parser import HTMLParser

    from conformance.history.__main__ import main as history
    from conformance.report.__main__ import main as report

    store, pictures = str(ten_runs[0].parents[1] / "flag.db"), tmp_path / "trends"
    assert history(["--store", store, "pictures", "--output", str(pictures)]) == 0
    page = tmp_path / "report.html"
    assert report([str(ten_runs[6]), "--html", str(page), "--trends", str(pictures)]) == 0

    class Page(HTMLParser):
        images: list[str] = []
        flaky: list[str] = []

        def handle_starttag(self, tag, attrs) -> None:
            attr = dict(attrs)
            if tag == "img" and (attr.get("src") or "").startswith("data:image/svg+xml"):
                self.images.append(attr.get("alt") or "")
            if tag == "span" and "flaky" in (attr.get("class") or "").split():
                self.flaky.append(attr.get("title") or "")

    parsed = Page()
    parsed.feed(page.read_text())
    assert len(parsed.images) == 4 and all(
        a.startswith("conformance-2.13: ") for a in parsed.images
    )
    unseen = {c for c, check in _failing(ten_runs[6]).items() if check == "signed-zero"}
    assert len(parsed.flaky) == len(unseen) and all("flaky: failed 1" in t for t in parsed.flaky)

"""Bisect with fake installs: a version-gated fault is named exactly, within the bound."""

from __future__ import annotations

import json
import math

import pytest
from packaging.version import Version

from conformance.bisect import __main__ as cli
from conformance.bisect import index
from conformance.bisect.probe import gated_fault_env, outcome_of
from conformance.bisect.search import BisectError, Probe, bisect_versions, max_probes

RELEASES = [
    Version(v)
    for v in "2.5.0 2.5.1 2.6.0 2.7.0 2.7.1 2.8.0 2.9.0 2.9.1 2.10.0 2.11.0 2.12.0 2.12.1".split()
]


class FakeRunner:
    """Fake install+run: versions >= ``since`` fail (or pass, with ``fix``); counts installs;
    versions in ``unbuildable`` cannot be built (skip)."""

    def __init__(
        self, since: str, fix: bool = False, error_on: str = "", unbuildable: str = ""
    ) -> None:
        self.since = Version(since)
        self.fix = fix
        self.error_on = error_on
        self.unbuildable = set(unbuildable.split())
        self.probed: list[str] = []

    def probe(self, version: Version) -> Probe:
        self.probed.append(str(version))
        if str(version) == self.error_on:
            return Probe(str(version), "error", log="/x/log.txt", installed=True, detail="boom")
        if str(version) in self.unbuildable:
            detail = f"build of mynpu against torch {version} failed: exit status 1"
            return Probe(str(version), "skip", 9.0, "/x/log.txt", installed=True, detail=detail)
        broken = (version >= self.since) != self.fix
        return Probe(str(version), "fail" if broken else "pass", 1.0, "log", installed=True)


@pytest.mark.parametrize("since", [str(v) for v in RELEASES[1:]])
def test_names_every_possible_first_bad_exactly(since: str) -> None:
    runner = FakeRunner(since)
    result = bisect_versions("k", RELEASES, RELEASES[0], RELEASES[-1], runner)
    assert result.first_bad == since
    assert Version(result.last_good) < Version(since)
    assert RELEASES.index(Version(result.last_good)) + 1 == RELEASES.index(Version(since))
    assert runner.probed[:2] == [str(RELEASES[0]), str(RELEASES[-1])]  # both ends first
    assert len(runner.probed) == len(set(runner.probed))  # no version probed twice
    assert result.installs == len(runner.probed) <= math.ceil(math.log2(len(RELEASES))) + 2


def test_bisects_a_fix_too() -> None:
    runner = FakeRunner("2.9.1", fix=True)
    result = bisect_versions("k", RELEASES, Version("2.5.0"), Version("2.12.1"), runner)
    assert result.first_bad == "2.9.1" and result.last_good == "2.9.0"


def test_sub_range_only_probes_inside() -> None:
    runner = FakeRunner("2.10.0")
    result = bisect_versions("k", RELEASES, Version("2.8.0"), Version("2.11.0"), runner)
    assert result.first_bad == "2.10.0"
    assert all(Version("2.8.0") <= Version(v) <= Version("2.11.0") for v in runner.probed)
    assert result.versions == ["2.8.0", "2.9.0", "2.9.1", "2.10.0", "2.11.0"]


@pytest.mark.parametrize(
    ("since", "message"), [("2.0", "both ends fail"), ("3.0", "both ends pass")]
)
def test_both_ends_alike_is_an_error(since: str, message: str) -> None:
    with pytest.raises(BisectError, match=message):
        bisect_versions("k", RELEASES, RELEASES[0], RELEASES[-1], FakeRunner(since))


def test_good_not_older_than_bad_is_an_error() -> None:
    with pytest.raises(BisectError, match="must be older"):
        bisect_versions("k", RELEASES, RELEASES[-1], RELEASES[0], FakeRunner("2.9"))


def test_end_that_cannot_run_is_an_error_naming_its_log() -> None:
    with pytest.raises(BisectError, match=r"2\.5\.0 did not run: boom \(log: /x/log.txt\)"):
        bisect_versions(
            "k", RELEASES, RELEASES[0], RELEASES[-1], FakeRunner("2.9", error_on="2.5.0")
        )
    with pytest.raises(BisectError, match=r"the --bad probe of torch 2\.12\.1 did not run"):
        bisect_versions(
            "k", RELEASES, RELEASES[0], RELEASES[-1], FakeRunner("2.9", unbuildable="2.12.1")
        )


def test_release_that_fails_to_build_in_the_middle_is_skipped() -> None:
    # 2.8.0 is the first midpoint: it cannot be built, the search goes on around it
    runner = FakeRunner("2.10.0", unbuildable="2.8.0")
    result = bisect_versions("k", RELEASES, RELEASES[0], RELEASES[-1], runner)
    assert "2.8.0" in runner.probed
    assert result.first_bad == "2.10.0" and result.last_good == "2.9.1" and result.exact
    assert result.skipped == ["2.8.0"]
    assert "skipped (no verdict): 2.8.0" in result.answer
    assert len(runner.probed) == len(set(runner.probed))
    assert len(runner.probed) <= max_probes(len(RELEASES)) + 1


def test_skipped_release_next_to_the_change_makes_the_answer_a_range() -> None:
    runner = FakeRunner("2.10.0", unbuildable="2.10.0 2.9.1")
    result = bisect_versions("k", RELEASES, RELEASES[0], RELEASES[-1], runner)
    assert not result.exact and result.candidates == ["2.9.1", "2.10.0", "2.11.0"]
    assert result.first_bad == "2.11.0" and result.last_good == "2.9.0"
    assert result.skipped == ["2.9.1", "2.10.0"]
    assert result.answer.startswith("First bad: one of torch 2.9.1, 2.10.0, 2.11.0")
    assert "a range, because 2.9.1, 2.10.0 could not be tested" in result.answer


def test_every_middle_release_skipped_still_finishes() -> None:
    middle = " ".join(str(v) for v in RELEASES[1:-1])
    result = bisect_versions(
        "k", RELEASES, RELEASES[0], RELEASES[-1], FakeRunner("2.10", unbuildable=middle)
    )
    assert result.candidates == [str(v) for v in RELEASES[1:]] and not result.exact


def test_max_probes_bound() -> None:
    assert max_probes(15) == 6 and max_probes(2) == 3 and max_probes(8) == 5


def test_fault_goes_to_the_described_fault_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_index(monkeypatch, RELEASES)
    seen: list[dict] = []

    def fake_runner(expression, **kw):
        seen.append(kw)
        return FakeRunner("2.10")

    monkeypatch.setattr(cli, "VenvProbeRunner", fake_runner)
    argv = ["k", "--good", "2.5", "--bad", "2.12", "--fault", "leak", "--fault-from", "2.10"]
    assert cli.main(argv) == 0
    env_for = seen[0]["env_for"]
    assert env_for(Version("2.9.1")) == {}
    assert env_for(Version("2.10.0")) == {"ECHO_NPU_FAULTS": "leak"}
    argv = ["k", "--good", "2.5", "--bad", "2.12", "--gate-env", "A=1", "--gate-from", "2.11"]
    assert cli.main(argv) == 0
    assert seen[1]["env_for"](Version("2.11.0")) == {"A": "1"}


def test_fault_needs_a_fault_variable(monkeypatch: pytest.MonkeyPatch, tmp_path, capsys) -> None:
    _fake_index(monkeypatch, RELEASES)
    (tmp_path / "src").mkdir()
    matrix = tmp_path / "m.toml"
    matrix.write_text(
        'schema = 2\n[torch]\n[[torch.release]]\nminor = "2.12"\nversion = "2.12.1"\n'
        '[backend]\nmodule = "my_npu"\n[backend.build]\nsource = "src"\ncommand = "true"\n'
    )
    argv = ["k", "--good", "2.5", "--bad", "2.12", "--matrix", str(matrix), "--fault", "leak"]
    assert cli.main([*argv, "--fault-from", "2.10"], runner=FakeRunner("2.10")) == 2
    assert "has no fault_env; add fault_env" in capsys.readouterr().err


def test_gated_fault_env() -> None:
    env_for = gated_fault_env("leak", Version("2.10.0"))
    assert env_for(Version("2.9.1")) == {}
    assert env_for(Version("2.10.0")) == {"ECHO_NPU_FAULTS": "leak"}
    assert env_for(Version("2.15.0")) == {"ECHO_NPU_FAULTS": "leak"}


def _fake_index(monkeypatch: pytest.MonkeyPatch, versions: list[Version]) -> None:
    files = [{"filename": f"torch-{v}-cp311-cp311-manylinux_2_28_x86_64.whl"} for v in versions]
    monkeypatch.setattr(index, "fetch_json", lambda url: {"files": files})
    monkeypatch.setattr(cli, "list_versions", lambda url, pre=False: sorted(versions))


def test_cli_with_fake_runner_writes_json_and_markdown(
    monkeypatch: pytest.MonkeyPatch, tmp_path, capsys
) -> None:
    _fake_index(monkeypatch, RELEASES)
    out_json, out_md = tmp_path / "b.json", tmp_path / "b.md"
    argv = ["mul.Tensor", "--good", "2.5", "--bad", "2.12", "--json", str(out_json)]
    argv += ["--markdown", str(out_md)]
    assert cli.main(argv, runner=FakeRunner("2.10")) == 0
    data = json.loads(out_json.read_text())
    assert data["first_bad"] == "2.10.0" and data["last_good"] == "2.9.1"
    assert data["good"] == "2.5.1" and data["bad"] == "2.12.1"  # minors -> latest patch
    assert [p["version"] for p in data["probes"]][:2] == ["2.5.1", "2.12.1"]
    assert all({"version", "outcome", "seconds", "log"} <= set(p) for p in data["probes"])
    assert "First bad: torch 2.10.0" in out_md.read_text()
    assert data["exact"] and data["skipped"] == [] and data["candidates"] == ["2.10.0"]


def test_cli_names_the_skipped_release(monkeypatch: pytest.MonkeyPatch, tmp_path, capsys) -> None:
    _fake_index(monkeypatch, RELEASES)
    out_json = tmp_path / "b.json"
    runner = FakeRunner("2.10", unbuildable="2.9.0")  # the first midpoint of 2.5.1 .. 2.12.1
    argv = ["mul.Tensor", "--good", "2.5", "--bad", "2.12", "--json", str(out_json)]
    assert cli.main(argv, runner=runner) == 0
    captured = capsys.readouterr()
    assert "First bad: torch 2.10.0" in captured.out
    assert "Skipped (no verdict; the search went on around them): 2.9.0 (skip: build of" in (
        captured.out
    )
    assert "skipped (no verdict): 2.9.0" in captured.err
    data = json.loads(out_json.read_text())
    assert data["skipped"] == ["2.9.0"] and data["first_bad"] == "2.10.0" and data["exact"]
    assert [p["outcome"] for p in data["probes"]].count("skip") == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--good", "2.99", "--bad", "2.12"], "torch 2.99 is not on the index"),
        (["--good", "2.12", "--bad", "2.6"], "must be older"),
        (["--good", "2.5", "--bad", "2.6"], "both ends pass"),
        (["--good", "banana", "--bad", "2.6"], "not a version"),
        (["--good", "2.5", "--bad", "2.12", "--fault", "leak"], "go together"),
        (["--good", "2.5", "--bad", "2.12", "--gate-env", "X"], "expected NAME=VALUE"),
        (["--good", "2.5", "--bad", "2.12", "--allocator", "slab"], "'slab' is not one of"),
        (["--good", "2.5", "--bad", "2.12", "--matrix", "/nope.toml"], "/nope.toml not found"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys, argv: list[str], message: str
) -> None:
    _fake_index(monkeypatch, RELEASES)
    assert cli.main(["k", *argv], runner=FakeRunner("2.10")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and message in err[-1]
    assert "Traceback" not in "\n".join(err)


def test_outcome_from_results_jsonl(tmp_path) -> None:
    def write(name: str, *statuses: str):
        d = tmp_path / name
        d.mkdir()
        lines = [
            json.dumps({"id": f"c{i}", "op": "mul", "status": s}) for i, s in enumerate(statuses)
        ]
        (d / "cases-main.jsonl").write_text("\n".join(lines) + "\n")
        (d / "run.json").write_text('{"torch": "2.8.0", "finished": "x"}')
        return d

    assert outcome_of(write("a", "passed", "skipped"))[0] == "pass"
    assert outcome_of(write("b", "passed", "failed"))[0] == "fail"
    assert outcome_of(write("c", "crashed"))[0] == "fail"
    assert outcome_of(write("d", "skipped"))[0] == "error"
    assert outcome_of(tmp_path / "missing")[0] == "error"


def test_nox_lists_the_bisect_session() -> None:
    import shutil
    import subprocess
    from pathlib import Path

    if shutil.which("nox") is None:
        pytest.skip("nox is not installed")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(["nox", "-l"], cwd=root, capture_output=True, text=True, timeout=60)
    assert "- bisect -> First torch release" in out.stdout

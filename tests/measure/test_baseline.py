"""The baseline (conformance/harness/baseline.py, conformance/measure/baseline.py): a manifest that
expects exactly what a run found.

Synthetic records (docs/RESULTS.md); every written manifest is read back with the suite's own
loader and matched against every case, as the next run would."""

from __future__ import annotations

import json
import random
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

from conformance.harness import baseline as harness_baseline
from conformance.harness.case_patterns import patterns_for
from conformance.harness.expectations import Manifest, load_manifest
from conformance.harness.options import DEFAULT_MODES, VALUE_SETS
from conformance.measure.baseline import main
from conformance.record import CaseId, CaseRecord

OPS = ("add.Tensor", "mul.Tensor", "abs", "add", "add_.Tensor")
DTYPES = ("float32", "float64", "int64")
LAYOUTS = ("contiguous", "transposed", "offset")
PATHS = ("native", "fallback")
VALUES = ("", "special", "grad")


def _universe(ops=OPS) -> list[str]:
    return [
        str(CaseId(o, d, lay, p, v))
        for o in ops
        for d in DTYPES
        for lay in LAYOUTS
        for p in PATHS
        for v in VALUES
    ]


def _rec(case: str, status: str = "passed", check: str | None = None, message: str = "", **kw):
    c = CaseId.parse(case)
    data = {
        "id": c.test_name,
        "op": c.op,
        "overload": c.overload_tag,
        "dtype": c.dtype,
        "layout": c.layout,
        "path": c.path,
        "status": status,
        "check": check,
        "message": message,
        "repro": f"pytest ... {case}",
        "torch": kw.pop("torch", "2.13.0"),
        "allocator": kw.pop("allocator", "malloc"),
        **({"values": c.values} if c.values else {}),
    }
    data.update(kw)
    return data


def baseline(runs, manifest=None, **kw) -> harness_baseline.Baseline:
    """The baseline of runs given as (run.json, JSON lines), the lines read as records."""
    read = [(meta, [CaseRecord.from_json(r) for r in rows]) for meta, rows in runs]
    return harness_baseline.baseline(read, manifest, **kw)


def _run(failing: dict[str, tuple[str, str, str]], universe=None, **kw) -> list[dict]:
    """Records of every case of the universe: `failing` {case: (status, check, message)}."""
    out = []
    for case in universe or _universe():
        status, check, message = failing.get(case, ("passed", None, ""))
        out.append(_rec(case, status, check, message, **kw))
    return out


def _load(tmp_path: Path, text: str, name: str = "m.toml") -> Manifest:
    path = tmp_path / name
    path.write_text(text)
    return load_manifest([str(path)])


def _expected(manifest: Manifest, records: list[dict]) -> dict[str, str]:
    """{case: entry status} for every record the manifest matches."""
    out = {}
    for r in records:
        case = str(CaseId.parse(r["id"]))
        entry = manifest.match(case, r["allocator"])
        if entry is not None:
            out[case] = entry.status
    return out


@pytest.mark.parametrize("seed", range(40))
def test_patterns_cover_exactly_the_cases_they_stand_for(seed):
    """Property: for random subsets of one overload's cases, the patterns match every case of
    the subset and no other case the run collected."""
    rng = random.Random(seed)
    universe = set(_universe(("add.Tensor", "add")))
    mine = sorted(c for c in universe if c.startswith("add.Tensor-"))
    wanted = set(rng.sample(mine, rng.randint(1, len(mine))))
    patterns = patterns_for(wanted, {0: wanted}, {0: universe})
    matched = {c for c in universe if any(fnmatchcase(c, p) for p in patterns)}
    assert matched == wanted, patterns


def test_a_dimension_becomes_a_wildcard_only_where_every_case_is_covered():
    universe = set(_universe(("mul.Tensor",)))
    wanted = {c for c in universe if "-native" in c and "-float32-" in c}
    assert patterns_for(wanted, {0: wanted}, {0: universe}) == ["mul.Tensor-float32-*-native*"]
    every = {c for c in universe}
    assert patterns_for(every, {0: every}, {0: universe}) == ["mul.Tensor-*"]


def test_one_entry_per_finding_and_unsupported_group_and_the_next_run_is_expected(tmp_path):
    leak = "[leak] 3 device block(s), 100 bytes, allocated during mul.Tensor still alive"
    nie = (
        '[unsupported] device raised NotImplementedError [not_implemented]: "exp_npu" not '
        "implemented for 'Long' where cpu computes; not declared: add the kernel"
    )
    failing = {c: ("failed", "leak", leak) for c in _universe(("mul.Tensor",)) if "native" in c}
    failing |= {
        c: ("failed", "unsupported", nie)
        for c in _universe(("abs",))
        if "-int64-" in c and c.endswith("native")
    }
    records = _run(failing)
    result = baseline([({}, records)], source="test")
    manifest = _load(tmp_path, result.files[""])
    assert len(manifest.entries) == 2 and result.findings == 1 and result.unsupported == 1
    assert _expected(manifest, records) == {
        c: ("unsupported" if check == "unsupported" else "xfail")
        for c, (_, check, _) in failing.items()
    }
    by_status = {e.status: e for e in manifest.entries}
    assert by_status["xfail"].checks == ("leak",) and by_status["xfail"].category == "backend-bug"
    assert by_status["xfail"].patterns == ("mul.Tensor-*-native*",)
    assert "still alive" in by_status["xfail"].reason
    assert by_status["unsupported"].category == "unsupported"
    assert "not declared" not in by_status["unsupported"].reason
    assert "# repro: pytest ... " in result.files[""]


def test_crashes_skip_the_culprit_and_hangs_are_skipped(tmp_path):
    universe = _universe(("abs", "add.Tensor"))
    crash = "[crash] SIGABRT: free(): invalid pointer"
    failing = {"abs-float32-contiguous-native": ("crashed", "crash", crash)}
    failing["add.Tensor-int64-offset-fallback"] = ("hung", "hang", "[hang] past 300 s")
    records = _run(failing, universe)
    records[0]["culprit"] = "add.Tensor-float64-offset-native"  # corrupted memory first
    manifest = _load(tmp_path, baseline([({}, records)]).files[""])
    statuses = {(e.status, e.patterns) for e in manifest.entries}
    assert ("skip", ("add.Tensor-int64-offset-fallback",)) in statuses
    crash_entry = next(e for e in manifest.entries if e.status == "crash")
    victim = str(CaseId.parse(records[0]["id"]))
    assert crash_entry.matching(records[0]["culprit"]) and not crash_entry.matching(victim)


def test_torch_versions_split_into_common_and_per_minor_files(tmp_path):
    wrong = "[values] mismatch in 3 of 12 elements"
    both = {"abs-float32-contiguous-native": ("failed", "values", wrong)}
    new = {"mul.Tensor-int64-offset-native": ("failed", "leak", "[leak] 1 block alive")}
    r12 = _run(both, torch="2.12.1")
    r13 = _run(both | new, torch="2.13.0")
    result = baseline([({}, r12), ({}, r13)], split=True)
    assert set(result.files) == {"common.toml", "torch-2.12.toml", "torch-2.13.toml"}
    common = _load(tmp_path, result.files["common.toml"], "common.toml")
    only13 = _load(tmp_path, result.files["torch-2.13.toml"], "torch-2.13.toml")
    assert [e.patterns for e in common.entries] == [("abs-float32-contiguous-native",)]
    assert [e.patterns for e in only13.entries] == [("mul.Tensor-int64-offset-native",)]
    assert "[[entry]]" not in result.files["torch-2.12.toml"]
    with pytest.raises(Exception, match="several torch versions"):
        baseline([({}, r12), ({}, r13)])


def test_allocator_modes_of_one_torch_differ_by_an_allocator_field(tmp_path):
    red = {"abs-float32-offset-native": ("failed", "memory", "[memory] red zone after block")}
    records = _run({}, allocator="malloc") + _run(red, allocator="guard")
    manifest = _load(tmp_path, baseline([({}, records)]).files[""])
    (entry,) = manifest.entries
    assert entry.allocator == "guard" and entry.checks == ("memory",)


def test_entries_of_the_manifest_in_use_are_carried_over_as_written(tmp_path):
    """A hand-written entry whose cases all still fail is kept (patterns, reason, link); one
    with a case that passes now is narrowed to the cases that still need it."""
    text = (
        '[[entry]]\npattern = "abs-*-offset-*"\nstatus = "xfail"\ncheck = "values"\n'
        'category = "torch-bug"\nreason = "known, see link"\nlink = "https://x/1"\n\n'
        '[[entry]]\npattern = "mul.Tensor-float64-*"\nstatus = "xfail"\ncategory = "flaky"\n'
        'reason = "sometimes"\n'
    )
    old = _load(tmp_path, text, "old.toml")
    kept, narrowed = old.entries
    records = []
    for case in _universe():
        r = _rec(case)
        entry = old.match(case)
        if entry is kept:
            r.update(status="xfailed", check="values", expected_by=kept.source)
        elif entry is narrowed:
            xpass = case.startswith("mul.Tensor-float64-contiguous-")
            r.update(status="xpassed" if xpass else "xfailed", expected_by=narrowed.source)
        records.append(r)
    result = baseline([({}, records)], old)
    new = _load(tmp_path, result.files[""], "new.toml")
    assert result.carried == 2
    first = next(e for e in new.entries if e.reason == "known, see link")
    assert first.patterns == ("abs-*-offset-*",) and first.link == "https://x/1"
    second = next(e for e in new.entries if e.reason == "sometimes")
    want = {r["id"] for r in records if r["status"] == "xfailed" and "mul.Tensor" in r["id"]}
    got = {r["id"] for r in records if second.matching(str(CaseId.parse(r["id"])))}
    assert got == want and second.category == "flaky"


def test_a_dtype_many_ops_lack_gets_the_one_line_hint():
    nie = "[unsupported] device raised NotImplementedError: \"{}\" not implemented for 'Double'"
    ops = ("abs", "add.Tensor", "mul.Tensor", "add", "add_.Tensor")
    failing = {
        c: ("failed", "unsupported", nie.format(CaseId.parse(c).op + "_npu"))
        for c in _universe(ops)
        if "-float64-" in c
    }
    text = baseline([({}, _run(failing))]).files[""]
    assert 'unsupported_dtypes = ["float64"]' in text  # the hint, as a comment
    assert "# float64: unsupported in 5 ops" in text


def test_command_line_writes_from_results_folders(tmp_path, capsys):
    for minor, extra in (("2.12.1", {}), ("2.13.0", {"abs-float32-offset-native": "x"})):
        folder = tmp_path / "results" / f"conformance-{minor}"
        folder.mkdir(parents=True)
        failing = {c: ("failed", "values", "[values] wrong") for c in extra}
        rows = _run(failing, torch=minor)
        (folder / "cases-main.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (folder / "run.json").write_text(json.dumps({"torch": minor, "finished": "x"}))
    assert main([str(tmp_path / "results"), "--dir", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "common.toml",
        "torch-2.12.toml",
        "torch-2.13.toml",
    ]
    assert main([str(tmp_path / "results"), "-o", str(tmp_path / "one.toml")]) == 2
    assert "several torch versions" in capsys.readouterr().err
    assert main([str(tmp_path / "nothing"), "-o", str(tmp_path / "one.toml")]) == 2


def test_a_narrowed_run_never_widens_what_it_did_not_collect(tmp_path):
    """`pytest -k grad` collects only abs's -grad cases: "abs-*" would also expect its forward
    cases in a full run (and fail them as "remove this entry"). A dimension becomes `*` only
    where the run's options took every value (run.json "selection"), nothing after -k."""
    universe = [c for c in _universe(("abs",)) if c.endswith("-grad")]
    nie = "[unsupported] device raised NotImplementedError: Could not run 'aten::sgn.out'"
    records = _run({c: ("failed", "unsupported", nie) for c in universe}, universe)
    full = {"dtypes": "float32,float64,float16,bfloat16,int32,int64,bool".split(","),
            "layouts": ["contiguous", "transposed", "expanded", "offset", "sliced",
                        "noncontiguous", "channels_last", "zero_size", "zero_dim"],
            "paths": ["native", "fallback"], "values": list(VALUE_SETS),
            "modes": list(DEFAULT_MODES), "keyword": ""}  # fmt: skip
    plain = _load(tmp_path, baseline([({"selection": full}, records)]).files[""], "a.toml")
    assert plain.entries[0].patterns == ("abs-*",)  # every dimension taken in full
    narrowed = {"selection": {**full, "keyword": "grad"}}
    manifest = _load(tmp_path, baseline([(narrowed, records)]).files[""], "b.toml")
    (entry,) = manifest.entries
    assert sorted(entry.patterns) == sorted(universe)  # every case named, no wildcard
    assert not entry.matching("abs-float32-contiguous-native")
    only_float32 = {"selection": {**full, "dtypes": ["float32"]}}
    manifest = _load(tmp_path, baseline([(only_float32, records)]).files[""], "c.toml")
    patterns = manifest.entries[0].patterns
    assert len(patterns) == 3 and all(p.split("-")[1] in DTYPES for p in patterns), patterns


def test_patterns_never_reach_a_value_set_or_mode_the_run_did_not_collect():
    """Issue 32: a run with --values ordinary --modes none wrote `abs-*-contiguous-*`, which
    also matched `abs-float32-contiguous-native-special` of a later full run."""
    universe = {c for c in _universe(("abs",)) if CaseId.parse(c).values == ""}
    wanted = {c for c in universe if "-contiguous-" in c}
    dims = (1, 2, 3)  # the values dimension was narrowed by the run's options
    patterns = patterns_for(wanted, {0: wanted}, {0: universe}, dims)
    later = _universe(("abs",))  # a full run: every value set and mode
    matched = {c for c in later if any(fnmatchcase(c, p) for p in patterns)}
    assert matched == wanted, patterns


def test_an_entry_carried_from_results_of_another_manifest_keeps_its_reason(tmp_path):
    """Issue 56: results expected by a manifest the writer could not look up (another
    machine's path, or a line that now holds another entry) were written with the reason
    "carried over from /work/main/...:1254". The run notes the entry's reason in the record;
    no machine path is ever written."""
    records = _run({})
    case = "abs-float32-offset-native"
    for r in records:
        if str(CaseId.parse(r["id"])) == case:
            r.update(status="xfailed", check="values", message="[values] output: 3/9 differ",
                     expected_by="/elsewhere/m.toml:12", category="backend-bug",
                     expected_reason="abs of an offset view reads the base")  # fmt: skip
    text = baseline([({}, records)], None).files[""]
    assert "carried over from" not in text and "/elsewhere" not in text
    new = _load(tmp_path, text)
    assert new.match(case).reason == "abs of an offset view reads the base"


def test_an_xfail_entry_excuses_its_own_failure_not_a_second_one_of_the_same_check(tmp_path):
    """Issue 56: entries matched by check name only, so a second `values` bug in a case hid
    behind the first. The baseline pins each xfail entry to its failures (first lines, numbers
    masked); a failure worded otherwise is not expected."""
    failing = {
        "mul.Tensor-float32-offset-native": (
            "failed", "values",
            "[values] output: 3/9 elements differ (max abs 0.5, max rel 0.1, rtol 1.3e-06, "
            "atol 1e-05); first at (0, 1): device 1.5 vs cpu 1.0\n  repro: pytest ...",
        ),
    }  # fmt: skip
    text = baseline([({}, _run(failing))], None).files[""]
    entry = _load(tmp_path, text).match("mul.Tensor-float32-offset-native")
    assert entry is not None and entry.failures, text
    same = "[values] output: 7/9 elements differ (max abs 2, max rel 0.3, rtol 1.3e-06, atol 1e-05); first at (1, 2): device 4.0 vs cpu 2.0"  # noqa: E501
    assert entry.expects("values", same)  # the same bug at other numbers
    other = "[values] output 1: written outside the view: 2 elements changed"
    assert not entry.expects("values", other)  # a second bug of the same check


def test_a_failure_noted_as_another_one_is_pinned_without_the_note(tmp_path):
    """A run adds "(the manifest entry ... expects a [rounding] failure ...: this is another
    one)" to a failure its case's entry did not expect; the rewritten manifest pinned that note,
    and the next run's failure (judged before any note) was another one again (torch_xla:
    `_to_copy`, 2026-12-01)."""
    head = (
        "[values] output: 1/9 elements differ (max abs 1, max rel 1, rtol 0, atol 0); first at "
        "(5,): device False vs cpu True"
    )
    text = '[[entry]]\npattern = "mul.Tensor-*"\ncheck = "rounding"\nfailure = "[rounding] x"\n'
    text += 'category = "backend-bug"\nreason = "r"\n'
    note = (
        _load(tmp_path, text, "old.toml")
        .entries[0]
        .not_expected_note("mul.Tensor-float32-offset-native")
    )
    failing = {"mul.Tensor-float32-offset-native": ("failed", "values", head + note + "\n  ...")}
    text = baseline([({}, _run(failing))], None).files[""]
    assert "another one" not in text, text
    entry = _load(tmp_path, text).match("mul.Tensor-float32-offset-native")
    assert entry is not None and entry.expects("values", head)  # as the next run words it


def test_an_entry_s_line_is_its_own_not_a_comment_naming_its_cases(tmp_path):
    """A baseline's comments repeat case ids in repro lines: an entry's source named the
    comment's line, which after a rewrite held another entry."""
    text = (
        "# repro: pytest 'x[abs-float32-offset-native]'\n[[entry]]\n"
        'pattern = "abs-float32-offset-native"\nstatus = "xfail"\ncategory = "flaky"\n'
        'reason = "r"\n'
    )
    (entry,) = _load(tmp_path, text).entries
    assert entry.source.endswith(":3"), entry.source  # its pattern line, not the comment


def test_each_entry_names_its_own_line_and_a_crash_entry_survives_a_rewrite(tmp_path):
    """An entry's first pattern inside another entry's pattern (torch_xla's manifest:
    `avg_pool2d-*-zero_dim-*` in `_adaptive_avg_pool2d-*-zero_dim-*`) named that entry's line:
    two entries shared one source, and a rewrite took the crash entry (its cases skipped) for
    the other and dropped it, so the next run crashed in 23 ops. Records written with such a
    source are carried by the entry that matches their case."""
    text = (
        '[[entry]]\npattern = ["mul.Tensor-float64-offset-*", "xadd.Tensor-int64-*"]\n'
        'status = "crash"\ncategory = "backend-bug"\nreason = "segfault"\n\n'
        '[[entry]]\npattern = "add.Tensor-int64-*"\nstatus = "xfail"\ncheck = "values"\n'
        'category = "backend-bug"\nreason = "wrong"\n'
    )
    old = _load(tmp_path, text, "old.toml")
    crash, wrong = old.entries
    assert crash.source.endswith(":2") and wrong.source.endswith(":8"), (crash, wrong)
    records = []
    for case in _universe():
        entry = old.match(case)
        if entry is crash:
            message = f"Skipped: crash: backend-bug: segfault [{crash.source}]"
            records.append(_rec(case, "skipped", message=message, expected_by=crash.source))
        elif entry is wrong:
            records.append(_rec(case, "xfailed", "values", expected_by=wrong.source))
        else:
            records.append(_rec(case))
    for written in ("as loaded", "by an older run: one source for both"):
        if written != "as loaded":
            for r in records:
                if r.get("expected_by") == wrong.source:
                    r["expected_by"] = crash.source
        new = _load(tmp_path, baseline([({}, records)], old).files[""], "new.toml")
        kept = next(e for e in new.entries if e.reason == "segfault")
        assert kept.status == "crash" and kept.patterns == crash.patterns, written
        again = next(e for e in new.entries if e.reason == "wrong")
        assert again.status == "xfail" and again.patterns == wrong.patterns, written


def test_a_reason_never_carries_a_machine_path() -> None:
    """A reason quoting a message that names a manifest or a source file by its absolute path
    keeps the repository-relative path or the file name (issue 56: reasons read elsewhere)."""
    from conformance.findings import portable

    quoted = "the manifest entry 'abs-*' at /work/main/matrices/expectations/x/torch-2.9.toml:12"
    assert (
        portable(quoted)
        == "the manifest entry 'abs-*' at matrices/expectations/x/torch-2.9.toml:12"
    )
    assert portable('INTERNAL ASSERT FAILED at "/pytorch/aten/src/Copy.cpp":7') == (
        'INTERNAL ASSERT FAILED at "Copy.cpp":7'
    )
    assert portable("3/5 elements, shape [2, 3]") == "3/5 elements, shape [2, 3]"


def test_a_failing_case_of_every_family_gets_its_entry_and_the_next_run_expects_it(tmp_path):
    """A scenario, a contract item and a collectives case (keyed `collectives:<c10d>:<case>`:
    the baseline once dropped those, so the next run failed on them) each get an entry whose
    pattern the manifest matches against the family's key, as the next run will."""
    from conformance.harness.families import registry

    ops = _run({}, _universe(("abs",)))
    family_rows = [
        {"id": "test_cnn_training", "op": "scenario", "overload": "test_cnn_training",
         "path": "scenario"},
        {"id": "test_event_elapsed_time", "op": "contract", "overload": "event-elapsed-time",
         "path": "contract"},
        {"id": "test_collective[all_reduce-SUM-float32-33-contiguous-w2-sync]",
         "op": "all_reduce", "overload": "SUM", "path": "collectives",
         "collective_key": "gloo:all_reduce-SUM-float32-33-contiguous-w2-sync"},
    ]  # fmt: skip
    for row in family_rows:
        row.update(status="failed", check="x", message="[x] wrong", repro="pytest ...",
                   torch="2.13.0", allocator="malloc")  # fmt: skip
    result = baseline([({}, ops + family_rows)], source="test")
    manifest = _load(tmp_path, result.files[""])
    keys = [registry().record_key(CaseRecord.from_json(r)) for r in family_rows]
    assert keys == [
        "scenario:test_cnn_training",
        "contract:event-elapsed-time",
        "collectives:gloo:all_reduce-SUM-float32-33-contiguous-w2-sync",
    ]
    assert all(manifest.match(k, "malloc") is not None for k in keys), result.files[""]
    assert {p for e in manifest.entries for p in e.patterns} == set(keys)

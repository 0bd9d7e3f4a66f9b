"""The mutation campaign: mutants installed on the run's own path (the backend wrapper) are
judged by the real suite, and classified; a miss that docs/POWER.md does not list fails
`--check`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.measure.mutants.campaign import Mutant, classify
from conformance.measure.mutants.install import WRAPPER
from conformance.measure.mutants.report import known_gaps, render
from conformance.record import CaseRecord, Status
from tests.helpers import REPO, clean_env, run_pytest

ABS = "test_matches_cpu[abs-float32-contiguous-native]"


def _record(id_: str, status: Status, op: str = "abs", check: str = "values") -> CaseRecord:
    return CaseRecord(
        id=id_,
        status=status,
        op=op,
        overload="default",
        check=check,
        message="1 element(s) beyond tolerance",
    )


CALLED = [{"event": "called"}]
CHANGED = [{"event": "called"}, {"event": "changed", "what": "4 ulp(s) off"}]


@pytest.mark.parametrize(
    "records, events, verdict",
    [
        ([_record(ABS, Status.FAILED)], CHANGED, "killed"),
        ([_record(ABS, Status.CRASHED)], CHANGED, "crashed"),
        ([_record(ABS, Status.ERROR)], CHANGED, "error"),
        (
            [_record("test_matches_cpu[exp-float32-contiguous-native]", Status.FAILED, "exp")],
            CHANGED,
            "killed-elsewhere",
        ),
        ([_record(ABS, Status.PASSED)], CHANGED, "survived"),
        ([_record(ABS, Status.PASSED)], CALLED, "equivalent"),
        ([_record(ABS, Status.PASSED)], [], "unreached"),
        ([_record(ABS, Status.NOT_RUN)], CHANGED, "survived"),  # --maxfail's leftovers
        ([_record("known", Status.FAILED)], CHANGED, "survived"),  # failed in the control too
    ],
)
def test_classify(records, events, verdict):
    assert classify(Mutant("abs", "ulp:4"), records, events, {"known"}).verdict == verdict


def test_a_survivor_no_check_of_this_device_can_see_is_unobservable():
    """A leak on a device without a memory counter: the run header says the leak check is left
    out; the campaign says so too, never a plain survivor or a kill."""
    passed = [_record(ABS, Status.PASSED)]
    leak = Mutant("abs", "leak-after-first")
    none = {"memory_counter": {"value": None, "how": "probed"}}
    assert classify(leak, passed, CHANGED, set(), none).verdict == "unobservable"
    some = {"memory_counter": {"value": "torch.accelerator.memory_allocated", "how": "probed"}}
    assert classify(leak, passed, CHANGED, set(), some).verdict == "survived"
    assert classify(Mutant("abs", "ulp:4"), passed, CHANGED, set(), none).verdict == "survived"


def test_a_write_past_the_end_is_caught_in_its_op(tmp_path):
    """The seed bug as an operator: one element past the end of the result's block, on a device
    whose heap the suite's red zones see (the control run's profile says so), fails the op
    that wrote it, by the memory check."""
    _campaign(tmp_path, "--mutant", "abs=write-past-end", "--jobs", "1")
    (result,) = map(json.loads, (tmp_path / "out/mutants.jsonl").open())
    assert result["verdict"] == "killed", result
    assert "[memory]" in result["message"] and "past the end of a heap block" in result["message"]


def test_a_write_past_the_end_is_held_back_where_the_host_cannot_see_the_memory():
    """Without heap zones (a real GPU's memory) the operator never writes: unobservable."""
    passed = [_record(ABS, Status.PASSED)]
    mutant = Mutant("abs", "write-past-end")
    assert classify(mutant, passed, CALLED, set(), {}).verdict == "unobservable"
    seen = {"heap_zones": {"value": "_C.so", "how": "probed"}}
    assert classify(mutant, passed, CALLED, set(), seen).verdict == "equivalent"


def test_a_random_op_moved_within_its_law_is_unobservable_and_beyond_it_survives():
    """A random op's contract is its law: draws moved less than a law test of them can see are
    unobservable (named as such), never equivalent nor a plain survivor; one change beyond the
    law on any call is a survivor."""
    passed = [_record("test_matches_cpu[normal_-float32-contiguous-native]", Status.PASSED)]
    within = [{"event": "called"}, {"event": "within-law", "what": "1 ulp(s) off (D 0.01)"}]
    mutant = Mutant("normal_", "ulp:1")
    unseen = classify(mutant, passed, within, set())
    assert unseen.verdict == "unobservable" and "D 0.01" in unseen.message
    assert classify(mutant, passed, within + CHANGED[1:], set()).verdict == "survived"
    table = render([unseen], {})  # out of the score, listed with why
    assert "| `normal_=ulp:1` | 1 ulp(s) off (D 0.01)" in table


def test_the_law_shift_sees_moved_laws_and_left_supports():
    """values.law_shift: a draw a few ulps off moves no law a test sees; draws shifted by their
    spread, integers made fractional, a finite draw made NaN do."""
    import torch

    from conformance.measure.mutants import values

    torch.manual_seed(0)
    x = torch.randn(131072)
    assert values.law_shift(x, values.ulps(4)(x)) < values.LAW_RESOLUTION
    assert values.law_shift(x, values.sign_of_small()(x)) < values.LAW_RESOLUTION  # symmetric
    assert values.law_shift(x, values.off(x)) > values.LAW_RESOLUTION
    assert values.law_shift(x, x + 0.05) > values.LAW_RESOLUTION  # 5 % of a sigma
    ints = torch.randint(0, 1000, (4096,)).float()
    assert values.law_shift(ints, values.ulps(1)(ints)) == float("inf")
    one = torch.tensor([-2.0])  # one integral draw is no integer law
    assert values.law_shift(one, values.ulps(1)(one)) < values.LAW_RESOLUTION
    assert values.law_shift(one, torch.tensor([1e30])) == float("inf")  # few draws, far moved
    few = torch.randint(0, 9, (25,))
    assert values.law_shift(few, few + 1) == float("inf")
    nan = x.clone()
    nan[0] = float("nan")
    assert values.law_shift(x, nan) == float("inf")


def test_known_gaps_are_read_from_their_block(tmp_path):
    doc = tmp_path / "POWER.md"
    doc.write_text(
        "- `x=y`: outside\n<!-- mutants-known:begin -->\n- `exp*=ulp:1`: within the"
        " bound\n<!-- mutants-known:end -->\n"
    )
    assert known_gaps(doc) == {"exp*=ulp:1": "within the bound"}


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m conformance.measure.mutants ARGS` from the repository root."""
    command = [sys.executable, "-m", "conformance.measure.mutants", *args]
    return subprocess.run(
        command, cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=timeout
    )


def _campaign(tmp_path: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return _cli("--out", str(tmp_path / "out"), *args, timeout=timeout)


def _mutant_env(mutants: str) -> dict[str, str]:
    """The environment a suite run needs to install `mutants` (`OVERLOAD=OPERATOR;...`)."""
    return {"CONFORMANCE_BACKEND_WRAPPER": WRAPPER, "CONFORMANCE_MUTANTS": mutants}


def test_mutants_are_judged_by_the_real_suite_and_classified(tmp_path):
    known = tmp_path / "known.md"
    known.write_text("<!-- mutants-known:begin -->\n<!-- mutants-known:end -->\n")
    done = _campaign(
        tmp_path,
        "--known",
        str(known),
        "--check",
        "--mutant",
        "abs=ulp:4",
        "--mutant",
        "abs.out=out-ignored",
        "--mutant",
        "exp=negzero",
        "--mutant",
        "neg=ulp:1",
        "--",  # each verdict shows in float32 alone (all dtypes: 54 s of the self-tests)
        "--dtypes",
        "float32",
    )
    results = {r["name"]: r for r in map(json.loads, (tmp_path / "out/mutants.jsonl").open())}
    assert results["abs=ulp:4"]["verdict"] == "killed", done.stderr
    assert results["abs=ulp:4"]["case"].startswith("test_matches_cpu[abs-")
    assert results["abs.out=out-ignored"]["verdict"] == "killed"
    assert results["exp=negzero"]["verdict"] == "equivalent"  # exp never returns -0.0
    assert results["neg=ulp:1"]["verdict"] == "killed"  # neg is exact: one ulp is wrong
    assert done.returncode == 0, done.stdout + done.stderr  # no miss, the control passed
    assert "control: 0 failing case(s)" in done.stdout


def test_a_failure_of_another_family_kills_the_mutant_its_run_was_for():
    """The other families' records name items (a contract item), never the overload: in their
    run every new failure is the mutant's, and one that failed in their control is not."""
    contract = _record("test_record_stream", Status.FAILED, op="contract", check="contract")
    mutant = Mutant("record_stream", "version-not-bumped")
    assert classify(mutant, [contract], CHANGED, set(), anywhere=True).verdict == "killed"
    already = {"test_record_stream"}
    assert classify(mutant, [contract], CHANGED, already, anywhere=True).verdict == "survived"


@pytest.mark.slow
def test_a_kernel_no_op_case_calls_is_judged_by_the_other_families(tmp_path):
    """record_stream has no op case; the runtime contract calls it (once): the mutant is run
    again over every other family, and found called, never `unreached`. The runs are narrowed
    to the items that name it, as a user's `-- -k` narrows every run of a campaign (the whole
    of every other family, run once as the control and once stopping at a failure, took six
    minutes of the slow self-tests)."""
    _campaign(tmp_path, "--mutant", "record_stream=leak-after-first", "--", "-k", "record_stream")
    (result,) = map(json.loads, (tmp_path / "out/mutants.jsonl").open())
    assert result["verdict"] == "equivalent", result  # its one call keeps nothing
    assert (tmp_path / "out/runs/record_stream=leak-after-first/all/run.json").exists()


def test_a_kernel_registered_at_the_autograd_key_alone_is_mutated_there(tmp_path):
    """echo_npu's gelu has a kernel at AutogradPrivateUse1 only (issue 80): the campaign plans
    it, wraps it at that key, and the op cases that now judge it kill the mutant."""
    done = _campaign(tmp_path, "--mutant", "gelu=ulp:64")
    results = {r["name"]: r for r in map(json.loads, (tmp_path / "out/mutants.jsonl").open())}
    assert results["gelu=ulp:64"]["verdict"] == "killed", done.stdout + done.stderr
    assert results["gelu=ulp:64"]["case"].startswith("test_matches_cpu[gelu-")


def test_a_survivor_fails_check_unless_a_known_gap(tmp_path):
    known = tmp_path / "known.md"
    known.write_text("<!-- mutants-known:begin -->\n<!-- mutants-known:end -->\n")
    float32 = ("--", "--dtypes", "float32")  # the survivor shows in float32 alone
    done = _campaign(tmp_path, "--known", str(known), "--check", "--mutant", "exp=ulp:1", *float32)
    assert done.returncode == 1 and "| `exp=ulp:1` | survived | NEW |" in done.stdout, done.stdout
    known.write_text(
        "<!-- mutants-known:begin -->\n- `exp=ulp:1`: within 2 ulps\n<!-- mutants-known:end -->\n"
    )
    done = _campaign(tmp_path, "--known", str(known), "--check", "--mutant", "exp=ulp:1", *float32)
    assert done.returncode == 0 and "within 2 ulps" in done.stdout, done.stdout


def test_bad_input_is_one_line(tmp_path):
    for args, words in (
        (["--ops", "no_such_op*"], "--ops 'no_such_op*' matches none"),
        (["--mutant", "abs=no-such-operator"], "not OVERLOAD=OPERATOR"),
        (["--mutant", "cosh=ulp:1"], "has no kernel of backend"),
    ):
        done = _campaign(tmp_path, *args)
        assert done.returncode == 2 and words in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_the_wrapper_is_named_in_the_header_and_a_bad_one_is_one_line():
    env = _mutant_env("abs=none")
    done = run_pytest(
        "conformance", "--ops", "abs", "--dtypes", "float32", "--results", "none", env=env
    )
    assert done.returncode == 0, done.stdout
    assert "kernels wrapped by conformance.measure.mutants.install:wrap" in done.stdout
    done = run_pytest(
        "conformance",
        "--ops",
        "abs",
        "--results",
        "none",
        env={**env, "CONFORMANCE_MUTANTS": "abs=bogus"},
    )
    assert done.returncode != 0 and "not OVERLOAD=OPERATOR" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_memory_kept_only_on_large_calls_is_a_leak():
    """Issue 79, hole 4: "kept once" re-ran only a case's first sample, so a relu keeping 16 KiB
    on every call past 1,024 elements passed its -sizes cases (first sample small) as "kept once
    ... not a leak". Every sample runs again now."""
    env = _mutant_env("relu=leak-past-size")
    done = run_pytest(
        "conformance",
        "--ops",
        "relu",
        "-k",
        "sizes",
        "--dtypes",
        "float32",
        "--results",
        "none",
        "-p",
        "no:xdist",
        env=env,
    )
    assert done.returncode == 1 and "leak: " in done.stdout, done.stdout
    assert "kept once" not in done.stdout


@pytest.mark.slow
def test_the_ci_sample_of_mutants_has_no_new_miss(tmp_path):
    """CI's seeded sample of the campaign (issue 79): every mutant killed, equivalent, or a
    known gap docs/POWER.md lists; the identity changes no verdict. The nightly runs all of it
    (nox -s mutants); $CONFORMANCE_MUTANT_SEED picks another sample. No --budget: every
    mutant of the sample is judged, so the figure CI checks does not shrink on a slower machine
    (200 s judged all 40 on one machine and would have left some `not-run` on CI's). Its time
    limit is a hang guard, not a speed target: on a clean clone the control captures the
    samples of its 33 overloads cold (170 s alone on a 2-core machine, 110 s warm), and CI runs
    it beside the other slow tests on a slower machine, where 600 s was once not enough."""
    done = _campaign(
        tmp_path,
        "--sample",
        "40",
        "--check",
        "--seed",
        os.environ.get("CONFORMANCE_MUTANT_SEED", "79"),
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]


@pytest.mark.parametrize(
    "mutant, dtype, check",
    [
        # the first campaign: CPU's exactness was never measured for an in-place foreach op
        # (it returns nothing), so no foreach op's last bit was judged in any dtype
        ("_foreach_mul_.Scalar=ulp:1", "float32", "rounding"),
        # float64 has no wider truth: a correctly rounded op is held within 1 ulp of CPU's
        ("_foreach_mul_.Scalar=ulp:4@float64", "float64", "rounding"),
        ("mul.Tensor=ulp:4@float64", "float64", "rounding"),
        # the identity check's second call (below autograd) wrote unjudged values
        ("relu_=call:2", "float32", "values"),
        ("mul.out=call:2", "float32", "values"),
        # a random op's second call: its draws were never judged (they move on)
        ("normal_=call:2", "float32", "values"),
        ("random_.from=call:2", "float32", "values"),
        # the fused cells: a few ulps one way on every element, within float32's atol
        ("_thnn_fused_lstm_cell=ulp:4", "float32", "rounding"),
        ("_thnn_fused_gru_cell_backward=ulp:4@float64", "float64", "rounding"),
        # resize_'s kept contents were judged by the tolerance, with nothing special in them
        ("resize_=nan-to-zero", "float32", "values"),
        ("resize_=ulp:1", "float64", "values"),
        # set_ computes nothing: its values are the source's bits
        ("set_.source_Storage=ulp:4@float64", "float64", "rounding"),
        # any/all samples whose answer hangs on every element (read on a strided layout)
        ("any=strided-as-contiguous", "bool", "values"),
        ("all=strided-as-contiguous", "float32", "values"),
        # the cells' workspace, read by their backward: the forward's -grad cases run it
        ("_thnn_fused_gru_cell=past:1024:unwritten", "float32", "grad"),
        # out= captured as empty_like(answer) could hold the answer: its last element unwritten
        ("abs.out=last:unwritten", "float32", "values"),
        ("add.out=last:unwritten", "int64", "values"),
    ],
)
def test_holes_the_campaign_found_stay_closed(mutant, dtype, check):
    overload = mutant.split("=")[0]
    env = _mutant_env(mutant)
    done = run_pytest(
        "conformance",
        "--ops",
        overload,
        "--dtypes",
        dtype,
        "--layouts",
        "noncontiguous" if "strided" in mutant else "contiguous",
        "--values",
        "ordinary",
        "--modes",
        "grad" if check == "grad" else "none",
        "--results",
        "none",
        "-p",
        "no:xdist",
        env=env,
    )
    assert done.returncode == 1 and f"1. {check}: " in done.stdout, done.stdout[-3000:]


def test_render_merges_campaigns_the_later_verdict_winning(tmp_path):
    first, again = tmp_path / "first", tmp_path / "again"
    for folder, verdict in ((first, "survived"), (again, "killed")):
        folder.mkdir()
        rows = [
            {"overload": "abs", "operator": "ulp:4", "verdict": verdict},
            {"overload": "exp", "operator": "negzero", "verdict": "equivalent"},
        ]
        rows = rows if folder is first else rows[:1]
        (folder / "mutants.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    known = tmp_path / "known.md"
    known.write_text("")
    done = _cli(
        "--render",
        str(first),
        str(again),
        "--known",
        str(known),
        "--check",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 mutants: 1 killed, 1 equivalent; score 100.0 % (1 of 1 judged" in done.stdout
    done = _cli(
        "--render",
        str(first),
        "--known",
        str(known),
        "--check",
    )
    assert done.returncode == 1 and "| `abs=ulp:4` | survived | NEW |" in done.stdout

"""The sample summary (samples/summary.py): start-up answers the coverage and mode
accounts from disk, with the same answers as building the samples.

Before it, every pytest process, xdist worker and spawned runner built every sample of every
selected overload at start-up (55 s and 0.8 GiB for a backend of 1,400 overloads)."""

from __future__ import annotations

import os

import torch

from conformance import samples
from conformance.harness import sampling
from conformance.ops import spec_for
from conformance.samples import summary
from conformance.samples.summary import SampleSummary
from tests.harness.test_cases import make_suite

OPTIONS = {"ops": "abs,add.out,masked_fill_.Scalar,_softmax", "dtypes": "float32,int64"}


def _refuse_to_build(monkeypatch) -> list[str]:
    """Fail building any samples but those of op specs with samples of their own (code: asked
    every run); returns the overloads whose samples were built anyway."""
    built: list[str] = []
    real = samples.calls_for

    def calls_for(overload, *args, **kwargs):
        built.append(overload)
        if spec_for(overload).samples is not None:
            return real(overload, *args, **kwargs)
        raise AssertionError(f"start-up built the samples of {overload}")

    monkeypatch.setattr(samples, "calls_for", calls_for)
    return built


def test_a_second_process_builds_no_samples_and_sees_the_same_run(tmp_path, monkeypatch):
    first = make_suite(tmp_path, **OPTIONS)
    cases = first.case_list.collected_cases()
    assert any(c.values == "grad" for c in cases)  # the mode account asked CPU
    built = _refuse_to_build(monkeypatch)
    second = make_suite(tmp_path, **OPTIONS)
    assert second.case_list.collected_cases() == cases
    assert second.case_list.coverage.to_json() == first.case_list.coverage.to_json()
    assert second.mode_account() == first.mode_account()
    assert set(built) == {"masked_fill_.Scalar"}  # its op spec gives its samples


def test_edited_sample_sources_are_asked_again(tmp_path, monkeypatch):
    old = make_suite(tmp_path, **OPTIONS)
    old.case_list.collected_cases()
    monkeypatch.setattr(summary, "sources_digest", lambda: "edited")
    built = _refuse_to_build(monkeypatch)
    new = make_suite(tmp_path, ops="abs", dtypes="float32", modes="none")
    assert built == ["abs"]
    assert os.path.exists(new.samples.summary.path)
    assert not os.path.exists(old.samples.summary.path)


def test_a_failure_to_build_samples_is_remembered_word_for_word(tmp_path, monkeypatch):
    real = samples.calls_for

    def calls_for(overload, *args, **kwargs):
        if overload == "abs":
            raise TypeError("a broken sample source\nsecond line")
        return real(overload, *args, **kwargs)

    monkeypatch.setattr(samples, "calls_for", calls_for)
    first = make_suite(tmp_path, **OPTIONS)
    assert first.case_list.coverage.sample_errors == {"abs": "TypeError: a broken sample source"}
    first.case_list.collected_cases()
    _refuse_to_build(monkeypatch)
    second = make_suite(tmp_path, **OPTIONS)
    assert second.case_list.coverage.sample_errors == first.case_list.coverage.sample_errors
    assert second.mode_account() == first.mode_account()


def test_processes_writing_at_once_keep_what_each_learned(tmp_path):
    a, b = SampleSummary(str(tmp_path)), SampleSummary(str(tmp_path))
    a.remember("abs|float32|8|count", lambda: 3)
    b.remember("neg|float32|8|count", lambda: 5)
    a.save()
    b.save()  # merges a's answer rather than replacing it
    c = SampleSummary(str(tmp_path))
    assert c.remember("abs|float32|8|count", lambda: -1) == 3
    assert c.remember("neg|float32|8|count", lambda: -1) == 5


def test_a_torn_summary_file_is_rebuilt(tmp_path):
    s = SampleSummary(str(tmp_path))
    with open(s.path, "w") as f:
        f.write('{"abs|float32|8|count": 3, "ne')
    assert SampleSummary(str(tmp_path)).remember("abs|float32|8|count", lambda: 4) == 4


def test_a_process_keeps_the_samples_of_a_bounded_number_of_keys(tmp_path, monkeypatch):
    monkeypatch.setattr(sampling, "CALLS_KEPT", 3)
    s = make_suite(tmp_path, ops="abs", dtypes="float32", modes="none")
    monkeypatch.setattr(samples, "calls_for", lambda overload, dtype, *a, **k: [overload])
    for name in ("a", "b", "c", "d"):
        s.samples.calls(name, torch.float32)
    s.samples.calls("b", torch.float32)  # used again: kept
    s.samples.calls("e", torch.float32)
    assert [key[0] for key in s.samples._calls] == ["d", "b", "e"]

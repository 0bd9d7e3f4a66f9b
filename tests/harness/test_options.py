"""Options (harness/options.py): declared once, read from the command line, else the environment,
else the default; bad values are one-line usage errors."""

from __future__ import annotations

import pytest
import torch

from conformance.errors import ConformanceUsageError
from conformance.harness.families import registry
from conformance.harness.options import env_of, flag_of, option_fields, read_options


class FakeConfig:
    """Just what read_options asks of a pytest config."""

    def __init__(self, **given: str) -> None:
        self.given = given

    def getoption(self, dest: str):
        return self.given.get(dest.removeprefix("conformance_"))


def test_every_field_is_an_option_with_flag_env_and_help() -> None:
    for f in option_fields():
        assert f.metadata["help"], f.name
        assert flag_of(f.name).startswith("--") and env_of(f.name).startswith("CONFORMANCE_")
    assert flag_of("fallback_ops") == "--fallback-ops"
    assert env_of("repro_dir") == "CONFORMANCE_REPRO_DIR"


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for f in option_fields():
        monkeypatch.delenv(env_of(f.name), raising=False)
    o = read_options(FakeConfig())
    assert o.backend is None and o.device is None and o.ops is None  # None: autoload or echo_npu
    assert torch.float32 in o.dtypes and o.paths == ["native", "fallback"]
    assert o.isolate == "auto" and o.results == "results" and o.expectations is None
    assert o.case_timeout == 300 and o.given == {}


def test_command_line_beats_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONFORMANCE_DTYPES", "int64")
    monkeypatch.setenv("CONFORMANCE_OPS", "abs, add.*")
    o = read_options(FakeConfig(dtypes="float16", results="none", expectations="none"))
    assert o.dtypes == [torch.float16] and o.ops == ["abs", "add.*"]
    assert o.results is None and o.expectations == []


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"dtypes": "float33"}, "unknown dtype 'float33'"),
        ({"layouts": "diagonal"}, "unknown layout(s) diagonal"),
        ({"paths": "sideways"}, "unknown path(s) sideways"),
        ({"isolate": "thread"}, "--isolate 'thread': valid values are auto, fork, spawn, none"),
        ({"case_timeout": "soon"}, "--case-timeout 'soon': give a number of seconds"),
        ({"runners": "0"}, "--runners '0': use 'auto' or a whole number >= 1"),
    ],
)
def test_bad_values_are_one_line_errors(given: dict, message: str) -> None:
    with pytest.raises(ConformanceUsageError) as info:
        read_options(FakeConfig(**given))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_help_lists_every_option(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--help")
    text = result.stdout.str()
    declared = [f for d in registry().option_classes().values() for f in option_fields(d)]
    for f in [*option_fields(), *declared]:
        assert flag_of(f.name) in text and env_of(f.name) in text


def test_a_family_declares_its_own_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """The collectives' four options are the family's (Family.options), not the harness's:
    read with the suite's, kept in `given` for repro lines, one-line errors as any."""
    from conformance.harness.families.collectives_plan import CollectivesOptions

    families = registry().option_classes()
    assert families["collectives"] is CollectivesOptions
    assert not {f.name for f in option_fields()} & {
        f.name for f in option_fields(CollectivesOptions)
    }
    for f in option_fields(CollectivesOptions):
        monkeypatch.delenv(env_of(f.name), raising=False)
    o = read_options(FakeConfig(collectives="gloo:cpu", world_sizes="2"), families)
    own = o.family("collectives", CollectivesOptions)
    assert (own.collectives, own.world_sizes, own.collectives_set) == ("gloo:cpu", "2", "auto")
    assert o.flags() == ["--collectives=gloo:cpu", "--world-sizes=2"]
    monkeypatch.setenv("CONFORMANCE_COLLECTIVE_TIMEOUT", "7")
    assert (
        read_options(FakeConfig()).family("collectives", CollectivesOptions).collective_timeout == 7
    )
    with pytest.raises(ConformanceUsageError, match="--collectives 'a b'"):
        read_options(FakeConfig(collectives="a b"), families)


def test_given_keeps_the_raw_text_of_what_the_user_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for f in option_fields():
        monkeypatch.delenv(env_of(f.name), raising=False)
    monkeypatch.setenv("CONFORMANCE_ISOLATE", "spawn")
    o = read_options(FakeConfig(fallback_ops="masked_fill.*", dtypes="float32,int64"))
    assert o.given == {
        "fallback_ops": "masked_fill.*",
        "dtypes": "float32,int64",
        "isolate": "spawn",
    }
    # a repro narrows the case-selecting options and drops what it replaces
    assert o.flags(dtypes="int64", fallback_ops="masked_fill.Tensor", results=None) == [
        "--fallback-ops=masked_fill.Tensor",
        "--dtypes=int64",
        "--isolate=spawn",
    ]


def test_the_modes_help_names_every_mode_with_what_it_does():
    """--modes help is generated from the modes' modules (it was written by hand and missed
    repeat and asynchronous)."""
    from conformance.engine.mode_names import MODES, summary
    from conformance.harness.options import option_fields

    (field,) = [f for f in option_fields() if f.name == "modes"]
    text = field.metadata["help"]
    for mode in MODES:
        assert summary(mode), f"engine/modes/{mode}.py declares no summary"
        assert f"{mode} ({summary(mode)})" in text


@pytest.mark.parametrize(
    ("given", "mode", "exclusive", "runners"),
    [
        ("auto", "fork", False, "cores"),  # one per usable core, at most AUTO_RUNNERS
        ("auto", "spawn", False, 1),  # a spawned runner costs an interpreter and a collection
        ("auto", "fork", True, 1),  # a device one process may open at a time
        ("3", "fork", False, 3),
        ("3", "spawn", False, 3),  # asked for: spawned ones too
        ("3", "fork", True, 1),  # never two processes on such a device
        ("3", "in-process", False, 1),
    ],
)
def test_runners_of_a_plain_pytest_process(given, mode, exclusive, runners, monkeypatch) -> None:
    """--runners: how many runners a plain pytest process runs its cases in at once."""
    from types import SimpleNamespace

    from conformance.harness import plan as planning

    monkeypatch.setattr(planning.os, "sched_getaffinity", lambda pid: set(range(16)))
    options = read_options(FakeConfig(runners=given))
    probe = SimpleNamespace(exclusive=(exclusive, "the probe said so"))
    chosen = planning.Plan(mode, probe)  # type: ignore[arg-type]
    expected = planning.AUTO_RUNNERS if runners == "cores" else runners
    assert planning.runners_of(options, chosen) == expected

"""Options (harness/options.py): declared once, read from the command line, else the environment,
else the default; bad values are one-line usage errors."""

from __future__ import annotations

from dataclasses import fields

import pytest
import torch

from conformance.errors import ConformanceUsageError
from conformance.harness.options import Options, env_of, flag_of, read_options


class FakeConfig:
    """Just what read_options asks of a pytest config."""

    def __init__(self, **given: str) -> None:
        self.given = given

    def getoption(self, dest: str):
        return self.given.get(dest.removeprefix("conformance_"))


def test_every_field_is_an_option_with_flag_env_and_help() -> None:
    for f in fields(Options):
        assert f.metadata["help"], f.name
        assert flag_of(f.name).startswith("--") and env_of(f.name).startswith("CONFORMANCE_")
    assert flag_of("fallback_ops") == "--fallback-ops"
    assert env_of("repro_dir") == "CONFORMANCE_REPRO_DIR"


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for f in fields(Options):
        monkeypatch.delenv(env_of(f.name), raising=False)
    o = read_options(FakeConfig())
    assert o.backend == "echo_npu" and o.device is None and o.ops is None
    assert torch.float32 in o.dtypes and o.paths == ["native", "fallback"]
    assert o.isolate == "auto" and o.results == "results" and o.expectations is None


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
        ({"isolate": "thread"}, "--isolate 'thread': valid values are auto, fork, none"),
    ],
)
def test_bad_values_are_one_line_errors(given: dict, message: str) -> None:
    with pytest.raises(ConformanceUsageError) as info:
        read_options(FakeConfig(**given))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_help_lists_every_option(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--help")
    text = result.stdout.str()
    for f in fields(Options):
        assert flag_of(f.name) in text and env_of(f.name) in text

"""The dynamic-shape part of the -compile cases (engine/dynamic_shapes.py), on CPU with `aot_eager`
(no C++ compile): a call at two sizes compiles two graphs and reuses them; a backend whose
graphs are compiled again for a call seen before is named, with the count."""

from __future__ import annotations

import pytest
import torch

from conformance.engine.calls import Call
from conformance.engine.compare import ErrorStats
from conformance.engine.discovery import resolve
from conformance.engine.dynamic_shapes import CompileEvidence, DynamicMismatch, run_dynamic
from conformance.engine.placing import place


def _dynamic(compiler: str, *shapes: tuple[int, ...]) -> CompileEvidence:
    op = resolve("abs")
    placed = [place(Call("abs", (torch.randn(s),)), "contiguous", op._schema) for s in shapes]
    evidence = CompileEvidence()
    run_dynamic(op, placed, "cpu", compiler, 1.0, ErrorStats(), evidence)
    return evidence


def test_two_sizes_compile_two_graphs_and_reuse_them():
    evidence = _dynamic("aot_eager", (4, 3), (6, 3))
    assert evidence.graphs == 2
    assert evidence.dynamic == "[(4, 3)] and [(6, 3)] (two samples): results equal, no recompile"


def test_one_sample_is_repeated_on_dim_0_for_its_second_size():
    evidence = _dynamic("aot_eager", (4, 3))
    assert evidence.dynamic.startswith("[(4, 3)] and [(8, 3)] (a sample, then repeated on dim 0)")


@pytest.fixture
def forgetful_backend():
    """A backend whose compiled graph drops Dynamo's caches when it runs (as a backend that
    resets its compile state at every sync would): every call compiles again."""
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    name = "conformance_test_forgetful"

    def forgetful(gm, example_inputs):
        def run(*args):
            torch._dynamo.reset()
            return gm(*args)

        return run

    register_backend(forgetful, name=name)
    yield name
    _BACKENDS.pop(name, None)


def test_a_call_seen_before_that_compiles_again_is_named(forgetful_backend):
    with pytest.raises(DynamicMismatch) as info:
        _dynamic(forgetful_backend, (4, 3), (6, 3))
    assert info.value.check == "compile"
    assert "the first size again [(4, 3)]: compiled again (3 graphs for 2 sizes)" in str(info.value)

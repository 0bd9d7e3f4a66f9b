"""Scenario 9: torch.export on the device. The small CNN and the tiny Qwen2 (the models of the
workloads) are exported with device inputs and weights, decomposed to the core ATen set
(`run_decompositions()`, whose overloads are in the default run through the workloads' golden
list), run and compared with the device's eager result and CPU's; then the program goes through
`torch.export.save` / `torch.export.load` with its device tensors and runs again."""

from __future__ import annotations

import io

import pytest
import torch

from conformance.engine.workload_models import exported_models
from conformance.scenarios._helpers import assert_same, step

MODELS = ("small_cnn", "tiny_qwen2")


def _model(name: str, device: torch.device | None):
    if name == "tiny_qwen2":
        pytest.importorskip("transformers")
    found = {n: (m, a) for n, m, a in exported_models(with_qwen2=name == "tiny_qwen2")}
    model, args = found[name]
    if device is None:
        return model, args
    return model.to(device), tuple(a.to(device) for a in args)


@pytest.mark.parametrize("name", MODELS)
def test_exported_program_on_the_device_matches_eager_and_cpu(device, name):
    cpu_model, cpu_args = _model(name, None)
    with torch.no_grad():
        expected = cpu_model(*cpu_args)
    model, args = _model(name, device)
    step(f"eager {name} on the device")
    with torch.no_grad():
        eager = model(*args)
    assert_same(eager, expected, f"eager {name}")
    step(f"torch.export.export of {name} with device inputs")
    program = torch.export.export(model, args)
    step(f"run_decompositions() of {name} (core ATen)")
    program = program.run_decompositions()
    on_device = [
        (k, v.device) for k, v in program.state_dict.items() if v.device.type != device.type
    ]
    assert not on_device, f"exported {name}: weights not on the device: {on_device[:3]}"
    step(f"the exported {name} on the device")
    with torch.no_grad():
        got = program.module()(*args)
    assert_same(got, expected, f"exported {name} (core ATen) against cpu eager")
    assert_same(got, eager.cpu(), f"exported {name} (core ATen) against the device's eager")
    step(f"torch.export.save / load of {name} with device tensors")
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    buffer.seek(0)
    loaded = torch.export.load(buffer)
    moved = [(k, v.device) for k, v in loaded.state_dict.items() if v.device != args[0].device]
    assert not moved, f"torch.export.load of {name}: weights moved: {moved[:3]}"
    with torch.no_grad():
        again = loaded.module()(*args)
    assert_same(again, expected, f"exported {name} after torch.export.save/load")

"""Scenario 3: torch.save / torch.load round trips of device tensors, views, slices, state_dict."""

from __future__ import annotations

import torch

from conformance.engine.transfer import has_storage
from conformance.scenarios._helpers import assert_same, step


def _tensors(device):
    torch.manual_seed(0)
    base = torch.randn(6, 5).to(device)
    return {
        "base": base,
        "transposed view": base.t(),
        "row slice (storage offset)": base[2:5],
        "column slice (strided, offset)": base[:, 1:4],
        "element (0-dim, offset)": base[3, 2],
        "int64": torch.arange(12).reshape(3, 4).to(device),
        "bool": (base > 0),
        "empty": torch.empty(0, 3, device=device),
    }


def test_save_load_tensors_views_and_slices(device, tmp_path):
    expected = _tensors(torch.device("cpu"))
    tensors = _tensors(device)
    for name, value in expected.items():
        step(f"copy to CPU: {name}")
        assert_same(tensors[name], value, f"before save: {name}")
    step("torch.save of device tensors and views")
    torch.save(tensors, tmp_path / "tensors.pt")
    step("torch.load to the device")
    loaded = torch.load(tmp_path / "tensors.pt", weights_only=True)
    for name, value in expected.items():
        assert loaded[name].device == tensors[name].device, f"torch.load: {name} device changed"
        if has_storage(tensors[name]):  # a lazy device's strides cannot be observed
            assert loaded[name].stride() == tensors[name].stride(), f"torch.load: {name} strides"
        assert_same(loaded[name], value, f"torch.save/torch.load round trip: {name}")
    # views keep sharing storage with their base after loading
    step("views of the loaded base")
    loaded["row slice (storage offset)"].fill_(7.0)
    assert_same(loaded["base"][2:5], torch.full((3, 5), 7.0), "write through a loaded slice")
    step("torch.load with map_location='cpu'")
    on_cpu = torch.load(tmp_path / "tensors.pt", map_location="cpu", weights_only=True)
    for name, value in expected.items():
        assert on_cpu[name].device.type == "cpu"
        assert_same(on_cpu[name], value, f"torch.load(map_location='cpu'): {name}")
    step("save a CPU file, load onto the device")
    torch.save(expected, tmp_path / "cpu.pt")
    moved = torch.load(tmp_path / "cpu.pt", map_location=device, weights_only=True)
    for name, value in expected.items():
        assert moved[name].device.type == device.type
        assert_same(moved[name], value, f"torch.load(map_location=device): {name}")


def _model():
    torch.manual_seed(1)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)
    ).eval()


def test_save_load_state_dict(device, tmp_path):
    cpu_model = _model()
    x = torch.randn(5, 8)
    expected = cpu_model(x).detach()
    step("model to device, state_dict save")
    dev_model = _model().to(device)
    torch.save(dev_model.state_dict(), tmp_path / "model.pt")
    step("state_dict load into a fresh model")
    fresh = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)
    ).to(device)
    state = torch.load(tmp_path / "model.pt", weights_only=True)
    for name, value in state.items():
        assert value.device.type == device.type, f"state_dict {name} loaded on {value.device}"
        assert_same(value, cpu_model.state_dict()[name], f"state_dict round trip: {name}")
    fresh.load_state_dict(state)
    with torch.no_grad():
        assert_same(fresh(x.to(device)), expected, "forward after load_state_dict")
    step("state_dict load onto CPU")
    cpu_state = torch.load(tmp_path / "model.pt", map_location="cpu", weights_only=True)
    cpu_fresh = _model()
    cpu_fresh.load_state_dict(cpu_state)
    with torch.no_grad():
        assert_same(cpu_fresh(x), expected, "CPU forward after loading the device state_dict")

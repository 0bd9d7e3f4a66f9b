"""Scenario 10: AOTInductor packages and the device (compiled-path scenarios: they run with
`--modes compile`, each package is a C++ build of 15-20 s).

- A package compiled for the device (a small model exported with device inputs,
  `aoti_compile_and_package`, `aoti_load_package`) runs and matches CPU eager.
- A package compiled for CPU, called with device inputs, must raise a clear error (a load on the
  wrong device), never crash or return silently.
- The device's package called with a shape outside the compiled one (with
  `AOTI_RUNTIME_CHECK_INPUTS=1`, the runtime check users turn on) must raise a clear error.

Each scenario runs in the runner process like any case: a crash is the scenario's record.
"""

from __future__ import annotations

import os

import pytest
import torch

from conformance.scenarios._helpers import assert_on, assert_same, step

pytestmark = pytest.mark.usefixtures("compile_mode_only")
# torch precompiles `aoti_include/<device>.h`, which exists for its own devices only: an
# out-of-tree device's package is built without precompiled headers
DEVICE_PACKAGE = {"aot_inductor.precompile_headers": False}


def _model(device: torch.device | str):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).eval()
    return model.to(device), torch.randn(3, 8).to(device)


def _package(device: torch.device | str, path: str) -> str:
    model, x = _model(device)
    step(f"torch.export + aoti_compile_and_package for {device}")
    program = torch.export.export(model, (x,))
    configs = {} if torch.device(device).type == "cpu" else DEVICE_PACKAGE
    return torch._inductor.aoti_compile_and_package(
        program, package_path=path, inductor_configs=configs
    )


def test_aoti_package_for_the_device_matches_cpu(device, tmp_path):
    path = _package(device, str(tmp_path / "model.pt2"))
    step("aoti_load_package on the device, run")
    runner = torch._inductor.aoti_load_package(path)
    model, x = _model("cpu")
    with torch.no_grad():
        expected = model(x)
    x = x.to(device)
    got = runner(x)
    assert_on(got, x.device, "AOTInductor package")
    assert_same(got, expected, "AOTInductor package on the device")


def test_aoti_package_for_cpu_given_device_inputs_raises(device, tmp_path):
    path = _package("cpu", str(tmp_path / "cpu.pt2"))
    runner = torch._inductor.aoti_load_package(path)
    _, x = _model(device)
    step("a package compiled for cpu called with device inputs")
    with pytest.raises(Exception) as info:  # noqa: PT011 - any clear error; a crash is the record
        got = runner(x)
        pytest.fail(f"a cpu package returned {type(got).__name__} for device inputs, no error")
    assert str(info.value).strip(), "the error says nothing"


def test_aoti_package_called_with_another_shape_raises(device, tmp_path, monkeypatch):
    monkeypatch.setenv("AOTI_RUNTIME_CHECK_INPUTS", "1")
    path = _package(device, str(tmp_path / "model.pt2"))
    runner = torch._inductor.aoti_load_package(path)
    step("the device's package called with a shape it was not compiled for")
    with pytest.raises(Exception) as info:  # noqa: PT011 - any clear error; a crash is the record
        got = runner(torch.randn(5, 8).to(device))
        pytest.fail(f"returned {tuple(got.shape)} for an input of 5 rows compiled for 3")
    assert str(info.value).strip(), "the error says nothing"
    assert os.environ["AOTI_RUNTIME_CHECK_INPUTS"] == "1"

"""Scenario 11: Inductor's C++ wrapper on the device (`torch.compile(options={"cpp_wrapper":
True})`, the wrapper AOTInductor packages too; compiled-path scenarios: `--modes compile` runs
them, each graph is a C++ build of seconds).

The C++ wrapper is another program than the Python one: it allocates through the AOTI C ABI
(`aoti_torch_empty_strided` with the device's type and index) and calls every op Inductor does
not compile itself through a C shim per device (`aoti_torch_<device>_<op>`). Each function mixes
kernels Inductor compiles with such ops (mm, sort, nonzero, topk); its results must match CPU
eager and the device's eager results, on the device and index of the inputs (the last index
too, while index 0 is current).

A device with no Inductor backend, or one with no C++ wrapper, is skipped with that reason.
"""

from __future__ import annotations

import pytest
import torch

from conformance.engine.compiling import inductor_load_error
from conformance.engine.device_keys import compiler_for
from conformance.engine.errorclass import first_line
from conformance.scenarios._helpers import assert_on, assert_same, step, to_cpu

pytestmark = pytest.mark.usefixtures("compile_mode_only")


def matmul_bias(x, w):
    return torch.relu(torch.mm(x, w) + 1.0)


def sort_scale(x):
    values, indices = torch.sort(x, dim=1)
    return values * 2.0, indices


def nonzero_rows(x):
    return torch.nonzero(x > 0), (x > 0).sum(dim=1)


def topk_softmax(x):
    values, indices = torch.topk(x, 3, dim=-1)
    return torch.softmax(values, dim=-1), indices


FUNCTIONS = {
    "matmul_bias": (matmul_bias, lambda: (torch.randn(4, 6), torch.randn(6, 5))),
    "sort_scale": (sort_scale, lambda: (torch.randn(3, 7),)),
    "nonzero_rows": (nonzero_rows, lambda: (torch.randn(4, 5),)),
    "topk_softmax": (topk_softmax, lambda: (torch.randn(2, 8),)),
}


def _cpp_wrapper_or_skip(device: torch.device) -> None:
    """Skip, naming why, where the device has no C++ wrapper; fail where its Inductor backend
    fails to load (that breaks CPU's compiles too: never a skip)."""
    from torch._inductor.codegen.common import (
        get_wrapper_codegen_for_device,
        init_backend_registration,
    )

    broken = inductor_load_error(device.type)
    if broken is not None:
        pytest.fail(f"the device's Inductor backend fails to load: {broken}")
    if compiler_for(device.type) != "inductor":
        pytest.skip(f"'{device.type}' has no Inductor backend: no C++ wrapper to check")
    init_backend_registration()  # registers the classes the device module hands over
    if get_wrapper_codegen_for_device(device.type, cpp_wrapper=True) is None:
        pytest.skip(f"'{device.type}' has an Inductor backend without a C++ wrapper")


def _compiled(fn, args):
    torch._dynamo.reset()
    # nonzero's output size depends on the data: keep it in the graph (a shim call), as torch
    # >= 2.13 does by default
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        return torch.compile(fn, fullgraph=True, options={"cpp_wrapper": True})(*args)


def _compiled_or_skip(fn, args, cpu_args):
    """The compiled result on the device; skipped with torch's reason where CPU's C++ wrapper
    cannot compile the function either (never the device's failure)."""
    try:
        return _compiled(fn, args)
    except Exception as device_error:  # noqa: BLE001 - compared with CPU's outcome below
        try:
            _compiled(fn, cpu_args)
        except Exception as cpu_error:  # noqa: BLE001 - torch's own limit
            reason = f"{type(cpu_error).__name__}: {first_line(cpu_error)}"
            pytest.skip(f"torch cannot compile it on cpu either: {reason}")
        raise device_error


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_cpp_wrapper_matches_eager(conformance_suite, device, name):
    _cpp_wrapper_or_skip(device)
    fn, make = FUNCTIONS[name]
    torch.manual_seed(0)
    inputs = make()
    expected = fn(*inputs)
    other = conformance_suite.backend.other_device  # the last index, where there are more
    for target in [device] + ([other] if other is not None else []):
        args = tuple(a.to(target) for a in inputs)
        where = args[0].device  # with its index
        step(f"eager {name} on {where}")
        eager = fn(*args)
        assert_same(eager, expected, f"eager {name} on {where}")
        step(f"torch.compile(cpp_wrapper=True) {name} on {where}")
        got = _compiled_or_skip(fn, args, inputs)
        assert_on(got, where, f"cpp_wrapper {name}")
        assert_same(got, expected, f"cpp_wrapper {name} on {where} vs CPU eager")
        assert_same(got, to_cpu(eager), f"cpp_wrapper {name} on {where} vs eager on the device")

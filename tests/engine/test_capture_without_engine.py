"""Capturing OpInfo samples never starts autograd's engine in the process that forks case
runners: a backward there would make every -grad case in a forked runner fail with "Unable to
handle autograd's threading in combination with fork-based multiprocessing"."""

from __future__ import annotations

import os

import torch

from conformance.engine.samples import opinfo


def _backward_works_in_a_forked_child() -> bool:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            x = torch.ones(2, requires_grad=True)
            (x * 2).sum().backward()
            code = 0
        finally:
            os._exit(code)
    return os.waitpid(pid, 0)[1] == 0


def test_capture_records_backward_overloads_without_the_engine() -> None:
    import echo_npu  # noqa: F401 - with a device registered the engine starts device threads

    captured = opinfo.capture("nn.functional.gelu", torch.float32)["samples"]
    assert "gelu_backward" in captured  # the backward was run, node by node
    assert _backward_works_in_a_forked_child()

"""Capturing OpInfo samples never starts autograd's engine in the process that forks case
runners: a backward there would make every -grad case in a forked runner fail with "Unable to
handle autograd's threading in combination with fork-based multiprocessing". Checked in a fresh
interpreter (a test process may have run backward already)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import os, torch
import echo_npu  # with a device registered the engine starts device threads
from conformance.samples import opinfo

captured = opinfo.capture("nn.functional.gelu", torch.float32)["samples"]
assert "gelu_backward" in captured, sorted(captured)  # the backward ran, node by node
pid = os.fork()
if pid == 0:
    code = 1
    try:
        x = torch.ones(2, requires_grad=True)
        (x * 2).sum().backward()
        code = 0
    finally:
        os._exit(code)
assert os.waitpid(pid, 0)[1] == 0, "a forked child cannot run backward"
print("OK")
"""


def test_capture_records_backward_overloads_without_the_engine() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr

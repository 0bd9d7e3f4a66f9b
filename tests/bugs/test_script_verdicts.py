"""A bug report's standalone script where the suite saw an error the script used to miss:

- on a device that raises only when a result is read (a lazy device: torch_xla's lowering errors
  surface at the read), the script reports the device's error and exits with DIFFERS, where it
  died in its own read-back (exit 1: "its script broke"); the `meta` device stands in for one:
  its op returns, reading its result raises;
- where both sides raise the same Python type for different causes (the `error` check's "a
  different class": torch_xla's lowering error where CPU names a dtype), the script says so
  and exits with DIFFERS, where it said "the device agrees with cpu (both raised)"."""

from __future__ import annotations

import subprocess
import sys

from conformance.bugs.script import BODY, DIFFERS, error_classes

PRELUDE = """\
import sys
import torch
op = torch.ops.aten.atanh.default
reference = op
device = "meta"
DIFFERS = 3
ERROR_CLASSES = None


def inputs(where):
    return [torch.ones(4, dtype=torch.bool).to(where)], {}
"""


def test_an_error_raised_when_the_result_is_read_is_the_devices() -> None:
    script = PRELUDE + BODY.format(device_fn="op", shown=16)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == DIFFERS, done.stdout + done.stderr
    device_line = next(line for line in done.stdout.splitlines() if line.startswith("device:"))
    assert "meta" in device_line and "returned" not in device_line, done.stdout
    assert "the device differs from cpu" in done.stdout


RAISING = """\
import sys
import torch
device = "cpu"
DIFFERS = 3
ERROR_CLASSES = {classes!r}


def reference(x):
    raise RuntimeError("mat1 must be a matrix, got 0-D tensor")


def op(x):
    raise RuntimeError("A dimension number is out of range in Dot")


def inputs(where):
    return [torch.ones(())], {{}}
"""

#: the `error` check's first line as a torch_xla run wrote it (engine/error_checks.py)
HEADLINE = (
    "[error] device raised RuntimeError [index]: A dimension number is out of range in Dot: "
    "goo.gle/debugproto    , cpu raised RuntimeError [shape]: mat1 must be a matrix, got 0-D "
    "tensor (a different class)"
)


def _run(classes) -> subprocess.CompletedProcess:
    script = RAISING.format(classes=classes) + BODY.format(device_fn="op", shown=16)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def test_errors_of_different_causes_are_a_divergence() -> None:
    classes = error_classes(HEADLINE)
    assert classes == {"cpu": "shape", "device": "index"}
    done = _run(classes)
    assert done.returncode == DIFFERS, done.stdout + done.stderr
    assert "cpu's message is of class [shape], the device's of class [index]" in done.stdout
    # without the suite's classes (any other finding) two errors of one type still agree
    assert (
        error_classes("[error] device raised RuntimeError [index]: x; cpu returned normally")
        is None
    )
    agrees = _run(None)
    assert agrees.returncode == 0 and "agrees with cpu (both raised)" in agrees.stdout, agrees

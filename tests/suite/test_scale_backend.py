"""The scale bench's generated backend (tests/backends/scale_backend.py) registers the overloads
its list names, its CPU-as-device kernels compute what CPU computes on the same memory layout,
and the suite discovers and passes them. In processes of their own: the backend adds 1,300
kernels to the process that imports it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import clean_env

REPO = Path(__file__).resolve().parents[2]
BACKENDS = str(REPO / "tests" / "backends")

SCRIPT = """
import json, torch, echo_npu
native = set(echo_npu.native_ops())
import scale_backend as sb
from conformance.engine import discovery

registered = discovery.registered_overloads()
expected = [o for o in sb.listed() if discovery.has_schema(o) and o not in native]
assert sb.GENERATED == expected, sorted(set(sb.GENERATED) ^ set(expected))[:10]
assert not set(sb.GENERATED) - set(registered), "a generated kernel the dispatcher lacks"

d = torch._C._get_privateuse1_backend_name()
x = torch.randn(4, 5)
r = torch.sin(x.to(d).t())  # a strided input: CPU's result strides and values
assert r.device.type == d and r.stride() == torch.sin(x.t()).stride(), r.stride()
assert torch.equal(r.cpu(), torch.sin(x.t()))
out = torch.empty(0, device=d)  # out= resized as CPU resizes it
assert torch.cumsum(x.to(d), 0, out=out) is out and torch.equal(out.cpu(), torch.cumsum(x, 0))
y = x.to(d)
view, version = y[:, 1:], y._version  # in place through a view: written back
torch._foreach_sin_([view])  # no ADInplaceOrView kernel: the version bump is the kernel's
assert y._version > version
expect = x.clone()
expect[:, 1:].sin_()
assert torch.equal(y.cpu(), expect)
print(json.dumps({"registered": len(registered), "generated": len(sb.GENERATED)}))
"""


def test_generated_kernels_are_registered_and_compute_as_cpu() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=REPO,
        env=clean_env({"PYTHONPATH": BACKENDS}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counts["generated"] >= 1200 and counts["registered"] >= 1300, counts


def test_the_suite_discovers_and_passes_generated_overloads(run_suite) -> None:
    args = "--backend scale_backend --ops sin.out,cumsum --dtypes float32 --values ordinary"
    run = run_suite(
        *args.split(), "--layouts", "contiguous,transposed", env={"PYTHONPATH": BACKENDS}
    )
    assert run.returncode == 0, run.output[-3000:]
    coverage = run.info["coverage"]
    assert len(coverage["registered"]) >= 1300 and coverage["tested"] == ["cumsum", "sin.out"]
    # echo_npu routes only its own kernels through cpu_fallback: generated ones run natively
    ids = sorted(r["id"].split("[")[1].rstrip("]") for r in run.results)
    assert ids == [
        f"{op}-float32-{layout}-native"
        for op in ("cumsum", "sin.out")
        for layout in ("contiguous", "transposed")
    ], ids
    assert {r["status"] for r in run.results} == {"passed"}, run.output[-3000:]

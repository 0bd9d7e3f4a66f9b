"""Standalone repro scripts: the failing sample's exact inputs saved next to a script that
rebuilds them (same memory layout) on CPU and the device, runs the overload and compares.

    pytest conformance --repro-dir repros/   # writes repros/<case id>.py and .pt per failure
    python repros/<case id>.py               # needs torch and the backend (and this suite only
                                             # for an op whose CPU reference is not the op)

The CPU side runs the op spec's reference (CPU has no `_copy_from` kernel); device results are
read back as the suite does (engine/transfer.py: the whole storage, strides rebuilt on CPU) and
never printed (printing needs device ops the
backend may lack); backend hooks appear only when the case used them.
"""

from __future__ import annotations

import json
import os
import re

import torch

from conformance.engine.calls import MEMORY_FORMAT_TAG, portable
from conformance.engine.placing import Leaf, PlacedCall
from conformance.engine.spec import OpSpec

SCRIPT = '''"""Repro of conformance case {case_id}: {headline}

Sample: {signature}
Run alone: {env}python {script_name}
Exits 1 if the device disagrees with CPU (or crashes), 0 if it agrees.
"""

import os
import sys

import torch
{imports}
HERE = os.path.dirname(os.path.abspath(__file__))
saved = torch.load(os.path.join(HERE, "{data_name}"), weights_only=False)
op = torch.ops.aten.{packet}.{overload_attr}
{reference}device = {device_type!r}  # the device type the suite found (by its dispatch key)


def build(where):
    """Arguments with every tensor placed exactly as in the failing case."""
    bases = []

    def value(x):
        if isinstance(x, tuple) and len(x) == 2 and x[0] == "__tensor__":
            p = saved["tensors"][x[1]]
            on_cpu = p["on_cpu"] or where == "cpu"
            base = p["base"].clone() if on_cpu else p["base"].to(where)  # never shared by runs
            bases.append(base)
            return base.as_strided(p["size"], p["stride"], p["offset"])
        if isinstance(x, tuple) and len(x) == 2 and x[0] == "{memory_format_tag}":
            return getattr(torch, x[1])  # torch.memory_format does not pickle: saved by name
        if isinstance(x, torch.device):
            return torch.device(where)
        if isinstance(x, list):
            return [value(v) for v in x]
        return x

    args = [value(a) for a in saved["args"]]
    kwargs = {{k: value(v) for k, v in saved["kwargs"].items()}}
    return args, kwargs, bases


def run(fn, where):
    args, kwargs, bases = build(where)
    try:
        return fn(*args, **kwargs), bases, None
    except Exception as exc:
        return None, bases, exc


def has_storage(t):
    """Whether t's storage can be observed (a lazy device's tensors have none)."""
    try:
        storage = t.untyped_storage()
        return storage.nbytes() > 0 and storage.data_ptr() != 0
    except Exception:
        return False


def to_cpu(value):
    """Device results read back as the suite does: one contiguous device->host copy of the
    whole storage, size/strides/offset rebuilt on CPU (no device kernel sees them)."""
    if isinstance(value, torch.Tensor):
        if value.device.type == "cpu":
            return value
        if value.numel() and not has_storage(value):  # a lazy device: its values only
            return value.cpu()
        n = value.untyped_storage().nbytes() // value.element_size()
        host = torch.empty(n, dtype=value.dtype)
        if n:
            host.copy_(value.detach().as_strided((n,), (1,), 0))
        if value.numel() == 0:
            return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype)
        return host.as_strided(value.shape, value.stride(), value.storage_offset())
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(v) for v in value)
    return value


expected, cpu_bases, cpu_exc = run(reference, "cpu")
{route}{compiled}actual, dev_bases, dev_exc = run({device_fn}, device)
print("cpu   :", repr(cpu_exc) if cpu_exc else "returned")
print("device:", repr(dev_exc) if dev_exc else "returned")
if cpu_exc or dev_exc:
    sys.exit(0 if cpu_exc and dev_exc and isinstance(dev_exc, type(cpu_exc)) else 1)
ok = True
for i, (d, c) in enumerate(zip(dev_bases, cpu_bases)):
    try:
        torch.testing.assert_close(to_cpu(d), c, equal_nan=True)
    except AssertionError as exc:
        ok = False
        print(f"argument buffer {{i}} differs after the call:", str(exc).splitlines()[0])
try:
    torch.testing.assert_close(to_cpu(actual), expected, equal_nan=True)
except (AssertionError, TypeError) as exc:
    ok = False
    print("output differs:", str(exc).splitlines()[0])
{memory}sys.exit(0 if ok else 1)
'''

ROUTE = """{backend}.set_fallback_routes([{overload!r}])
"""
MEMORY = """corrupted = {backend}.check_memory()
if corrupted:
    ok = False
    print("device memory corrupted:", corrupted)
"""
# a -compile case: the device runs the op under torch.compile, as the case did
COMPILED = """

def compiled(*args, **kwargs):
    \"\"\"The case's compiled path: the op under torch.compile on the device.\"\"\"
    fn = torch.compile(lambda a, k: op(*a, **k), backend={compiler!r}, fullgraph=True)
    return fn(args, kwargs)


"""
# a CPU reference other than the op itself (CPU has no kernel for e.g. _copy_from): the op spec's
SPEC_REFERENCE = """# CPU reference of this overload (CPU has no kernel for it): the suite's op spec
from conformance.ops import spec_for  # noqa: E402

reference = spec_for({overload!r}).reference
"""


def safe_name(case_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", case_id)


def write_repro(
    directory: str,
    case_id: str,
    placed: PlacedCall,
    *,
    backend: str,
    headline: str,
    routed: bool,
    env_prefix: str,
    spec: OpSpec | None = None,
    has_check_memory: bool = False,
    compiler: str | None = None,
    device_type: str = "",
    register: str = "",
) -> str:
    """Write <dir>/<case>.pt and <dir>/<case>.py; return the script's path. `compiler`: the
    device runs the op under torch.compile with this backend (a -compile case). `device_type`:
    the device the suite found ("" : the PrivateUse1 name); `register`: the function of
    `backend` that registers the device (`--backend MODULE:FUNCTION`), called after the import."""
    os.makedirs(directory, exist_ok=True)
    name = safe_name(case_id)
    tensors = []

    def marker(leaf: Leaf) -> tuple[str, int]:
        p = leaf.placement
        tensors.append(
            {
                "base": p.base,
                "size": list(p.size),
                "stride": list(p.stride),
                "offset": p.offset,
                "on_cpu": leaf.on_cpu,
            }
        )
        return ("__tensor__", len(tensors) - 1)

    values = [marker(x) if isinstance(x, Leaf) else x for x in placed.leaves]
    args, kwargs = placed.rebuild(values)
    torch.save(
        {"args": portable(list(args)), "kwargs": portable(dict(kwargs)), "tensors": tensors},
        os.path.join(directory, name + ".pt"),
    )
    overload = placed.call.overload
    packet, _, attr = overload.partition(".")
    reference, reference_name = "reference = op\n", "op"
    ref = spec.reference if spec is not None else None
    if isinstance(ref, torch._ops.OpOverload):
        reference_name = f"torch.ops.{ref.namespace}.{ref._opname}.{ref._overloadname}"
        reference = f"reference = {reference_name}\n"
    elif ref is not None:
        reference = SPEC_REFERENCE.format(overload=overload)
    uses_module = routed or has_check_memory or bool(register)
    note = "" if uses_module else "  # noqa: F401  (registers the device)"
    imports = f"import {backend}{note}\n" + (f"{backend}.{register}()\n" if register else "")
    script = SCRIPT.format(
        imports=imports,
        device_type=device_type or torch._C._get_privateuse1_backend_name(),
        reference=reference + "\n",
        route=ROUTE.format(backend=backend, overload=overload) if routed else "",
        compiled=COMPILED.format(compiler=compiler) if compiler else "",
        device_fn="compiled" if compiler else "op",
        memory=MEMORY.format(backend=backend) if has_check_memory else "",
        case_id=case_id,
        headline=headline.replace('"""', "'''"),
        signature=placed.signature(),
        env=env_prefix + " " if env_prefix else "",
        script_name=name + ".py",
        backend=backend,
        data_name=name + ".pt",
        memory_format_tag=MEMORY_FORMAT_TAG,
        packet=packet,
        overload_attr=attr or "default",
    )
    path = os.path.join(directory, name + ".py")
    with open(path, "w") as f:
        f.write(script)
    facts = {  # what a bug report's standalone script is built from (conformance/bugs)
        "case": case_id,
        "overload": overload,
        "headline": headline,
        "signature": placed.signature(),
        "backend": backend,
        "register": register,
        "device_type": device_type or torch._C._get_privateuse1_backend_name(),
        "routed": routed,
        "compiler": compiler,
        "env_prefix": env_prefix,
        "reference": "op"
        if ref is None
        else "aten"
        if isinstance(ref, torch._ops.OpOverload)
        else "spec",
        "reference_name": reference_name,
        "data": name + ".pt",
    }
    with open(os.path.join(directory, name + ".json"), "w") as f:
        json.dump(facts, f, indent=1)
    return path

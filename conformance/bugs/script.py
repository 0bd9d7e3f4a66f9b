"""A failing case's repro (what `--repro-dir` saved: `<case>.pt` and `<case>.json`) as the script
of a bug report: it needs torch and the backend only, its inputs are written inline where they
are small (a `.pt` beside it otherwise), and it prints CPU's and the device's results, where they
differ bit for bit, and exits 3 when they do (1 is Python's own failure: a crash, an import).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

#: a tensor base of at most this many elements is written into the script
INLINE_ELEMENTS = 64
#: the script's exit status when the device differs (its BODY says the same)
DIFFERS = 3

HEADER = '''"""{title}

Found by torch-conformance, case {case}:
  {headline}
Sample: {signature}
Run: {env}python {name}   (needs torch and {backend} only)
Prints CPU's and the device's results; exits 3 where they differ bit for bit.
"""

import os
import sys

import torch
import {backend}  # registers the device{register}

op = {op}
reference = {reference}  # CPU's side
device = {device!r}
DIFFERS = 3  # the exit status that says the device differs (a crash or ImportError exits 1)
# where both sides raise: the cause the suite read in each error message (engine/errorclass.py)
ERROR_CLASSES = {classes!r}
'''

BODY = '''

def read_back(t):
    """A device tensor on CPU as a backend-neutral copy: its whole storage, one contiguous
    device->host copy, then size/strides/offset rebuilt on CPU."""
    if t.device.type == "cpu":
        return t
    n = t.untyped_storage().nbytes() // t.element_size()
    host = torch.empty(n, dtype=t.dtype)
    if n:
        host.copy_(t.detach().as_strided((n,), (1,), 0))
    return host.as_strided(t.shape, t.stride(), t.storage_offset())


def leaves(value):
    """The results in order: tensors, and plain values (a bool, a number)."""
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in leaves(v)]
    return [value]


def bits(t):
    """The tensor's elements as integers of its width (NaN payloads made one NaN)."""
    t = t.detach().contiguous()
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.dtype.is_floating_point:
        t = torch.where(torch.isnan(t), torch.full_like(t, float("nan")), t)
        widths = {{1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}}
        return t.view(widths[t.element_size()])
    return t


def run(where):
    """(the results read back, the tensor arguments read back after the call, what it raised):
    read inside the try, as a lazy device computes only when a result is read and raises there."""
    args, kwargs = inputs(where)
    fn = reference if where == "cpu" else {device_fn}
    try:
        result = fn(*args, **kwargs)
        return ([read_back(x) if isinstance(x, torch.Tensor) else x for x in leaves(result)],
                [read_back(a) for a in leaves(args) if isinstance(a, torch.Tensor)], None)
    except Exception as exc:  # noqa: BLE001 - what each side raises is part of the report
        return None, None, exc


cpu, cpu_args, cpu_exc = run("cpu")
dev, dev_args, dev_exc = run(device)
print("cpu   :", repr(cpu_exc) if cpu_exc else "returned")
print("device:", repr(dev_exc) if dev_exc else "returned")
if cpu_exc or dev_exc:
    same = cpu_exc is not None and dev_exc is not None and type(dev_exc) is type(cpu_exc)
    if same and ERROR_CLASSES and ERROR_CLASSES["cpu"] != ERROR_CLASSES["device"]:
        print(f"the device differs from cpu: both raised {{type(cpu_exc).__name__}}, for another "
              f"cause: cpu's message is of class [{{ERROR_CLASSES['cpu']}}], the device's of "
              f"class [{{ERROR_CLASSES['device']}}] (torch-conformance's classes of messages)")
        sys.exit(DIFFERS)
    print("the device agrees with cpu (both raised)" if same else "the device differs from cpu")
    sys.exit(0 if same else DIFFERS)
differs = False
outputs, device_outputs = cpu, dev
if len(outputs) != len(device_outputs):
    print(f"cpu returned {{len(outputs)}} value(s), the device {{len(device_outputs)}}")
    differs = True
pairs = []
for i, (c, d) in enumerate(zip(outputs, device_outputs)):
    if isinstance(c, torch.Tensor) and isinstance(d, torch.Tensor):
        pairs.append(("output", c, d))
    elif c != d and not (c != c and d != d):  # plain values (NaN equals NaN here)
        print(f"output {{i}}: cpu {{c!r}}  device {{d!r}}")
        differs = True
pairs += [("argument after the call", c, d) for c, d in zip(cpu_args, dev_args)]
for i, (what, c, d) in enumerate(pairs):
    head = (f"{{what}} {{i}}: cpu {{c.dtype}} {{tuple(c.shape)}} strides {{c.stride()}}; "
            f"device {{d.dtype}} {{tuple(d.shape)}} strides {{d.stride()}}")
    if (c.dtype, c.shape) != (d.dtype, d.shape):
        print(head, "-- DIFFERENT")
        differs = True
        continue
    if c.stride() != d.stride():
        print(head, "-- strides differ (the suite judges them for some ops: see its message)")
    same = bits(c) == bits(d)
    if bool(same.all()):
        continue
    differs = True
    where = (~same).nonzero().tolist()
    print(head)
    print(f"  {{len(where)}} of {{c.numel()}} element(s) differ bit for bit; first at {{where[0]}}")
    for index in where[:{shown}]:
        at = tuple(index)
        print(f"    {{index}}: cpu {{c[at].item()!r}}  device {{d[at].item()!r}}")
    if c.numel() <= {shown}:
        print("  cpu   :", c.tolist())
        print("  device:", d.tolist())
print("the device differs from cpu" if differs else "the device agrees with cpu")
sys.exit(DIFFERS if differs else 0)
'''


@dataclass(frozen=True)
class Repro:
    """A case's saved repro: its facts (`<case>.json`) and inputs (`<case>.pt`)."""

    facts: dict[str, Any]
    saved: dict[str, Any]

    @classmethod
    def load(cls, facts: Path) -> Repro:
        data = json.loads(facts.read_text(encoding="utf-8"))
        saved = torch.load(facts.parent / data["data"], weights_only=False)
        return cls(data, saved)

    @property
    def standalone(self) -> bool:
        """Whether CPU's side is the op itself or another aten overload (not the suite's own
        reference, which would need the suite)."""
        return self.facts["reference"] in ("op", "aten")


def _number(value: float) -> str:
    if math.isnan(value):
        return 'float("nan")'
    if math.isinf(value):
        return 'float("inf")' if value > 0 else 'float("-inf")'
    return repr(value)


def _literal(base: torch.Tensor) -> str:
    values = base.tolist()
    if base.dtype.is_floating_point:
        values = "[" + ", ".join(_number(v) for v in values) + "]"
    return f"torch.tensor({values}, dtype={base.dtype})"


class _Code:
    """The script's `inputs(where)`: each saved tensor inline or from the `.pt` beside."""

    def __init__(self, saved: dict[str, Any]) -> None:
        self.saved = saved
        self.lines: list[str] = []
        self.beside: dict[int, torch.Tensor] = {}

    def tensor(self, index: int) -> str:
        p = self.saved["tensors"][index]
        base = p["base"]
        if base.numel() <= INLINE_ELEMENTS and not base.is_complex():
            self.lines.append(
                f"    base{index} = {_literal(base.reshape(-1))}.reshape({list(base.shape)})"
            )
        else:
            self.beside[index] = base
            self.lines.append(f"    base{index} = saved[{index}].clone()")
        place = "base{i}" if p["on_cpu"] else "base{i}.to(where)"
        self.lines.append(
            f"    t{index} = {place.format(i=index)}.as_strided({p['size']}, {p['stride']}, "
            f"{p['offset']})"
        )
        return f"t{index}"

    def value(self, x: Any) -> str:
        if isinstance(x, tuple) and len(x) == 2 and x[0] == "__tensor__":
            return self.tensor(x[1])
        if isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], str):
            return f"torch.{x[1]}"  # a memory format, saved by name
        if isinstance(x, torch.device):
            return "torch.device(where)"
        if isinstance(x, torch.dtype):
            return str(x)
        if isinstance(x, float):
            return _number(x)
        if isinstance(x, list):
            return "[" + ", ".join(self.value(v) for v in x) + "]"
        if isinstance(x, tuple):
            return "(" + "".join(self.value(v) + ", " for v in x) + ")"
        if x is None or isinstance(x, (bool, int, str)):
            return repr(x)
        raise ValueError(f"no literal for {type(x).__name__}")


#: the `error` check's message where both sides raised for different causes
_DIFFERENT_CLASS = re.compile(
    r"device raised \w+ \[(?P<device>[\w-]+)\]: .*, cpu raised \w+ \[(?P<cpu>[\w-]+)\]: "
    r".*\(a different class\)"
)


def error_classes(headline: str) -> dict[str, str] | None:
    """{"cpu": class, "device": class} where the failure is two errors of different classes
    (engine/error_checks.py words it so), else None."""
    found = _DIFFERENT_CLASS.search(headline)
    return {"cpu": found["cpu"], "device": found["device"]} if found else None


def standalone_script(repro: Repro, title: str, name: str) -> tuple[str, dict[int, torch.Tensor]]:
    """The script's text and the tensors it reads from `<name>.pt` beside it (none: all
    inline). Raises ValueError where an input cannot be written as code."""
    facts, code = repro.facts, _Code(repro.saved)
    args = [code.value(a) for a in repro.saved["args"]]
    kwargs = {k: code.value(v) for k, v in repro.saved["kwargs"].items()}
    packet, _, attr = facts["overload"].partition(".")
    op = f"torch.ops.aten.{packet}.{attr or 'default'}"
    register = f"\n{facts['backend']}.{facts['register']}()" if facts["register"] else ""
    route = ""
    if facts["routed"]:  # the case's path: the overload through the backend's cpu_fallback
        route = f"\n{facts['backend']}.set_fallback_routes([{facts['overload']!r}])"
    text = (
        HEADER.format(
            title=title.replace('"""', "'''"),
            case=facts["case"],
            headline=facts["headline"].splitlines()[0].replace('"""', "'''"),
            signature=facts["signature"],
            env=facts["env_prefix"] + " " if facts["env_prefix"] else "",
            name=name + ".py",
            backend=facts["backend"],
            register=register,
            op=op,
            reference=facts["reference_name"] if facts["reference"] == "aten" else "op",
            device=facts["device_type"],
            classes=error_classes(facts["headline"].splitlines()[0]),
        )
        + route
    )
    if code.beside:
        text += (
            "\nsaved = torch.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "
            f"{name + '.pt'!r}))\n"
        )
    text += '\n\ndef inputs(where):\n    """The failing sample\'s arguments, as placed."""\n'
    text += "\n".join(code.lines) + "\n"
    named = ", ".join(f"{k!r}: {v}" for k, v in kwargs.items())
    text += f"    return [{', '.join(args)}], {{{named}}}\n"
    device_fn = "op"
    if facts["compiler"]:  # the case's compiled path: the op under torch.compile on the device
        device_fn = (
            f"(lambda *a, **k: torch.compile(lambda a, k: op(*a, **k), "
            f"backend={facts['compiler']!r}, fullgraph=True)(a, k))"
        )
    text += BODY.format(device_fn=device_fn, shown=16)
    return text, code.beside

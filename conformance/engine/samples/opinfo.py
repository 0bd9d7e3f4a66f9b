"""OpInfo samples captured at the aten level.

Each OpInfo sample is run on CPU (functional, in-place and out= variants) under a dispatch mode
that records the aten overloads it reaches, with their arguments. A case then calls exactly the
overload under test with those arguments. Captures are cached on disk per (OpInfo, dtype) and
torch version, so `op_db` (5-10 s to import) is only imported when the cache misses.
"""

from __future__ import annotations

import json
import os
import warnings
from collections import defaultdict
from functools import cache

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from conformance.engine.calls import Call, clone_tree
from conformance.engine.discovery import overload_name

CACHE_SALT = "v1"
SAMPLES_PER_OPINFO = 16
CAPTURES_PER_OVERLOAD = 12


def base_name(name: str) -> str:
    """'nn.functional.relu' -> 'relu', 'masked_fill_.Scalar' -> 'masked_fill',
    '_softmax' -> 'softmax'."""
    name = name.split(".")[0] if "::" not in name else name.split("::")[1].split(".")[0]
    return name.strip("_")


def opinfo_base(full_name: str) -> str:
    return full_name.split(".")[-1].strip("_") if "." in full_name else full_name.strip("_")


class _Recorder(TorchDispatchMode):
    """Records the arguments of every aten call whose base name matches `base`."""

    def __init__(self, base: str, out: dict[str, list[Call]]) -> None:
        super().__init__()
        self.base = base
        self.out = out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = overload_name(func.name())
        if base_name(name) == self.base and len(self.out[name]) < CAPTURES_PER_OVERLOAD:
            self.out[name].append(Call(name, clone_tree(tuple(args)), clone_tree(dict(kwargs))))
        return func(*args, **kwargs)


def _cache_root(cache_dir: str | None) -> str | None:
    if cache_dir is None:
        return None
    root = os.path.join(cache_dir, f"opinfo-{torch.__version__}-{CACHE_SALT}")
    os.makedirs(root, exist_ok=True)
    return root


@cache
def _op_db() -> dict[str, object]:
    from torch.testing._internal.common_methods_invocations import op_db

    return {_full_name(op): op for op in op_db}


def _full_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def opinfo_index(cache_dir: str | None) -> dict[str, list[str]]:
    """{base name: [OpInfo full names]}, cached as JSON."""
    root = _cache_root(cache_dir)
    path = os.path.join(root, "index.json") if root else None
    if path and os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    index: dict[str, list[str]] = defaultdict(list)
    for full, op in _op_db().items():
        for name in (op.name, *getattr(op, "aliases", ())):
            alias = getattr(name, "name", name)
            index[opinfo_base(alias)].append(full)
    index = {k: sorted(set(v)) for k, v in index.items()}
    if path:
        _atomic_write(path, json.dumps(index, indent=0).encode())
    return index


def _atomic_write(path: str, data: bytes) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def capture(full_name: str, dtype: torch.dtype) -> dict[str, list[Call]]:
    """Run the OpInfo's samples for `dtype` on CPU and record the aten calls they make."""
    op = _op_db()[full_name]
    out: dict[str, list[Call]] = defaultdict(list)
    if dtype not in op.supported_dtypes("cpu"):
        return {}
    base = opinfo_base(op.name)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = op.sample_inputs("cpu", dtype, requires_grad=False)
        for i, sample in enumerate(samples):
            if i >= SAMPLES_PER_OPINFO:
                break
            _run_variants(op, sample, _Recorder(base, out))
    return dict(out)


def _run_variants(op, sample, recorder: _Recorder) -> None:
    args, kwargs = sample.args, sample.kwargs
    expected = None
    try:
        with recorder:
            expected = op.op(sample.input, *args, **kwargs)
    except Exception:
        pass
    if op.inplace_variant is not None:
        try:
            with recorder:
                op.inplace_variant(clone_tree(sample.input), *args, **kwargs)
        except Exception:
            pass
    if op.supports_out and expected is not None:
        try:
            out = tree_map(
                lambda t: torch.empty_like(t) if isinstance(t, torch.Tensor) else t, expected
            )
            with recorder:
                op.op(sample.input, *args, **kwargs, out=out)
        except Exception:
            pass


def captured_calls(
    overload: str, dtype: torch.dtype, names: tuple[str, ...], cache_dir: str | None
) -> list[Call]:
    """Captured calls of `overload` from the matching OpInfos (or `names`)."""
    if not names:
        names = tuple(opinfo_index(cache_dir).get(base_name(overload), ()))
    calls: list[Call] = []
    for full in names:
        calls.extend(_cached_capture(full, dtype, cache_dir).get(overload, []))
    return calls


def _cached_capture(full: str, dtype: torch.dtype, cache_dir: str | None) -> dict[str, list[Call]]:
    root = _cache_root(cache_dir)
    path = os.path.join(root, f"{full}-{str(dtype).removeprefix('torch.')}.pt") if root else None
    if path and os.path.exists(path):
        try:
            return torch.load(path, weights_only=False)
        except Exception:
            pass  # a torn or stale cache file: recapture
    captured = capture(full, dtype)
    if path:
        tmp = f"{path}.{os.getpid()}.tmp"
        torch.save(captured, tmp)
        os.replace(tmp, path)
    return captured

"""OpInfo samples captured at the aten level.

Each OpInfo sample is run on CPU (functional, in-place and out= variants, and backward where the
OpInfo supports autograd for the dtype) under a dispatch mode that records the aten overloads it
reaches, with their arguments: those of the op itself and of its family (`gelu` records
`gelu_backward`, `nll_loss` records `nll_loss_forward`). A case then calls exactly the overload
under test with those arguments. `kind` "samples" captures `sample_inputs`; "special" and
"promotion" capture the `reference_inputs` that hold NaN, infinities or dtype extremes, or that mix
dtypes (OpInfo's extremal and type-promotion generators). Captures are cached on disk per
(OpInfo, dtype, kind) and torch version, so `op_db` (5-10 s to import) is only imported when the
cache misses; so is the index of OpInfos (names and CPU dtypes).
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from functools import cache, lru_cache
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from conformance.engine.calls import Call, clone_tree, dedupe, load_calls, save_calls
from conformance.engine.discovery import overload_name
from conformance.engine.poison import out_like
from conformance.engine.testing_internals import import_testing
from conformance.samples.guarded import BACKWARD, guarded
from conformance.samples.sample_kinds import sample_kind, shape_of, varied
from conformance.samples.seeded import seed_all, seeded

#: of the captures (v7: out= holds poison, a boolean one the negated answer; v8: Python's random
#: seeded too, samples/seeded.py)
CACHE_SALT = "v8"
INDEX_SALT = "v4"  # of the index alone (v4: the foreach databases joined op_db)
KINDS = ("samples", "special", "promotion", "reference")
REFERENCE_SCAN = 400  # reference samples looked at per (OpInfo, dtype)
REFERENCE_CANDIDATES = 64  # ordinary reference inputs to choose the varied ones among
REFERENCE_ELEMENTS = 1 << 16  # the largest tensor an ordinary reference input may hold
SAMPLES_PER_OPINFO = 16
#: a value set's case takes the first this many distinct calls (Call.signature) of the
#: overload's reference captures, concatenated over its OpInfos (samples.calls_for)
VALUE_SET_FROM_OPINFO = 3
#: a reference capture keeps the first this many distinct calls of each (kind, overload): the
#: OpInfos before it gave d < VALUE_SET_FROM_OPINFO distinct calls or none are needed, so its
#: first VALUE_SET_FROM_OPINFO + d distinct ones hold every call the case takes. The rest (up to
#: SAMPLES_PER_OPINFO samples, tensors of a million elements) were 40 % of a cold cache's bytes.
KEPT_DISTINCT = 2 * VALUE_SET_FROM_OPINFO - 1
CAPTURES_PER_OVERLOAD = 12


def base_name(name: str) -> str:
    """'nn.functional.relu' -> 'relu', 'masked_fill_.Scalar' -> 'masked_fill',
    '_softmax' -> 'softmax'."""
    name = name.split(".")[0] if "::" not in name else name.split("::")[1].split(".")[0]
    return name.strip("_")


def opinfo_base(full_name: str) -> str:
    return full_name.split(".")[-1].strip("_") if "." in full_name else full_name.strip("_")


class _Recorder(TorchDispatchMode):
    """Records the arguments of every aten call of the op family (base names that start with one
    of `bases`: `gelu` records `gelu_backward`; `linalg.vector_norm` `linalg_vector_norm`)."""

    def __init__(self, bases: tuple[str, ...], out: dict[str, list[Call]]) -> None:
        super().__init__()
        self.bases = bases
        self.out = out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = overload_name(func.name())
        if (
            func.namespace == "aten"
            and base_name(name).startswith(self.bases)
            and len(self.out[name]) < CAPTURES_PER_OVERLOAD
        ):
            self.out[name].append(Call(name, clone_tree(tuple(args)), clone_tree(dict(kwargs))))
        return func(*args, **kwargs)


def cache_root(cache_dir: str | None) -> str | None:
    """The folder of this torch version's cached sample calls (None: no disk cache)."""
    if cache_dir is None:
        return None
    root = os.path.join(cache_dir, f"opinfo-{torch.__version__}-{CACHE_SALT}")
    os.makedirs(root, exist_ok=True)
    return root


# OpInfo keeps the `_foreach_*` ops (what torch.optim reaches on an accelerator) in databases of
# their own; their samples are lists of tensors, captured like any other
FOREACH_DBS = (
    "foreach_unary_op_db",
    "foreach_binary_op_db",
    "foreach_pointwise_op_db",
    "foreach_reduce_op_db",
    "foreach_other_op_db",
)


@cache
def _op_db() -> dict[str, object]:
    cmi = import_testing("common_methods_invocations")

    ops = list(cmi.op_db)
    for db in FOREACH_DBS:  # absent from an older torch: nothing to add
        ops += getattr(cmi, db, [])
    return {_full_name(op): op for op in ops}


def opinfo_db() -> dict[str, object]:
    """Every OpInfo of this torch (op_db and the foreach databases), by `full_name`."""
    return _op_db()


def _full_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


@cache
def _index(cache_dir: str | None) -> dict[str, dict[str, list[str]]]:
    """{"bases": {base name: [OpInfo full names]}, "dtypes": {full name: [CPU dtype names]}},
    cached as JSON."""
    root = cache_root(cache_dir)
    path = os.path.join(root, f"index-{INDEX_SALT}.json") if root else None
    if path and os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    bases: dict[str, list[str]] = defaultdict(list)
    dtypes: dict[str, list[str]] = {}
    for full, op in _op_db().items():
        for name in (op.name, *getattr(op, "aliases", ())):
            alias = getattr(name, "name", name)
            bases[opinfo_base(alias)].append(full)
            if "." in alias:  # linalg.vector_norm is aten::linalg_vector_norm
                bases[alias.replace(".", "_").strip("_")].append(full)
        dtypes[full] = sorted(str(d).removeprefix("torch.") for d in op.supported_dtypes("cpu"))
    index = {"bases": {k: sorted(set(v)) for k, v in bases.items()}, "dtypes": dtypes}
    if path:
        _atomic_write(path, json.dumps(index, indent=0).encode())
    return index


def opinfo_index(cache_dir: str | None) -> dict[str, list[str]]:
    """{base name: [OpInfo full names]}."""
    return _index(cache_dir)["bases"]


def opinfos_for(overload: str, cache_dir: str | None) -> list[str]:
    """The OpInfos whose samples reach `overload`: those of its base name, else of the longest
    prefix that has some (`max_pool2d_with_indices_backward` -> `max_pool2d`)."""
    bases = opinfo_index(cache_dir)
    parts = base_name(overload).split("_")
    for n in range(len(parts), 0, -1):
        found = bases.get("_".join(parts[:n]))
        if found:
            return found
    return []


def supported_dtypes(overload: str, cache_dir: str | None) -> set[str] | None:
    """CPU dtypes of the OpInfos of `overload` (None when no OpInfo covers it)."""
    names = opinfos_for(overload, cache_dir)
    if not names:
        return None
    dtypes = _index(cache_dir)["dtypes"]
    return {d for n in names for d in dtypes.get(n, ())}


def _atomic_write(path: str, data: bytes) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


@contextlib.contextmanager
def untracked() -> Iterator[None]:
    """OpInfo's sample iterators look for the unittest method running them with
    `inspect.stack()` on every `sample_inputs`/`reference_inputs` call (common_utils
    `extract_test_fn`, for their own skip lists and repro hints); under pytest's deep stacks that
    lookup was most of a cold capture's time. Captures run in no unittest method: nothing to
    find. Captures run on CPU only, so the device under test is hidden from
    `torch.accelerator` meanwhile: OpInfo wraps some ops (empty_strided, ...) in
    `freeze_rng_state`, which saves the accelerator's RNG state through its device module, and a
    device module without `get_rng_state` would make those captures empty (and cached so)."""
    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core

    owners = [m for m in (common_utils, core) if hasattr(m, "extract_test_fn")]
    saved = [m.extract_test_fn for m in owners]
    for m in owners:
        m.extract_test_fn = _no_test_fn
    accelerator = getattr(torch, "accelerator", None)
    available = getattr(accelerator, "is_available", None)
    if available is not None:
        accelerator.is_available = _no_accelerator
    try:
        yield
    finally:
        for m, fn in zip(owners, saved, strict=True):
            m.extract_test_fn = fn
        if available is not None:
            accelerator.is_available = available


def _no_accelerator() -> bool:
    return False


def _no_test_fn() -> None:
    return None


def capture(full_name: str, dtype: torch.dtype, kind: str = "samples") -> dict[str, dict]:
    """{kind: {overload: [Call]}}: the OpInfo's samples ("samples"), or its reference inputs
    that hold special values or mix dtypes ("special" and "promotion") and the ordinary ones
    unlike any of sample_inputs ("reference": other shapes, broadcasts, arguments), from one
    scan, run for `dtype` on CPU with the aten calls they make recorded."""
    with untracked():
        if dtype.is_floating_point or dtype.is_complex:  # IEEE arithmetic does not trap
            return _capture(full_name, dtype, kind)
        return guarded(_capture, (full_name, dtype, kind), warm=(f"{__name__}:_op_db",))


def _capture(
    full_name: str,
    dtype: torch.dtype,
    kind: str,
    skip: frozenset[int] = frozenset(),
    started: Callable[[int], None] = lambda i: None,
) -> dict[str, dict]:
    """`capture` itself; `skip`: indices of samples not to run (BACKWARD: the backward pass),
    `started(i)` told before each (samples/guarded.py)."""
    op = _op_db()[full_name]
    if dtype not in op.supported_dtypes("cpu"):
        return {}
    if kind == "samples":
        out: dict[str, list[Call]] = defaultdict(list)
        recorder = _Recorder(_bases(op), out)
        with seeded(0), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i, sample in enumerate(
                op.sample_inputs("cpu", dtype, requires_grad=False, set_seed=False)
            ):
                if i >= SAMPLES_PER_OPINFO:
                    break
                if i not in skip:
                    started(i)
                    _run_variants(op, sample, recorder)
            backward = op.supports_autograd and dtype in op.supported_backward_dtypes("cpu")
            if backward and BACKWARD not in skip:
                started(BACKWARD)
                _run_backward(op, dtype, recorder)
        return {"samples": dict(out)}
    if op.reference_inputs_func is None:
        return {}
    found: dict[str, dict[str, list[Call]]] = {k: defaultdict(list) for k in KINDS[1:]}
    recorders = {k: _Recorder(_bases(op), found[k]) for k in KINDS[1:]}
    kept = dict.fromkeys(("special", "promotion"), 0)
    candidates: list[tuple[int, Any]] = []  # ordinary reference inputs unlike sample_inputs
    with seeded(0), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ordinary = {shape_of(s) for s in op.sample_inputs("cpu", dtype, requires_grad=False)}
        seed_all(0)
        references = op.reference_inputs("cpu", dtype, requires_grad=False, set_seed=False)
        for i, sample in enumerate(references):
            full = min(kept.values()) >= SAMPLES_PER_OPINFO
            if i >= REFERENCE_SCAN or (full and len(candidates) >= REFERENCE_CANDIDATES):
                break
            k = sample_kind(sample, dtype)
            if k == "samples":
                if shape_of(sample) not in ordinary and _small(sample) and i not in skip:
                    candidates.append((i, sample))
                continue
            if k in kept and kept[k] < SAMPLES_PER_OPINFO and i not in skip:
                kept[k] += 1
                started(i)
                _run_variants(op, sample, recorders[k])
        for i, sample in varied(candidates, SAMPLES_PER_OPINFO):
            started(i)
            _run_variants(op, sample, recorders["reference"])
    return {k: {o: dedupe(c)[:KEPT_DISTINCT] for o, c in v.items()} for k, v in found.items()}


def _small(sample) -> bool:
    """No tensor past `REFERENCE_ELEMENTS` elements (the -sizes cases grow extents)."""
    leaves = [sample.input, *sample.args, *sample.kwargs.values()]
    return all(t.numel() <= REFERENCE_ELEMENTS for t in leaves if isinstance(t, torch.Tensor))


def _bases(op) -> tuple[str, ...]:
    return (opinfo_base(op.name), op.name.replace(".", "_").strip("_"))


def _run_backward(op, dtype: torch.dtype, recorder: _Recorder) -> None:
    """Backward of the first samples: records the family's `*_backward` overloads."""
    for i, sample in enumerate(op.sample_inputs("cpu", dtype, requires_grad=True, set_seed=False)):
        if i >= SAMPLES_PER_OPINFO // 2:
            break
        try:
            result = op.op(sample.input, *sample.args, **sample.kwargs)
            leaves = [
                t
                for t in tree_flatten(result)[0]
                if isinstance(t, torch.Tensor) and t.requires_grad
            ]
            if not leaves:
                continue
            with recorder:
                run_graph(leaves, [torch.ones_like(t) for t in leaves])
        except Exception:
            pass


def run_graph(outputs: list[torch.Tensor], grads: list[torch.Tensor], limit: int = 64) -> None:
    """Run the backward graph of `outputs` by calling its nodes, without the autograd engine:
    the engine's first use starts its device threads, after which no forked child of this
    process (the case runners) can run backward ("Unable to handle autograd's threading in
    combination with fork-based multiprocessing"), and every -grad case would fail on the
    harness. Enough to record the overloads a backward reaches: gradients flowing into one node
    from several paths are not summed (each path calls it), at most `limit` node calls."""
    todo = []
    for t, g in zip(outputs, grads, strict=True):
        if t.grad_fn is not None:
            n = len(t.grad_fn._input_metadata) if hasattr(t.grad_fn, "_input_metadata") else 1
            inputs = [None] * max(n, t.output_nr + 1)
            inputs[t.output_nr] = g
            todo.append((t.grad_fn, inputs))
    calls = 0
    with torch.no_grad():
        while todo and calls < limit:
            node, inputs = todo.pop()
            if type(node).__name__ == "AccumulateGrad":
                continue
            calls += 1
            try:
                found = node(*inputs)
            except Exception:  # noqa: BLE001 - a node that needs what this walk cannot give
                continue
            found = found if isinstance(found, tuple) else (found,)
            for (nxt, nr), g in zip(node.next_functions, found, strict=False):
                if nxt is None or g is None:
                    continue
                n = len(nxt._input_metadata) if hasattr(nxt, "_input_metadata") else 1
                inputs = [None] * max(n, nr + 1)
                inputs[nr] = g
                todo.append((nxt, inputs))


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
            out = tree_map(lambda t: out_like(t) if isinstance(t, torch.Tensor) else t, expected)
            with recorder:
                op.op(sample.input, *args, **kwargs, out=out)
        except Exception:
            pass


def captured_calls(
    overload: str,
    dtype: torch.dtype,
    names: tuple[str, ...],
    cache_dir: str | None,
    kind: str = "samples",
) -> list[Call]:
    """Captured calls of `overload` from the matching OpInfos (or `names`)."""
    names = names or tuple(opinfos_for(overload, cache_dir))
    source = "samples" if kind == "samples" else "reference"
    calls: list[Call] = []
    for full in names:
        captured = _cached_capture(full, dtype, cache_dir, source).get(kind, {})
        calls.extend(captured.get(overload, []))
    return calls


@lru_cache(maxsize=64)  # one OpInfo's capture serves its functional, in-place and out= forms
def _cached_capture(full: str, dtype: torch.dtype, cache_dir: str | None, source: str) -> dict:
    root = cache_root(cache_dir)
    suffix = "" if source == "samples" else f"-{source}"
    dname = str(dtype).removeprefix("torch.")
    path = os.path.join(root, f"{full}-{dname}{suffix}.pt") if root else None
    if path and os.path.exists(path):
        try:
            return load_calls(path)
        except Exception:
            pass  # a torn or stale cache file: recapture
    captured = capture(full, dtype, "samples" if source == "samples" else "special")
    if path:
        save_calls(captured, path)
    return captured

"""The aten overloads representative model workloads reach: the default fallback set.

Each workload (a tiny Qwen2 forward and greedy generate with and without a padded attention
mask, a small CNN training step, the transformers attention-mask pipeline with SDPA, a
torch.save/torch.load round trip) runs on CPU under a dispatch mode that records every aten
overload it calls, and, for overloads with a composite kernel, what that kernel calls (the path
of a backend without its own kernel). The result is a golden list per torch minor,
`conformance/workloads/torch-<major.minor>.txt`, refreshed with
`python -m conformance.tools.record_workloads` and checked by tests/engine/test_workloads.py.
A run walks the list with the dispatcher's view of the backend under test
(`discovery.how_reached`): the overloads it reaches through its boxed fallback are the default
fallback set. Nothing in it names a backend.

The same pass records the arguments of the calls (shapes, dtypes, option values, the values of
small integer and bool tensors; never floating values), at most `CALLS_PER_OVERLOAD` distinct
ones per overload, in `torch-<major.minor>-calls.jsonl` beside the list: the model shapes
samples/models.py replays.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from conformance.engine.discovery import overload_name
from conformance.engine.siblings import _is_out

# package data (pyproject.toml), so an installed suite has them too
WORKLOADS_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "workloads"
)
EXCLUDED_FILE = os.path.join(WORKLOADS_DIR, "excluded.toml")


# Kernels that run for a backend without its own kernel: what they call is what it reaches.
COMPOSITE_KEYS = (
    "CompositeImplicitAutograd",
    "CompositeExplicitAutogradNonFunctional",
    "CompositeExplicitAutograd",
)


class OverloadRecorder(TorchDispatchMode):
    """Records every aten overload dispatched inside the mode, and what composite kernels call.

    An overload with a composite kernel (e.g. `addmm`, whose default backend kernel calls
    `addmm.out`, or `clone`: `empty_strided` + `copy_`) is run a second time through that kernel
    with the mode active, on meta copies of its arguments (on CPU copies where meta cannot run
    it), so its callees are recorded as reached `inside` it: that is the path of a backend that
    registers no kernel for it. The real call runs unchanged on CPU.

    `calls` holds each overload's distinct argument signatures ({key: encoded call}, the first
    call of each key), for the calls made directly and inside composite kernels alike: inside
    calls are what a backend without the composite kernel runs (`addmm.out` at the linear
    layer's shapes). A meta copy's integer values are read from the tensor it copies.
    """

    def __init__(self) -> None:
        super().__init__()
        self.top: set[str] = set()  # called by the workload itself
        self.inside: dict[str, set[str]] = {}  # callee -> composite overloads that called it
        self.calls: dict[str, dict[str, dict]] = {}
        self._stack: list[str] = []
        # id(meta tensor) -> (it, the tensor it copies or views, whether a view): the pair
        # keeps the id from being reused
        self._origin: dict[int, tuple[torch.Tensor, torch.Tensor, bool]] = {}
        self._partial: set[str] = set()  # kept calls with bool tensors of unknown values
        # storages no op wrote since an `empty` made them (their values are whatever memory
        # held): kept alive while here, so that no other storage takes their address
        self._fresh: dict[int, torch.UntypedStorage] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        if name.startswith("aten::"):
            overload = overload_name(name)
            if self._stack:
                self.inside.setdefault(overload, set()).add(self._stack[-1])
            else:
                self.top.add(overload)
            noted = self._note(func, overload, args, kwargs)
            if overload not in self._stack:
                self._probe(func, overload, args, kwargs)
            for written in _written(func, args, kwargs):
                self._fresh.pop(_storage_key(written), None)
            grows = overload.partition(".")[0] in RESIZES and _is_cpu(args[0])
            before = args[0].numel() if grows else 0
            result = func(*args, **kwargs)
            if overload.partition(".")[0] in UNINITIALIZED or (grows and result.numel() > before):
                if _is_cpu(result):
                    self._fresh[_storage_key(result)] = result.untyped_storage()
            if noted is not None and isinstance(result, torch.Tensor):
                noted["result"] = _name(result.dtype)  # the dtype of a call without tensors
            if self._stack and func.is_view and _is_meta(result) and _is_meta(args[0]):
                self._origin[id(result)] = (result, args[0], True)  # (a probe's view)
            return result
        return func(*args, **kwargs)

    def _note(self, func, overload: str, args: tuple, kwargs: dict) -> dict | None:
        """Keep the call's arguments if no earlier call of `overload` had the same signature
        (or only one without some bool values); the kept call if it has no tensor argument
        (its result's dtype is the caller's to add)."""
        try:
            key = json.dumps(encode_call(func, overload, args, kwargs, None))
        except Unencodable:
            return None
        seen = self.calls.setdefault(overload, {})
        if seen.get(key) and key not in self._partial:
            return None
        missing: list[torch.Tensor] = []
        try:
            call = encode_call(func, overload, args, kwargs, self._values, missing)
        except Unencodable:  # integer values unknown (a larger tensor, or a meta one):
            seen.setdefault(key, {})  # a later call of the same signature may have them
            return None
        if seen.get(key) and missing:
            return None
        seen[key] = call
        if missing:
            self._partial.add(key)
        else:
            self._partial.discard(key)
        tensors = [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)]
        return None if tensors else call

    def _values(self, t: torch.Tensor) -> torch.Tensor | None:
        """The CPU tensor holding `t`'s values, with `t`'s strides: `t`, or for a meta copy
        (or a view of one, made inside a composite kernel) the same elements of the tensor it
        copies; None if unknown, UNSET if no op wrote them yet."""
        if t.device.type == "cpu":
            return UNSET if _storage_key(t) in self._fresh else t
        _, source, view = self._origin.get(id(t), (None, None, False))
        values = self._values(source) if source is not None else None
        if values is None or values is UNSET or not view:
            return values
        offset = values.storage_offset() + t.storage_offset() - source.storage_offset()
        return values.as_strided(t.shape, t.stride(), offset)

    def _to_meta(self, x):
        if isinstance(x, torch.Tensor):
            meta = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
            self._origin[id(meta)] = (meta, x, False)
            return meta
        return x

    def _clone_written(self, func):
        """Copies only for tensors the schema writes (the probe must not change the
        workload)."""

        def copy(x):
            if not isinstance(x, torch.Tensor):
                return x
            clone = x.detach().clone()
            if _storage_key(x) in self._fresh:
                self._fresh[_storage_key(clone)] = clone.untyped_storage()
            return clone

        writes = any(
            a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments
        )
        return copy if writes else (lambda x: x)

    def _probe(self, func, overload: str, args: tuple, kwargs: dict) -> None:
        key = next(
            (
                k
                for k in COMPOSITE_KEYS
                if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), k)
            ),
            None,
        )
        if key is None:
            return
        dispatch_key = getattr(torch._C.DispatchKey, key)
        for copy in (self._to_meta, self._clone_written(func)):
            probe_args, probe_kwargs = tree_map(copy, (args, kwargs))
            self._stack.append(overload)
            try:
                with self, warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    func._op_dk(dispatch_key, *probe_args, **probe_kwargs)
                return
            except Exception:
                continue  # data-dependent on meta: try CPU copies
            finally:
                self._stack.pop()
                if not self._stack:
                    self._origin.clear()


# overloads (by name) whose result holds whatever memory held (a resize that grows its tensor:
# in part): its values are never recorded
UNINITIALIZED = frozenset(
    {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}
)
RESIZES = frozenset({"resize_", "resize_as_"})
UNSET = object()  # `_values` of such a tensor, until an op writes it


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _written(func, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors the call writes (in-place and out= arguments)."""
    written = []
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            value = kwargs.get(a.name) if a.kwarg_only else (args[i] if i < len(args) else None)
            leaves = value if isinstance(value, list | tuple) else [value]
            written += [t for t in leaves if _is_cpu(t)]
    return written


def _is_cpu(x) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "cpu"


def _is_meta(x) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "meta"


# what the calls file keeps: distinct signatures per overload; integer and bool tensor values up
# to this many elements (a call whose larger integer input has no values is never kept)
CALLS_PER_OVERLOAD = 4
MAX_RECORDED_VALUES = 4096


class Unencodable(Exception):
    """An argument the calls file cannot hold (a storage, a generator), or integer values
    that were not recorded."""


def encode_call(
    func, overload: str, args: tuple, kwargs: dict, values_of, missing: list | None = None
) -> dict:
    """One call as JSON data: {"op", "args", "kwargs"?} (positional and keyword as the
    dispatcher passed them). Tensors become {"tensor": dtype, "shape", "stride" (only if not
    contiguous: a layout hint), "values" (of integer and bool inputs, flat)}; `values_of` gives
    the CPU tensor holding a tensor's values (or None: an integer input raises Unencodable, a
    bool one, always safe to refill, is encoded without values and appended to `missing`);
    without `values_of`, the call's signature (no strides, no values). Dtypes, layouts, memory
    formats and devices become {"dtype": name} and the like (every device "cpu"), non-finite
    floats {"float": "inf"}."""
    schema = func._schema
    outs = {a.name for a in schema.arguments if _is_out(a)}

    def encode(x, out: bool):
        if isinstance(x, torch.Tensor):
            return _encode_tensor(x, out, values_of, missing)
        if isinstance(x, (list, tuple)):
            return [encode(v, out) for v in x]
        if x is None or isinstance(x, (bool, int, str)):
            return x
        if isinstance(x, float):
            return x if math.isfinite(x) else {"float": str(x)}
        if isinstance(x, complex):
            return {"complex": [encode(x.real, out), encode(x.imag, out)]}
        if isinstance(x, torch.dtype):
            return {"dtype": _name(x)}
        if isinstance(x, torch.layout):
            return {"layout": _name(x)}
        if isinstance(x, torch.memory_format):
            return {"memory_format": _name(x)}
        if isinstance(x, torch.device):
            return {"device": "cpu"}
        raise Unencodable(type(x).__name__)

    positional = [a for a in schema.arguments if not a.kwarg_only]
    call = {
        "op": overload,
        "args": [
            encode(x, i < len(positional) and _is_out(positional[i])) for i, x in enumerate(args)
        ],
    }
    if kwargs:
        call["kwargs"] = {k: encode(v, k in outs) for k, v in kwargs.items()}
    return call


def _encode_tensor(t: torch.Tensor, out: bool, values_of, missing: list | None) -> dict:
    encoded = {"tensor": _name(t.dtype), "shape": list(t.shape)}
    if t.layout != torch.strided:
        raise Unencodable(str(t.layout))
    if values_of is None:  # the signature: no strides, no values
        return encoded
    if not t.is_contiguous():
        encoded["stride"] = list(t.stride())
    if out or t.is_floating_point() or t.is_complex():
        return encoded
    source = values_of(t) if t.numel() <= MAX_RECORDED_VALUES else None
    if source is UNSET:  # not written since `empty` made it: nothing to record (zeros)
        return encoded
    if source is None and t.dtype == torch.bool and missing is not None:
        missing.append(t)
        return encoded
    if source is None:
        raise Unencodable("integer values")
    encoded["values"] = [int(v) for v in source.reshape(-1).tolist()]
    return encoded


def _name(x) -> str:
    return str(x).removeprefix("torch.")


@dataclass(frozen=True)
class Workload:
    name: str
    run: Callable[[], object]
    needs: str = ""  # an optional module the workload imports (skipped if missing)


def tiny_qwen2(pad: int = 0):
    """A 2-layer Qwen2 causal LM from a config (no download), seeded, in eval mode."""
    import transformers

    config = transformers.Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=pad,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(config).eval()


def qwen2_generate() -> None:
    """Forward and greedy generate, one prompt and a left-padded batch with attention_mask."""
    model = tiny_qwen2()
    ids = torch.tensor([[0, 0, 7, 21, 9, 30], [11, 3, 60, 25, 14, 50]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        model(ids[1:], attention_mask=None)
        model(ids, attention_mask=mask)
        for m in (None, mask):
            kwargs = {} if m is None else {"attention_mask": m}
            model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0, **kwargs)


def small_cnn(dropout: bool = True, conv_bias: bool = True) -> torch.nn.Module:
    """The CNN of `cnn_train_step` (seeded; input [N, 3, 8, 8], 4 classes). Without `dropout`
    its forward draws no random numbers; without `conv_bias` the first convolution has no bias,
    whose gradient is rounding noise (batch norm subtracts it right away): an optimizer that
    normalises updates (Adam) would turn that noise into full steps. The training scenario
    compares both with CPU."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=conv_bias),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 8, 3, padding=1, groups=2),
        torch.nn.GELU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Dropout(0.1) if dropout else torch.nn.Identity(),
        torch.nn.Linear(8, 4),
    )


def cnn_train_step() -> None:
    """A small CNN: forward, cross-entropy, backward, clipping and SGD/AdamW steps; eval."""
    model = small_cnn()
    x = torch.randn(4, 3, 8, 8)
    target = torch.tensor([0, 1, 2, 3])
    # foreach=True: what optimizers pick by default for an accelerator (PrivateUse1 included)
    params = list(model.parameters())
    for opt in (
        torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=True),
        torch.optim.AdamW(params, lr=1e-3, foreach=True),
    ):
        loss = torch.nn.functional.cross_entropy(model(x), target)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    # On an accelerator (PrivateUse1 included) nn.Dropout takes ATen's fused path, which CPU
    # does not (at::native::is_fused_kernel_acceptable): record what the device would reach.
    features = torch.randn(4, 8, requires_grad=True)
    dropped, _ = torch.native_dropout(features, 0.1, True)
    dropped.sum().backward()
    model.eval()
    with torch.no_grad():
        model(x).softmax(-1).argmax(-1)


def attention_masks() -> None:
    """transformers' mask pipeline (padding + causal, min-filled) and SDPA with masks."""
    batch, tgt, heads, dim = 2, 5, 2, 8
    padding = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    causal = torch.full((tgt, tgt), torch.finfo(torch.float32).min)
    cond = torch.arange(tgt)
    causal.masked_fill_(cond < (cond + 1).view(tgt, 1), 0)
    expanded = padding[:, None, None, :].expand(batch, 1, tgt, tgt).to(torch.float32)
    inverted = 1.0 - expanded
    bias = inverted.masked_fill(inverted.to(torch.bool), torch.finfo(torch.float32).min)
    bias = bias + causal[None, None]
    keep = (
        torch.tril(torch.ones(tgt, tgt, dtype=torch.bool))[None, None]
        & padding.bool()[:, None, None, :]
    )
    torch.all(padding == 1)
    padding.sum(-1)
    q, k, v = (torch.randn(batch, heads, tgt, dim) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    sdpa(q, k, v, attn_mask=bias)
    sdpa(q, k, v, attn_mask=keep)
    sdpa(q, k, v, is_causal=True)


def save_load() -> None:
    """torch.save / torch.load of tensors, views and a state_dict."""
    base = torch.randn(6, 5)
    state = {"base": base, "t": base.t(), "row": base[2:5], "int": torch.arange(12).reshape(3, 4)}
    state["linear"] = torch.nn.Linear(5, 3).state_dict()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    torch.load(buffer, weights_only=True)


class QwenLogits(torch.nn.Module):
    """The tiny Qwen2's forward as torch.export takes it: (ids, attention_mask) -> logits."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.model(ids, attention_mask=mask, use_cache=False).logits


def _with_running_stats(model: torch.nn.Module) -> torch.nn.Module:
    """Seeded running statistics for every batch norm, as a trained model has: a fresh one's
    (mean 0, variance 1) would let a kernel that ignores them pass."""
    # the default generator and ops the workload calls anyway: the recorded op set stays the same
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            shape = module.running_mean.shape
            module.running_mean.copy_(torch.randn(shape) * 0.5)
            module.running_var.copy_(torch.randn(shape) * 0.25 + 1.0)  # seeded: all > 0.4
    return model


def exported_models(with_qwen2: bool = True) -> list[tuple[str, torch.nn.Module, tuple]]:
    """(name, model, example inputs) of the models the export scenario exports, on CPU."""
    torch.manual_seed(0)
    cnn = _with_running_stats(small_cnn(dropout=False)).eval()
    models = [("small_cnn", cnn, (torch.randn(2, 3, 8, 8),))]
    if with_qwen2:
        ids, mask = torch.tensor([[1, 5, 9, 3, 7]]), torch.tensor([[0, 1, 1, 1, 1]])
        models.append(("tiny_qwen2", QwenLogits(tiny_qwen2()), (ids, mask)))
    return models


def export_core_aten(with_qwen2: bool = True) -> None:
    """torch.export of the models, `run_decompositions()` to the core ATen set, and a run of
    the exported programs: what a backend's exported path calls. Exporting traces with fake
    tensors: only the run is recorded (the recorder's mode is lifted while exporting)."""
    from torch.utils._python_dispatch import _disable_current_modes

    for _, model, args in exported_models(with_qwen2):
        with _disable_current_modes():
            program = torch.export.export(model, args).run_decompositions()
        with torch.no_grad():
            program.module()(*args)


WORKLOADS = (
    Workload("qwen2_generate", qwen2_generate, needs="transformers"),
    Workload("cnn_train_step", cnn_train_step),
    Workload("attention_masks", attention_masks),
    Workload("save_load", save_load),
    Workload("export_core_aten", export_core_aten, needs="transformers"),
)


@dataclass
class Reach:
    """How one overload was reached: called by workloads, or inside composite overloads."""

    workloads: set[str] = field(default_factory=set)
    inside: set[str] = field(default_factory=set)


@dataclass
class Recording:
    """What one pass over the workloads recorded: the graph of the golden list and the kept
    calls of each overload (`select_calls`)."""

    graph: dict[str, Reach]
    calls: dict[str, list[dict]]


def record(workloads: tuple[Workload, ...] = WORKLOADS) -> dict[str, Reach]:
    """{overload: Reach} over the workloads, recorded on CPU (`recording`)."""
    return recording(workloads).graph


def recording(workloads: tuple[Workload, ...] = WORKLOADS) -> Recording:
    """The graph and the calls of the workloads, recorded on CPU. Attention runs SDPA's math
    backend: the one PyTorch picks for a PrivateUse1 device that registers no
    `_fused_sdp_choice` (a backend that does is tested on its registered kernels)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    graph: dict[str, Reach] = {}
    candidates: dict[str, dict[str, dict]] = {}
    for workload in workloads:
        if workload.needs:
            __import__(workload.needs)  # ImportError names what to install
        recorder = OverloadRecorder()
        with sdpa_kernel(SDPBackend.MATH), recorder:
            workload.run()
        for name in recorder.top:
            graph.setdefault(name, Reach()).workloads.add(workload.name)
        for name, callers in recorder.inside.items():
            graph.setdefault(name, Reach()).inside.update(callers)
        for name, calls in recorder.calls.items():
            kept = candidates.setdefault(name, {})
            for key, call in calls.items():
                if call and key not in kept:
                    kept[key] = call
    calls = {name: select_calls(list(c.values())) for name, c in candidates.items() if c}
    return Recording(graph, calls)


def select_calls(candidates: list[dict], limit: int = CALLS_PER_OVERLOAD) -> list[dict]:
    """At most `limit` of one overload's distinct calls, the most varied first: each pick adds
    a dtype combination, then option values, then tensor ranks not picked yet, else the most
    operand shapes not picked yet, then the most elements (ties by the call's text: the same
    candidates give the same picks)."""
    left = sorted(candidates, key=lambda c: json.dumps(c, sort_keys=True))
    features = {id(c): _features(c) for c in left}
    picked: list[dict] = []
    seen: tuple[set, set, set] = (set(), set(), set())
    shapes: set[tuple[int, tuple]] = set()  # (operand, shape)
    while left and len(picked) < limit:

        def score(c: dict) -> tuple:
            dtypes, options, ranks, sizes = features[id(c)]
            new = sum((i, s) not in shapes for i, s in enumerate(sizes))
            known = (dtypes in seen[0], options in seen[1], ranks in seen[2])
            return (*(not k for k in known), new, sum(math.prod(s) for s in sizes))

        best = max(left, key=score)  # (the first of equal scores: sorted by text)
        left.remove(best)
        picked.append(best)
        dtypes, options, ranks, sizes = features[id(best)]
        for known, feature in zip(seen, (dtypes, options, ranks), strict=True):
            known.add(feature)
        shapes.update(enumerate(sizes))
    return picked


def _features(call: dict) -> tuple[tuple, str, tuple, tuple]:
    """(tensor dtypes, the non-tensor arguments, tensor ranks, tensor shapes) of an encoded
    call."""
    tensors: list[dict] = []

    def strip(x):
        if isinstance(x, dict) and "tensor" in x:
            tensors.append(x)
            return "T"
        if isinstance(x, list):
            return [strip(v) for v in x]
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items()}
        return x

    options = json.dumps(strip({"args": call["args"], "kwargs": call.get("kwargs", {})}))
    dtypes = tuple(t["tensor"] for t in tensors)
    ranks = tuple(len(t["shape"]) for t in tensors)
    return dtypes, options, ranks, tuple(tuple(t["shape"]) for t in tensors)


def calls_text(calls: dict[str, list[dict]]) -> str:
    """One JSON object per line, sorted by overload, then by text."""
    lines = sorted(
        (name, json.dumps(call, allow_nan=False)) for name, kept in calls.items() for call in kept
    )
    return "".join(f"{line}\n" for _, line in lines)


def parse_calls(text: str) -> dict[str, list[dict]]:
    calls: dict[str, list[dict]] = {}
    for line in text.splitlines():
        if line.strip():
            call = json.loads(line)
            calls.setdefault(call["op"], []).append(call)
    return calls


def golden_text(graph: dict[str, Reach]) -> str:
    """One overload per line: `name  # workloads: a, b; inside: x, y`."""
    lines = []
    for name in sorted(graph):
        reach = graph[name]
        parts = [f"workloads: {', '.join(sorted(reach.workloads))}"] if reach.workloads else []
        parts += [f"inside: {', '.join(sorted(reach.inside))}"] if reach.inside else []
        lines.append(f"{name}  # {'; '.join(parts)}")
    return "\n".join(lines) + "\n"


def parse_golden(text: str) -> dict[str, Reach]:
    graph: dict[str, Reach] = {}
    for line in text.splitlines():
        name, _, comment = line.partition("#")
        name = name.strip()
        if not name:
            continue
        reach = graph.setdefault(name, Reach())
        for part in comment.split(";"):
            key, _, values = part.partition(":")
            names = {v.strip() for v in values.split(",") if v.strip()}
            if key.strip() == "workloads":
                reach.workloads |= names
            elif key.strip() == "inside":
                reach.inside |= names
    return graph


def reached_through_fallback(graph: dict[str, Reach], how: Callable[[str], str]) -> list[str]:
    """The overloads of `graph` a backend reaches through its boxed fallback when running the
    workloads. `how(overload)` is discovery.how_reached for the backend: from each overload the
    workloads call, a `kernel` ends the path (tested natively), a `backend fallback` ends it in
    the set, any other (composite) kernel continues into what that kernel calls."""
    return _walk(graph, how)[0]


def reached_through_default_kernels(
    graph: dict[str, Reach], how: Callable[[str], str]
) -> list[str]:
    """The overloads of `graph` the backend runs through torch's own composite kernels (a
    `default backend kernel` or a `math kernel`) on the way from the workloads to its kernels
    and fallback: what they compute is done by the overloads they call."""
    return _walk(graph, how)[1]


def _walk(
    graph: dict[str, Reach], how: Callable[[str], str]
) -> tuple[list[str], list[str], list[str]]:
    callees: dict[str, set[str]] = {}
    for name, reach in graph.items():
        for caller in reach.inside:
            callees.setdefault(caller, set()).add(name)
    todo = [name for name, reach in graph.items() if reach.workloads]
    seen = set(todo)
    fallback, composite, kernels = set(), set(), set()
    while todo:
        name = todo.pop()
        kind = how(name)
        if kind == "backend fallback":
            fallback.add(name)
        elif kind == "kernel":
            kernels.add(name)
        else:
            if kind != "none":
                composite.add(name)
            for callee in callees.get(name, ()):
                if callee not in seen:
                    seen.add(callee)
                    todo.append(callee)
    return sorted(fallback), sorted(composite), sorted(kernels)


def minor_of(version: str) -> tuple[int, int]:
    major, minor = re.match(r"(\d+)\.(\d+)", version).groups()
    return int(major), int(minor)


def golden_path(version: str | None = None, directory: str = WORKLOADS_DIR) -> str:
    """The list recorded for this torch minor (where it would be written)."""
    major, minor = minor_of(version or torch.__version__)
    return os.path.join(directory, f"torch-{major}.{minor}.txt")


def nearest_golden_path(version: str | None = None, directory: str = WORKLOADS_DIR) -> str:
    """This torch minor's list, else the newest older one, else the oldest: models reach much
    the same overloads across neighbouring releases."""
    want = minor_of(version or torch.__version__)
    found = {}
    for name in os.listdir(directory) if os.path.isdir(directory) else ():
        m = re.fullmatch(r"torch-(\d+)\.(\d+)\.txt", name)
        if m:
            found[(int(m.group(1)), int(m.group(2)))] = os.path.join(directory, name)
    if not found:
        raise FileNotFoundError(
            f"no workload list in {directory}: run python -m conformance.tools.record_workloads"
        )
    older = [v for v in found if v <= want]
    return found[max(older)] if older else found[min(found)]


def calls_path(list_path: str) -> str:
    """The calls file beside a golden list: torch-X.Y.txt -> torch-X.Y-calls.jsonl."""
    return re.sub(r"\.txt$", "", list_path) + "-calls.jsonl"


def nearest_calls_path(version: str | None = None, directory: str = WORKLOADS_DIR) -> str | None:
    """The calls file beside the nearest golden list (`nearest_golden_path`), or None when
    that list has none (or there is no list): no model calls for this torch."""
    try:
        path = calls_path(nearest_golden_path(version, directory))
    except FileNotFoundError:
        return None
    return path if os.path.exists(path) else None


def read_golden(path: str) -> dict[str, Reach]:
    """The golden graph of this torch's list (or the nearest), without overloads this torch
    does not have."""
    with open(path) as f:
        graph = parse_golden(f.read())
    return {name: reach for name, reach in graph.items() if _exists(name)}


def model_fallback_overloads(version: str | None = None) -> list[str]:
    """The default fallback set: overloads the representative models reach through the boxed
    fallback of the backend that is loaded."""
    from conformance.engine.discovery import how_reached

    return reached_through_fallback(read_golden(nearest_golden_path(version)), how_reached)


def model_composite_overloads(version: str | None = None) -> list[str]:
    """Of `model_default_kernel_overloads`, those the workloads call directly (e.g. gelu, run as
    gelu.out): no case of their own, but their gradients are what training computes on the
    device (the -grad cases)."""
    from conformance.engine.discovery import how_reached

    graph = read_golden(nearest_golden_path(version))
    return [o for o in reached_through_default_kernels(graph, how_reached) if graph[o].workloads]


def model_overloads(version: str | None = None) -> list[str]:
    """What the representative models need of the loaded backend: the overloads they reach
    that end on one of its kernels or on its boxed fallback."""
    from conformance.engine.discovery import how_reached

    graph = read_golden(nearest_golden_path(version))
    fallback, _, kernels = _walk(graph, how_reached)
    return sorted({*fallback, *kernels})


def model_default_kernel_overloads(version: str | None = None) -> list[str]:
    """The overloads the representative models reach that the loaded backend runs through
    torch's own composite kernels (it registered no kernel for them, and no fallback runs)."""
    from conformance.engine.discovery import how_reached

    return reached_through_default_kernels(read_golden(nearest_golden_path(version)), how_reached)


def excluded(path: str = EXCLUDED_FILE) -> dict[str, str]:
    """{overload: reason} the default run leaves out of the model-derived set: overloads whose
    results the suite cannot compare yet (random draws, ...). Never a backend's bug: those go
    to the expectations manifests."""
    import tomllib

    if not os.path.exists(path):
        return {}
    with open(path, "rb") as f:
        data = tomllib.load(f)
    return {e["overload"]: e["reason"] for e in data.get("excluded", [])}


def _exists(overload: str) -> bool:
    name, _, tag = overload.partition(".")
    try:
        torch._C._dispatch_find_schema_or_throw(f"aten::{name}", tag)
        return True
    except RuntimeError:
        return False

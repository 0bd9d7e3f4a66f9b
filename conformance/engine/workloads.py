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
"""

from __future__ import annotations

import io
import os
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from conformance.engine.discovery import overload_name

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
    """

    def __init__(self) -> None:
        super().__init__()
        self.top: set[str] = set()  # called by the workload itself
        self.inside: dict[str, set[str]] = {}  # callee -> composite overloads that called it
        self._stack: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        if name.startswith("aten::"):
            overload = overload_name(name)
            if self._stack:
                self.inside.setdefault(overload, set()).add(self._stack[-1])
            else:
                self.top.add(overload)
            if overload not in self._stack:
                self._probe(func, overload, args, kwargs)
        return func(*args, **kwargs)

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
        for copy in (_to_meta, _clone_written(func)):
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


def _to_meta(x):
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    return x


def _clone_written(func):
    """Copies only for tensors the schema writes (the probe must not change the workload)."""

    def copy(x):
        return x.detach().clone() if isinstance(x, torch.Tensor) else x

    writes = any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments)
    return copy if writes else (lambda x: x)


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


def record(workloads: tuple[Workload, ...] = WORKLOADS) -> dict[str, Reach]:
    """{overload: Reach} over the workloads, recorded on CPU. Attention runs SDPA's math
    backend: the one PyTorch picks for a PrivateUse1 device that registers no
    `_fused_sdp_choice` (a backend that does is tested on its registered kernels)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    graph: dict[str, Reach] = {}
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
    return graph


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

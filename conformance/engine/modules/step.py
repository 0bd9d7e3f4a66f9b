"""One step of a module case, on one device: the module built on CPU from the ModuleInfo's sample
(seeded, so every build is the same), copied to where it runs, its forward with the sample's
inputs, one backward with seeded grad_outputs, and what came out: the outputs, the inputs' and
the parameters' gradients, and the module's state afterwards (parameters and buffers: running
statistics, `num_batches_tracked`).

Every tensor reaches the device by the harness's own path (engine/transfer.py: one contiguous
host->device copy of its storage, strides rebuilt with `as_strided`): the module's parameters
and buffers are swapped for such copies (`Module._apply`, as `.to()` does), so a broken strided
`_copy_from` shows as such, never as a module's divergence.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch
from torch.nn.utils.rnn import PackedSequence
from torch.utils._pytree import tree_flatten

from conformance.engine import kept, oracles
from conformance.engine.layouts import Placement
from conformance.engine.modules import cases, suite_specs
from conformance.engine.modules.cases import MEMORY_FORMATS, ModuleCase, module_infos, samples
from conformance.engine.transfer import read_back

SEED = 0  # the seed of a case's build, its inputs and its grad_outputs


def place(t: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A copy of the CPU tensor `t` on `device` with its strides where they are channels_last
    (else contiguous), placed as the op cases place theirs (`layouts.Placement`: one copy of
    the storage, then `as_strided`, or view ops on a device without storage). On CPU too a
    copy: a step never writes into the prepared inputs."""
    data = t.detach()
    formats = (torch.channels_last, torch.channels_last_3d)
    if not (data.dim() in (4, 5) and any(data.is_contiguous(memory_format=f) for f in formats)):
        data = data.contiguous()
    dense = data.clone()  # its strides kept, storage offset 0
    flat = dense.as_strided((dense.numel(),), (1,))
    return Placement(flat, tuple(dense.shape), dense.stride(), 0).materialize(device)[1]


def host(t: torch.Tensor) -> torch.Tensor:
    """The CPU values of `t` (the harness's read-back; CPU tensors as they are)."""
    return read_back(t.detach())


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """`obj` with every tensor `fn`'d (tuples, lists, dicts and PackedSequences walked)."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, PackedSequence):
        return PackedSequence(
            fn(obj.data),
            obj.batch_sizes,  # stays on CPU, as pack_padded_sequence makes it
            None if obj.sorted_indices is None else fn(obj.sorted_indices),
            None if obj.unsorted_indices is None else fn(obj.unsorted_indices),
        )
    if isinstance(obj, (tuple, list)):
        return type(obj)(map_tensors(o, fn) for o in obj)
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn) for k, v in obj.items()}
    return copy.deepcopy(obj)


def leaves(obj: Any) -> list[Any]:
    """The leaves of a result or inputs (PackedSequence's fields included)."""
    if isinstance(obj, PackedSequence):
        return [obj.data, obj.batch_sizes, obj.sorted_indices, obj.unsorted_indices]
    if isinstance(obj, (tuple, list)):
        return [leaf for o in obj for leaf in leaves(o)]
    if isinstance(obj, dict):
        return [leaf for o in obj.values() for leaf in leaves(o)]
    return tree_flatten(obj)[0]


@dataclass
class Prepared:
    """A case's CPU module (before any step), inputs and everything seeded, made once."""

    case: ModuleCase
    module: torch.nn.Module
    args: tuple
    kwargs: dict
    upstream: tuple[float, float] | None = None  # torch's own (rtol, atol) for this parity


def upstream_tolerance(info: Any, dtype: torch.dtype) -> tuple[float, float] | None:
    """The (rtol, atol) torch's ModuleInfo declares for `test_cpu_gpu_parity` on any device in
    `dtype` (a toleranceOverride or precisionOverride), None where it declares none."""
    for decorate in info.decorators or ():
        if getattr(decorate, "test_name", None) != "test_cpu_gpu_parity":
            continue
        if decorate.device_type is not None or (decorate.dtypes and dtype not in decorate.dtypes):
            continue
        for d in decorate.decorators:
            found = getattr(d, "d", {}).get(dtype)
            if found is not None:  # tol(atol, rtol), or a precisionOverride's atol
                atol, rtol = (found.atol, found.rtol) if hasattr(found, "atol") else (found, 0.0)
                return float(rtol), float(atol)
    return None


@dataclass(frozen=True)
class ModuleSamples:
    """What a module's cases use of its ModuleInfo: its class, its samples (ModuleInput, or as
    kept: their constructor_input and forward_input) and torch's own tolerance for a dtype."""

    module_cls: Any
    samples: tuple[Any, ...]
    upstream: tuple[float, float] | None


#: the folder, in a torch version's sample cache, of the modules' samples (engine/kept.py)
STORE = "modules"


@functools.lru_cache(maxsize=8)
def seeded_samples(
    module: str, dtype: torch.dtype, training: bool, cache_dir: str | None = None
) -> ModuleSamples:
    """The ModuleInfo's samples, drawn after seeding (the same every time), made once per
    process for the cases that follow each other (a module's cases, one per sample, would
    each draw them all again: 800 samples of LinearCrossEntropyLoss, 800 times), and kept in
    the sample cache `cache_dir`: a warm run never imports module_db (which imports op_db:
    about 3 s in each process that ran a module case). The steps copy what they use
    (`place`), so the samples stay as drawn."""
    mode = "train" if training else "eval"
    name = f"{module}-{str(dtype).removeprefix('torch.')}-{mode}"
    path = kept.path_of(cache_dir, STORE, name, (__file__, cases.__file__, suite_specs.__file__))
    stored = kept.load(path)
    if stored is not kept.MISSING:
        module_cls, upstream, inputs = stored
        return ModuleSamples(module_cls, tuple(_kept_input(*i) for i in inputs), upstream)
    info = module_infos()[module]
    oracles.seed_value(SEED)
    drawn = tuple(samples(info, dtype, training))
    found = ModuleSamples(info.module_cls, drawn, upstream_tolerance(info, dtype))
    inputs = [
        (s.constructor_input.args, s.constructor_input.kwargs)
        + (s.forward_input.args, s.forward_input.kwargs)
        for s in drawn
    ]
    kept.keep(path, (found.module_cls, found.upstream, inputs))
    return found


def _kept_input(ctor_args: Any, ctor_kwargs: Any, args: Any, kwargs: Any) -> SimpleNamespace:
    return SimpleNamespace(
        constructor_input=SimpleNamespace(args=ctor_args, kwargs=ctor_kwargs),
        forward_input=SimpleNamespace(args=args, kwargs=kwargs),
    )


def prepare(case: ModuleCase, cache_dir: str | None = None) -> Prepared:
    """The case's module and inputs on CPU, in its dtype, mode and memory format (its samples
    kept in the sample cache `cache_dir`: `seeded_samples`)."""
    found = seeded_samples(case.module, case.torch_dtype, case.training, cache_dir)
    sample = found.samples[case.sample]
    ctor = sample.constructor_input
    oracles.seed_value(SEED)
    module = found.module_cls(*ctor.args, **ctor.kwargs).to(case.torch_dtype)
    module.train(case.training)
    args, kwargs = sample.forward_input.args, sample.forward_input.kwargs
    if isinstance(module, torch.nn.modules.lazy.LazyModuleMixin):
        with torch.no_grad():  # materialise its parameters (as torch's parity test does)
            module(*args, **kwargs)
    fmt = MEMORY_FORMATS[case.memory_format]
    if fmt is not torch.contiguous_format:  # every tensor of the format's rank: weights, inputs
        rank = 4 if fmt is torch.channels_last else 5

        def convert(t: torch.Tensor) -> torch.Tensor:
            if t.dim() != rank:
                return t
            return t.detach().contiguous(memory_format=fmt).requires_grad_(t.requires_grad)

        module._apply(convert)
        args, kwargs = map_tensors(args, convert), map_tensors(kwargs, convert)
    return Prepared(case, module, args, kwargs, found.upstream)


@dataclass
class StepResult:
    """What one step gave, on CPU (values read back), by name."""

    outputs: list[Any]  # the forward's leaves (tensors read back, other values as they are)
    grads: dict[str, torch.Tensor | None] = field(default_factory=dict)  # "input 0", "weight"
    state: dict[str, torch.Tensor] = field(default_factory=dict)  # parameters and buffers after
    module: torch.nn.Module | None = None  # the module as the step left it (on its device)


def build(prepared: Prepared, device: torch.device | str, dtype: torch.dtype | None = None):
    """The case's module and inputs on `device` (in `dtype` where given: the float64 truth),
    each tensor input requiring grad as the sample's does."""
    module = copy.deepcopy(prepared.module)
    if dtype is not None:
        module = module.to(dtype)

    def convert(t: torch.Tensor) -> torch.Tensor:
        if dtype is not None and t.is_floating_point():
            t = t.detach().to(dtype)
        return place(t, device)

    module._apply(convert)

    def input_of(t: torch.Tensor) -> torch.Tensor:
        out = convert(t).detach()
        return out.requires_grad_(t.requires_grad and (out.is_floating_point() or out.is_complex()))

    args = map_tensors(prepared.args, input_of)
    kwargs = map_tensors(prepared.kwargs, input_of)
    return module, args, kwargs


def grad_outputs(outputs: list[Any]) -> list[torch.Tensor | None]:
    """The seeded grad_output (on CPU) of each output leaf that requires grad, else None."""
    gen = torch.Generator().manual_seed(SEED)
    seeds: list[torch.Tensor | None] = []
    for out in outputs:
        if isinstance(out, torch.Tensor) and out.requires_grad:
            g = torch.randn(out.shape, generator=gen, dtype=torch.float64)
            seeds.append(g.to(out.dtype) if out.is_floating_point() else g)
        else:
            seeds.append(None)
    return seeds


def run_step(
    prepared: Prepared,
    device: torch.device | str,
    seeds: list[torch.Tensor | None] | None = None,
    dtype: torch.dtype | None = None,
    seed: int = SEED,
) -> tuple[StepResult, list[torch.Tensor | None]]:
    """The forward and one backward of the case on `device`, read back; and the grad_outputs
    used (made from this step's outputs where `seeds` is None: CPU's step makes them); `seed`:
    the generators' seed before the forward (another one shows whether the module is random)."""
    module, args, kwargs = build(prepared, device, dtype)
    oracles.seed_value(seed)
    out = module(*args, **kwargs)
    outs = leaves(out)
    if seeds is None:
        seeds = grad_outputs(outs)
    pairs = [
        (o, place(g.to(o.dtype), o.device))
        for o, g in zip(outs, seeds, strict=False)
        if g is not None and isinstance(o, torch.Tensor) and o.requires_grad
    ]
    if pairs:
        torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
    result = StepResult([host(o) if isinstance(o, torch.Tensor) else o for o in outs])
    for i, t in enumerate(leaves((args, kwargs))):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            result.grads[f"input {i}"] = None if t.grad is None else host(t.grad)
    for name, p in module.named_parameters():
        result.grads[name] = None if p.grad is None else host(p.grad)
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        result.state[name] = host(t)
    result.module = module
    return result, seeds

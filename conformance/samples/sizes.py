"""The `sizes` value set: extents that cross the boundaries where device kernels break.

OpInfo's samples are small (`sum` reduces at most 15 elements, `cumsum` scans at most 10), while
NPU kernels work in tiles and vectors: a tail of a partial vector, a carry between scan blocks of
1,024, a bfloat16 accumulation across tiles of 16 fail only past those sizes. Each ordinary
sample here is grown along the extent that matters (`plan`), by tiling its own values:

- pointwise ops: every operand of the sample's shape flattened to n elements (vector tails:
  7 to 4,097);
- reductions, scans, softmax, sorts (a `dim` argument, or a result smaller than the input):
  the reduced or scanned dimension (every operand of the input's shape alike), or the whole
  input flattened for a full reduction (1 to 65,537 elements);
- matrix products: the contracted dimension of both operands (mm, bmm, mv, dot: their other
  dims cut to one, so 65,537 fits the budget); normalisations: the normalised extent (layer
  norm's last dimension, batch norm's batch); losses: the batch (input and target: nll, cross
  entropy, mse, bce, smooth l1, huber, l1, soft margin);
  pooling: the last spatial dimension; gathers: the number of indices gathered (gather and
  take_along_dim: the input and the index alike, along the dim).

Float operands of an extent are refilled with positive values of mixed magnitudes
((0.5 + u/2) x 2^-k, k in 0..4: their sums reach 2^14 to 2^15 at 65,537 elements, the range where
a bfloat16 accumulator stops adding), so low-precision accumulation shows; ops whose ties have
no specified order (sort, topk, argmax, median, ...) get distinct values instead, and no extent
larger than the dtype has distinct values for. Integer operands and pointwise operands keep
their tiled values (the op's domain). A call is kept where CPU accepts it, every output it returns
holds elements (an empty output checks nothing), and it stays within `MAX_ELEMENTS` elements
per tensor (other dimensions are cut to 1 first).

Families no plan grows (group norm, convolution, SDPA: `NOT_SIZED`, with the reason) are
named in the run's header.

`--sizes` chooses the extents: `boundaries` (the default: one past each boundary, within the
budget), `large` (both sides of every boundary and 2^20), `none` (no -sizes cases).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from conformance.engine import ieee
from conformance.engine.calls import Call, clone_tree
from conformance.engine.discovery import resolve
from conformance.engine.operands import data_args
from conformance.engine.siblings import _is_out, schema_of
from conformance.samples import cpu_survivors, values

SIZE_SETS = ("boundaries", "large", "none")
POINTWISE_SIZES = {
    "boundaries": (7, 9, 17, 65, 4097),
    "large": (7, 8, 9, 15, 16, 17, 63, 64, 65, 4095, 4096, 4097, (1 << 20) + 3),
}
EXTENT_SIZES = {
    "boundaries": (1, 17, 33, 257, 1025, 65537),
    "large": (1, 15, 16, 17, 31, 32, 33, 255, 256, 257, 1023, 1024, 1025, 65536, 65537, 1 << 20),
}
MAX_ELEMENTS = {"boundaries": 1 << 19, "large": 1 << 22}  # per grown tensor
MAX_SIZED = 16  # calls per case (the longest size list)
SEED = 65537

# contracted dimensions of the matrix products: (argument position, dim) of each operand
CONTRACTIONS: dict[str, tuple[tuple[int, int], ...]] = {
    "mm": ((0, 1), (1, 0)),
    "addmm": ((1, 1), (2, 0)),
    "_addmm_activation": ((1, 1), (2, 0)),
    "bmm": ((0, 2), (1, 1)),
    "baddbmm": ((1, 2), (2, 1)),
    "addbmm": ((1, 2), (2, 1)),
    "mv": ((0, 1), (1, 0)),
    "addmv": ((1, 1), (2, 0)),
    "dot": ((0, 0), (1, 0)),
    "vdot": ((0, 0), (1, 0)),
    "linear": ((0, -1), (1, 1)),
}
# products whose other dims may be cut to one element (no operand the result must match in
# shape, as addmm's self): so the contraction reaches 65,537 within the element budget
FREE_DIMS_CUT = frozenset({"mm", "bmm", "mv", "dot", "vdot"})
# the batch of normalisations and losses (reduced over it): (argument position, dim)
BATCHES: dict[str, tuple[tuple[int, int], ...]] = {
    "native_batch_norm": ((0, 0),),
    "_native_batch_norm_legit": ((0, 0),),
    "_native_batch_norm_legit_no_training": ((0, 0),),
    "_batch_norm_with_update": ((0, 0),),
    "nll_loss_forward": ((0, 0), (1, 0)),
    "nll_loss2d_forward": ((0, -1), (1, -1)),
    "nll_loss": ((0, 0), (1, 0)),
    "cross_entropy_loss": ((0, 0), (1, 0)),
    **{
        loss: ((0, 0), (1, 0))
        for loss in ("mse_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits")
        + ("smooth_l1_loss", "huber_loss", "l1_loss", "soft_margin_loss")
    },
}
# families the docs could be read to claim that no plan grows, and why (said in the header)
NOT_SIZED = {
    "native_group_norm": "its extent is three int arguments (N, C, HxW) kept in step",
    "convolution": "the extent is a window over spatial dims: kernel and padding in step",
    "_scaled_dot_product_*": "the sequence lengths of three operands and a mask in step",
}
# the indices a gather reads with: argument position (flattened), or (position, dim argument)
GATHERS: dict[str, int] = {"index_select": 2, "embedding": 1, "take": 1}
# gathers along a dim argument: the index's position; it grows along the dim with the input
# (its values stay within the input's grown extent), or every output would stay as small
DIM_GATHERS: dict[str, int] = {"gather": 2, "take_along_dim": 1}
POOLS = ("max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool", "_adaptive_avg_pool")
# copies: every byte moved, vector tails included
COPIES = frozenset({"_copy_from", "_copy_from_and_resize", "copy", "_to_copy", "clone"})
# ties in these have no specified order on every backend: distinct values only
ORDERED = frozenset(
    {"sort", "argsort", "msort", "topk", "kthvalue", "median", "nanmedian", "mode", "max", "min"}
    | {"argmax", "argmin", "cummax", "cummin", "unique", "_unique2", "searchsorted"}
)


@dataclass
class Plan:
    """How to grow a call: (argument position, dim or None to flatten) for each operand."""

    kind: str  # "pointwise" or "extent"
    grow: list[tuple[int, int | None]]
    fix: Callable[[list[Any], int], None] | None = None  # adjust size arguments in place
    # {position: dims cut to one element first}: a smaller batch around the same extent
    cut: dict[int, list[int]] = field(default_factory=dict)


def _op(overload: str) -> str:
    return ieee.base(overload)


def _dim_arg(schema: Any) -> int | None:
    for i, a in enumerate(schema.arguments):
        if a.name == "dim" and not _is_out(a):
            return i
    return None


def _value(call: Call, schema: Any, i: int) -> Any:
    arg = schema.arguments[i]
    if arg.name in call.kwargs:
        return call.kwargs[arg.name]
    if i < len(call.args):
        return call.args[i]
    return arg.default_value if arg.has_default_value() else None


def _tensor_positions(call: Call, schema: Any) -> list[int]:
    return [
        i
        for i, a in enumerate(schema.arguments[: len(call.args)])
        if isinstance(call.args[i], torch.Tensor) and not _is_out(a)
    ]


def applies(overload: str, dtype: torch.dtype) -> bool:
    """Whether the overload has an extent to grow (by its name, schema and tags)."""
    from conformance.engine import oracles

    schema = schema_of(overload)
    if schema is None or not any(
        a.type.isSubtypeOf(torch.TensorType.get()) for a in schema.arguments
    ):
        return False
    if oracles.is_nondeterministic(resolve(overload)):
        return False  # random draws: their values are not compared element by element
    name = _op(overload)
    if name in CONTRACTIONS or name in BATCHES or name in GATHERS or name in COPIES:
        return True
    if name == "native_layer_norm":
        return True
    if name.startswith(POOLS) and "backward" not in name:
        return True
    if ieee.pointwise(overload):
        return True
    tags = {str(t) for t in resolve(overload).tags}
    return _dim_arg(schema) is not None or "Tag.reduction" in tags


def plan(overload: str, call: Call) -> Plan | None:
    """How to grow `call` (None: no extent of it can grow)."""
    schema = schema_of(overload)
    name = _op(overload)
    tensors = _tensor_positions(call, schema)
    if not tensors:
        return None
    if name in CONTRACTIONS:
        grow = [(p, d) for p, d in CONTRACTIONS[name] if p in tensors]
        if len(grow) != 2:
            return None
        cut = {}
        if name in FREE_DIMS_CUT:  # no operand the result must match: one row, one column
            cut = {p: [i for i in range(call.args[p].dim()) if i != d % call.args[p].dim()]
                   for p, d in grow}  # fmt: skip
        return Plan("extent", grow, cut=cut)
    if name in BATCHES:
        grow = [(p, d) for p, d in BATCHES[name] if p in tensors]
        spatial = {grow[0][0]: list(range(2, call.args[grow[0][0]].dim()))} if grow else {}
        return Plan("extent", grow, cut=spatial if "norm" in name else {}) if grow else None
    if name in GATHERS:
        p = GATHERS[name]
        return Plan("gather", [(p, None)]) if p in tensors else None
    if name == "native_layer_norm":
        leading = call.args[0].dim() - len(call.args[1])
        return Plan(
            "extent",
            [(p, -1) for p in tensors],
            fix=_layer_norm_shape,
            cut={0: list(range(leading))},
        )
    first = call.args[tensors[0]]
    same = [p for p in tensors if call.args[p].shape == first.shape]
    if name.startswith(POOLS) and "backward" not in name and first.dim() >= 3:
        batch = [0] if first.dim() >= 4 else []  # the window needs the other spatial dims
        return Plan("extent", [(tensors[0], -1)], cut={tensors[0]: batch})
    if name in COPIES:
        return Plan("pointwise", [(p, None) for p in same]) if len(same) == len(tensors) else None
    if ieee.pointwise(overload):
        if any(call.args[p].numel() > 1 and p not in same for p in tensors):
            return None  # broadcasting operands: no one extent
        return Plan("pointwise", [(p, None) for p in same])
    d = _dim_arg(schema)
    if d is not None and any(str(r.type).startswith("List[") for r in schema.returns):
        return None  # unbind, split: the extent is a number of results (a graph of 65,537)
    dim = _value(call, schema, d) if d is not None else None
    if isinstance(dim, list | tuple):
        dim = dim[0] if len(dim) == 1 else None if not dim else dim
    if isinstance(dim, list | tuple):
        return None  # several reduced dims: their product is the extent, not one dim
    index = DIM_GATHERS.get(name)
    if index is not None and isinstance(dim, int) and index in tensors:
        if call.args[index].dim() != first.dim() or first.dim() == 0:
            return None
        others = [d for d in range(first.dim()) if d != dim % first.dim()]
        grow = [(tensors[0], dim), (index, dim)]
        return Plan("extent", grow, cut={tensors[0]: others, index: others})
    if isinstance(dim, int) and first.dim() > 0:
        others = [d for d in range(first.dim()) if d != dim % first.dim()]
        return Plan("extent", [(p, dim) for p in same], cut=dict.fromkeys(same, others))
    if d is not None or _reduces(overload, call):
        if len(same) != len(tensors):
            return None
        return Plan("extent", [(p, None) for p in same])
    return None


def _reduces(overload: str, call: Call) -> bool:
    tags = {str(t) for t in resolve(overload).tags}
    return "Tag.reduction" in tags


def _layer_norm_shape(args: list[Any], n: int) -> None:
    shape = list(args[1])
    shape[-1] = n
    args[1] = shape


def _tile(t: torch.Tensor, dim: int | None, n: int) -> torch.Tensor | None:
    """`t` grown to `n` along `dim` (None: flattened to n elements) by repeating its values."""
    if dim is None:
        flat = t.reshape(-1)
        if not flat.numel():
            return None
        return flat.repeat(-(-n // flat.numel()))[:n].clone()
    if t.dim() == 0:
        return None
    d = dim % t.dim()
    if t.shape[d] == 0:
        return None
    reps = [1] * t.dim()
    reps[d] = -(-n // t.shape[d])
    return t.repeat(reps).narrow(d, 0, n).contiguous()


def _cut(t: torch.Tensor, dims: list[int]) -> torch.Tensor:
    """`t` with `dims` cut to one element (a smaller batch around the same extent)."""
    for d in dims:
        t = t.narrow(d, 0, min(1, t.shape[d]))
    return t.contiguous()


def _mixed(shape: torch.Size, dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    """Positive values of mixed magnitudes: (0.5 + u/2) x 2^-k, k uniform in 0..4."""
    n = math.prod(shape)
    u = torch.rand(n, generator=g, dtype=torch.float64)
    k = torch.randint(0, 5, (n,), generator=g).to(torch.float64)
    return ((0.5 + u / 2) * torch.exp2(-k)).to(dtype).reshape(shape)


def distinct(n: int, dtype: torch.dtype, g: torch.Generator) -> torch.Tensor | None:
    """`n` distinct values of `dtype` in random order (None: the dtype has too few in a
    moderate range): positive normal numbers between 2^-8 and 2^8."""
    if dtype == torch.bool:
        return None if n > 2 else torch.tensor([False, True][:n])
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        if n > info.max:
            return None
        return (torch.randperm(n, generator=g) + (1 if info.min == 0 else -(n // 2))).to(dtype)
    grid = torch.arange(-8, 8, dtype=torch.float64)
    mant = 1 + torch.arange(1 << 7, dtype=torch.float64) / (1 << 7)
    if torch.finfo(dtype).eps > 2**-7:  # bfloat16: 8 bits of mantissa
        mant = 1 + torch.arange(1 << 6, dtype=torch.float64) / (1 << 6)
    values = (mant[None, :] * torch.exp2(grid)[:, None]).reshape(-1)
    if dtype in (torch.float32, torch.float64) and n > values.numel():
        values = torch.randperm(n, generator=g).to(torch.float64) + 1
    if n > values.numel():
        return None
    pick = torch.randperm(values.numel(), generator=g)[:n]
    return values[pick].to(dtype)


def grown(overload: str, call: Call, p: Plan, n: int, dtype: torch.dtype, budget: int):
    """`call` grown to extent `n` by plan `p`, values refilled (None: it cannot be)."""
    schema = schema_of(overload)
    args = list(call.args)
    g = torch.Generator().manual_seed(SEED + n)
    data = {i for i, _ in data_args(schema)}
    ordered = _op(overload) in ORDERED
    for pos, dim in p.grow:
        t = args[pos]
        if pos in p.cut:
            t = _cut(t, p.cut[pos])
        t = _tile(t, dim, n)
        if t is None or t.numel() > budget:
            return None
        if t.dtype == dtype and pos in data and p.kind == "extent":
            if ordered:
                values = distinct(t.numel(), dtype, g)
                if values is None:
                    return None
                t = values.reshape(t.shape)
            elif dtype.is_floating_point:
                t = _mixed(t.shape, dtype, g)
        args[pos] = t
    if p.fix is not None:
        p.fix(args, n)
    return Call(call.overload, tuple(args), dict(call.kwargs), cpu_args=call.cpu_args)


def _cost(overload: str, call: Call, p: Plan) -> tuple[int, int, int]:
    """Which base grows best (smallest first): one whose grown operands are all non-empty
    tensors of rank >= 1, with the most data operands among them, and the fewest elements."""
    grown_ = [call.args[i] for i, _ in p.grow]
    if p.kind == "gather":  # the source gathered from, too
        grown_.append(call.args[0])
    empty = any(t.numel() == 0 or t.dim() == 0 for t in grown_)
    data = {i for i, _ in data_args(schema_of(overload))}
    return (int(empty), -sum(i in data for i, _ in p.grow), sum(t.numel() for t in grown_))


def sized_calls(overload: str, dtype: torch.dtype, ordinary: list[Call], choice: str) -> list[Call]:
    """One call per size of the choice (`boundaries`, `large`), grown from the ordinary call
    whose other dimensions are smallest; kept where CPU accepts it."""
    if choice == "none" or not ordinary:
        return []
    plans = [(c, plan(overload, c)) for c in ordinary]
    plans = [(c, p) for c, p in plans if p is not None]
    if not plans:
        return []
    call, p = min(plans, key=lambda cp: _cost(overload, *cp))
    sizes = (POINTWISE_SIZES if p.kind == "pointwise" else EXTENT_SIZES)[choice]
    made = [grown(overload, call, p, n, dtype, MAX_ELEMENTS[choice]) for n in sizes]
    made = [c for c in made if c is not None]
    # CPU may crash on a new size (a kernel's own tiling): the first run is in a forked child
    kept = [values.remade(c) for c in cpu_survivors.survivors(made, _run)]
    return [c for c in kept if c is not None and _accepted(c)]


def _run(call: Call) -> object:
    from conformance.samples.values import _run_on_cpu

    return _run_on_cpu(call)


def _accepted(call: Call) -> bool:
    """CPU accepts the grown call and every tensor it returns holds elements (an empty
    output compares nothing, whatever the size of the operand that grew)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = _run(Call(call.overload, clone_tree(call.args), clone_tree(call.kwargs)))
    except Exception:  # noqa: BLE001 - CPU rejects the grown call: not a sample
        return False
    outputs = [t for t in tree_flatten(result)[0] if isinstance(t, torch.Tensor)]
    return all(t.numel() for t in outputs)

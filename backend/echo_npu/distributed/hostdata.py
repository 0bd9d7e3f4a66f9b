"""Host side of the ``echo`` backend: device tensors to bytes and back, the reductions (in
rank order, in the tensor's dtype, with torch's CPU ops), the dtype/op checks, and the data
faults (``ccl_avg_divides_twice``, ``ccl_gather_strided_as_contiguous``,
``ccl_reduce_scatter_casts``, ``ccl_all_gather_tail32``)."""

from __future__ import annotations

import functools

import torch
import torch.distributed as dist

from .. import _C

# ccl_avg_divides_twice: the element counts that take the broken AVG path
AVG_TWICE_SIZES = frozenset({1, 2, 4, 28, 29, 30, 31, 33})

_RO = dist.ReduceOp


def active_faults() -> frozenset[str]:
    return frozenset(_C.get_faults())


# --------------------------------------------------------------------------- host data


def host(t: torch.Tensor) -> torch.Tensor:
    """A CPU copy of t (its logical values)."""
    return t.detach().to("cpu", copy=True)


def host_as_contiguous(t: torch.Tensor) -> torch.Tensor:
    """ccl_gather_strided_as_contiguous: t's storage read from its offset as if t were
    contiguous (what a kernel that ignores strides reads); past the storage's end: zeros."""
    n = t.numel()
    avail = t.untyped_storage().nbytes() // t.element_size() - t.storage_offset()
    k = max(0, min(n, avail))
    flat = host(t.detach().as_strided((k,), (1,), t.storage_offset()))
    if k < n:
        flat = torch.cat([flat, torch.zeros(n - k, dtype=t.dtype)])
    return flat.reshape(t.shape)


def read_input(t: torch.Tensor, as_contiguous: bool = False) -> torch.Tensor:
    if as_contiguous and not t.is_contiguous():
        return host_as_contiguous(t)
    return host(t)


def to_bytes(t: torch.Tensor) -> bytes:
    flat = t.contiguous().reshape(-1)
    if flat.numel() == 0:
        return b""
    return flat.view(torch.uint8).numpy().tobytes()


def from_bytes(data: bytes, shape, dtype: torch.dtype) -> torch.Tensor:
    shape = tuple(shape)
    expected = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
    if len(data) != expected:
        raise RuntimeError(
            f"echo: a peer sent {len(data)} bytes where {expected} were expected "
            f"({dtype}, shape {list(shape)}): tensor sizes differ between ranks"
        )
    if expected == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape)


def pack(tensors) -> bytes:
    return b"".join(to_bytes(t) for t in tensors)


def unpack(data: bytes, likes) -> list[torch.Tensor]:
    """Split data into tensors shaped like ``likes`` (tensors or (shape, dtype) pairs)."""
    out, pos = [], 0
    specs = [(tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else x for x in likes]
    total = sum(torch.Size(s).numel() * torch.empty((), dtype=d).element_size() for s, d in specs)
    if len(data) != total:
        raise RuntimeError(
            f"echo: a peer sent {len(data)} bytes where {total} were expected: tensor sizes "
            "differ between ranks"
        )
    for shape, dtype in specs:
        n = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
        out.append(from_bytes(data[pos : pos + n], shape, dtype))
        pos += n
    return out


def write(out: torch.Tensor, value: torch.Tensor) -> None:
    """Copy value into the (device) tensor out in place, through its strides and offset."""
    with torch.no_grad():
        out.copy_(value.reshape(out.shape))


# --------------------------------------------------------------------------- reductions

_INTEGRAL = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
_REDUCIBLE = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.complex64,
    torch.complex128,
    torch.bool,
    *_INTEGRAL,
)


def _op_type(reduce_op):
    """The RedOpType of an option's reduceOp (a ReduceOp object or already a RedOpType)."""
    return getattr(reduce_op, "op", reduce_op)


def _op_name(op) -> str:
    return getattr(op, "name", str(op)).split(".")[-1]


def _premul_factor(reduce_op):
    factor = getattr(reduce_op, "factor", None)
    if factor is None:
        raise RuntimeError(
            "echo: ReduceOp.PREMUL_SUM needs the factor, which this torch's ReduceOp does not "
            "expose to Python (ReduceOp.factor)"
        )
    if isinstance(factor, torch.Tensor):
        factor = factor.detach().cpu().reshape(-1)[0].item()
    return factor


def check_reduce(reduce_op, dtype: torch.dtype) -> None:
    """Raise, as NCCL and gloo do, for an op undefined on the dtype."""
    op = _op_type(reduce_op)
    name = _op_name(op)
    if dtype not in _REDUCIBLE:
        raise RuntimeError(f"echo: Cannot use ReduceOp.{name} with {dtype}: unsupported dtype")
    if op in (_RO.BAND, _RO.BOR, _RO.BXOR):
        if dtype not in _INTEGRAL and dtype != torch.bool:
            raise RuntimeError(f"echo: Cannot use ReduceOp.{name} with non-integral dtype {dtype}")
    elif op in (_RO.MIN, _RO.MAX):
        if dtype.is_complex:
            raise RuntimeError(f"echo: Cannot use ReduceOp.{name} with complex dtype {dtype}")
    elif op == _RO.AVG:
        if dtype == torch.bool:
            raise RuntimeError("echo: Cannot use ReduceOp.AVG with torch.bool")
    elif op == _RO.PREMUL_SUM:
        if not (dtype.is_floating_point or dtype.is_complex):
            raise RuntimeError(
                f"echo: Cannot use ReduceOp.PREMUL_SUM with non-floating dtype {dtype}"
            )
        _premul_factor(reduce_op)
    elif op not in (_RO.SUM, _RO.PRODUCT):
        raise RuntimeError(f"echo: unsupported ReduceOp {name}")


_BINARY = {
    _RO.SUM: torch.add,
    _RO.AVG: torch.add,
    _RO.PREMUL_SUM: torch.add,
    _RO.PRODUCT: torch.mul,
    _RO.MIN: torch.minimum,
    _RO.MAX: torch.maximum,
    _RO.BAND: torch.bitwise_and,
    _RO.BOR: torch.bitwise_or,
    _RO.BXOR: torch.bitwise_xor,
}


def reduce_parts(reduce_op, parts: list[torch.Tensor], faults=frozenset(), in_half=False):
    """Reduce parts (CPU tensors, rank order) with the op, step by step in their dtype.

    SUM/PRODUCT/MIN/MAX/bitwise: ((p0 op p1) op p2) ...; PREMUL_SUM: the sum of p_r * factor;
    AVG: the sum divided by the world size (integers: truncated). ``in_half`` is the
    ccl_reduce_scatter_casts fault: the reduction runs in float16 and is cast back.
    """
    op = _op_type(reduce_op)
    dtype = parts[0].dtype
    n = len(parts)
    if in_half:
        parts = [_to_half(p) for p in parts]
        if op in (_RO.BAND, _RO.BOR, _RO.BXOR):  # no bitwise float16: round-trip the values
            parts = [_from_half(p, dtype) for p in parts]
    if op == _RO.PREMUL_SUM:
        factor = _premul_factor(reduce_op)
        parts = [p * factor for p in parts]
    acc = functools.reduce(_BINARY[op], parts)
    if op == _RO.AVG:
        acc = _avg(acc, n)
        if "ccl_avg_divides_twice" in faults and acc.numel() in AVG_TWICE_SIZES:
            acc = _avg(acc, n)
    if in_half:
        acc = _from_half(acc, dtype)
    return acc.to(dtype)


def _avg(acc: torch.Tensor, n: int) -> torch.Tensor:
    if acc.dtype.is_floating_point or acc.dtype.is_complex:
        return acc / n
    return torch.div(acc, n, rounding_mode="trunc")


def _to_half(p: torch.Tensor) -> torch.Tensor:
    if p.is_complex():
        return torch.view_as_real(p).to(torch.float16)
    return p.to(torch.float16)


def _from_half(p: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype.is_complex:
        return torch.view_as_complex(p.to(torch.float32).contiguous()).to(dtype)
    return p.to(dtype)


def check_list(tensors, size: int, like: torch.Tensor, what: str) -> None:
    if len(tensors) != size:
        raise ValueError(f"echo: {what}: needs a list of {size} tensors, got {len(tensors)}")
    for t in tensors:
        if t.numel() != like.numel() or t.dtype != like.dtype:
            raise ValueError(
                f"echo: {what}: every tensor of the list must match the single tensor "
                f"({like.dtype}, {like.numel()} elements); got {t.dtype}, {t.numel()} elements"
            )


def split_rows(t: torch.Tensor, splits: list[int], size: int, what: str):
    """all_to_all_single's pieces: rows of dim 0 (equal parts when splits is empty)."""
    rows = t.shape[0] if t.dim() > 0 else t.numel()
    if not splits:
        if rows % size:
            raise ValueError(
                f"echo: all_to_all_single: the {what}'s {rows} rows do not split evenly "
                f"among {size} ranks; pass split sizes"
            )
        splits = [rows // size] * size
    if len(splits) != size or sum(splits) != rows or min(splits) < 0:
        raise ValueError(
            f"echo: all_to_all_single: {what} split sizes {splits} do not cover its {rows} rows "
            f"in {size} parts"
        )
    view = t if t.dim() > 0 else t.reshape(1)
    out, pos = [], 0
    for n in splits:
        out.append(view.narrow(0, pos, n))
        pos += n
    return out


def write_chunk(out: torch.Tensor, value: torch.Tensor, tail32: bool) -> None:
    if tail32:
        keep_tail32(out, [value.reshape(-1)])
        value = value.reshape(-1)
    write(out, value)


def keep_tail32(out: torch.Tensor, chunks: list[torch.Tensor]) -> None:
    """ccl_all_gather_tail32: in each chunk (flat, in out's order) the elements past the last
    multiple of 32 keep what out held (they are never written)."""
    n = chunks[0].numel()
    head = n - n % 32
    if head == n:
        return
    old = host(out).reshape(-1)
    for r, chunk in enumerate(chunks):
        chunk[head:] = old[r * n + head : (r + 1) * n]

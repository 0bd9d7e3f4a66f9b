"""Every rank's inputs, the layouts they are placed in, and the oracle: what each rank must hold
after a collective, computed in plain torch on CPU from every rank's inputs (never by another
ProcessGroup).

Inputs differ per rank and per element and are exact in their dtype; so are their sums over a
world of up to 8 ranks (floats carry fractional bits a cast to a narrower dtype loses: float64
values need 47 bits, float32 19, float16 7, bfloat16 5). PRODUCT takes small values (0.5, 1,
1.5, 2, -1; integers 1, 2, 3, -1), bool a pattern per rank. Every result is then exact in any
order of reduction: compared bit for bit, except AVG and PREMUL_SUM (a division or a factor:
within 4 ulps of the dtype).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from conformance.engine.collectives.spec import PREMUL_FACTOR, CollectiveCase, factor

FLOATING = ("float32", "float64", "float16", "bfloat16")
COMPLEX = ("complex64", "complex128")
INTEGRAL = ("int8", "int16", "int32", "int64", "uint8")
GAP = 7  # what the elements a strided view skips hold (they must stay so)


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def undefined(case: CollectiveCase) -> str | None:
    """Why torch defines no result for the case's op in its dtype (its answer is not judged;
    a crash or hang still fails), or None."""
    op, dtype = case.op, case.dtype
    if op in ("AVG", "PREMUL_SUM") and dtype in (*INTEGRAL, "bool"):
        return f"torch defines no {op} of {dtype} tensors (a floating division or factor)"
    if op in ("BAND", "BOR", "BXOR") and dtype in (*FLOATING, *COMPLEX):
        return f"torch defines no {op} of {dtype} tensors (bitwise ops need integers or bool)"
    if op in ("PRODUCT", "MIN", "MAX") and dtype in COMPLEX:
        return f"torch.distributed refuses {op} of complex tensors (c10d supports_complex)"
    return None


def values(dtype: str, n: int, rank: int, chunk: int = 0, op: str = "SUM") -> torch.Tensor:
    """`n` values of rank `rank`'s chunk `chunk` (distinct per rank and element)."""
    k = torch.arange(chunk * n, chunk * n + n, dtype=torch.int64)
    r = rank
    if dtype in COMPLEX:
        part = "float64" if dtype == "complex128" else "float32"
        real, imag = values(part, n, r, chunk, op), values(part, n, r + 5, chunk + 1, op)
        return torch.complex(real, imag)
    if op == "PRODUCT":
        if dtype == "bool":
            return (k + r) % 7 != 0
        table = (0.5, 1.0, 1.5, 2.0, -1.0) if dtype in FLOATING else (1, 2, -1, 3, 1)
        if dtype == "uint8":
            table = (1, 2, 3, 1, 1)
        return torch.tensor(table, dtype=torch_dtype(dtype))[(k * 3 + r) % 5]
    if dtype == "bool":
        return (k * 3 + r * 7) % 5 < 2
    if dtype in FLOATING:
        whole, frac_bits = {
            "float64": (1 << 17, 30),
            "float32": (1 << 15, 4),
            "float16": (32, 2),
            "bfloat16": (16, 1),
        }[dtype]
        sign = torch.where((k + r) % 5 == 0, -1.0, 1.0).double()
        w = ((r * 7919 + k * 13) % whole).double()
        if op == "AVG":  # odd elements: nearly equal magnitudes, signs alternating by rank, so
            # their mean cancels to a small result (judge.py's relative bound where it matters)
            sign = torch.where((k % 2 == 1) & (r % 2 == 1), -1.0, 1.0).double()
            w = ((k * 13) % (whole - 1) + r % 2).double()
        f = ((r * 3 + k) % (1 << frac_bits)).double() / (1 << frac_bits)
        return (sign * (w + f)).to(torch_dtype(dtype))
    low, high = {
        "int8": (-15, 16),
        "uint8": (0, 61),
        "int16": (-2000, 2001),
        "int32": (-(1 << 19), 1 << 19),
    }.get(dtype, (0, 0))
    if dtype == "int64":  # values that need more than 32 bits
        return (r * (1 << 34) + k * 7919 - (1 << 40)).to(torch.int64)
    return ((r * 7919 + k * 13) % (high - low) + low).to(torch_dtype(dtype))


def split(case: CollectiveCase, src: int, dst: int) -> int:
    """Elements rank `src` sends rank `dst` in all_to_all (the `uneven` layout varies them)."""
    return case.size + ((src + 2 * dst) % 3 if case.layout == "uneven" else 0)


def second_size(n: int) -> int:
    """The second tensor of a coalesced case."""
    return n // 2 + 1


def inputs(case: CollectiveCase, rank: int) -> list[torch.Tensor]:
    """Rank `rank`'s input tensors (CPU, contiguous, 1-D), in the order ranks.py passes them."""
    c, n, w, dt, op = case.collective, case.size, case.world, case.dtype, case.op

    def v(m: int, chunk: int = 0) -> torch.Tensor:
        return values(dt, m, rank, chunk, op)

    if c in ("reduce_scatter",):
        return [v(n, j) for j in range(w)]
    if c == "reduce_scatter_tensor":
        return [v(w * n)]
    if c == "all_to_all":
        return [v(split(case, rank, j), j) for j in range(w)]
    if c == "all_to_all_single":
        return [v(sum(split(case, rank, j) for j in range(w)))]
    if c == "scatter":
        return [v(n, j) for j in range(w)] if rank == case.root else []
    if c in ("all_reduce_coalesced", "all_gather_into_tensor_coalesced"):
        return [v(n), v(second_size(n), 1)]
    if c == "reduce_scatter_tensor_coalesced":
        return [v(w * n), v(w * second_size(n), 1)]
    if c == "barrier":
        return []
    return [v(n)]


# ---- the oracle -------------------------------------------------------------------------------
def reduce(op: str, xs: list[torch.Tensor], dtype: str) -> torch.Tensor:
    """The reduction of `xs` (one tensor per rank, in rank order) by `op`, in `dtype`."""
    st = torch.stack(xs)
    target = torch_dtype(dtype)
    wide = torch.complex128 if dtype in COMPLEX else torch.float64
    if dtype == "bool":
        logical: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
            "SUM": lambda s: s.any(0),
            "MAX": lambda s: s.any(0),
            "BOR": lambda s: s.any(0),
            "PRODUCT": lambda s: s.all(0),
            "MIN": lambda s: s.all(0),
            "BAND": lambda s: s.all(0),
            "BXOR": lambda s: s.sum(0) % 2 == 1,
        }
        return logical[op](st)
    if op in ("BAND", "BOR", "BXOR"):
        fn = {"BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}[op]
        return functools.reduce(fn, xs)
    if op == "MIN":
        return st.amin(0)
    if op == "MAX":
        return st.amax(0)
    floating = dtype in (*FLOATING, *COMPLEX)
    if op == "PRODUCT":
        return (st.to(wide).prod(0) if floating else st.prod(0)).to(target)
    if op == "SUM":
        return (st.to(wide).sum(0) if floating else st.sum(0)).to(target)
    if op == "AVG":
        return (st.to(wide).sum(0) / len(xs)).to(target)
    if op == "PREMUL_SUM":
        return (st.to(wide).sum(0) * PREMUL_FACTOR).to(target)
    raise ValueError(f"unknown reduce op {op!r}")


def expected(case: CollectiveCase, by_rank: list[list[torch.Tensor]]) -> list[list | None]:
    """What each rank's outputs (ranks.py's order) must hold, or None where nothing is
    defined (a non-root rank of reduce and gather)."""
    c, w, op, dt, root = case.collective, case.world, case.op, case.dtype, case.root
    n = case.size

    def red(xs: list[torch.Tensor]) -> torch.Tensor:
        return reduce(op, xs, dt)

    out: list[list | None] = []
    for r in range(w):
        if c in ("all_reduce", "all_reduce_coalesced"):
            k = len(by_rank[0])
            out.append([red([by_rank[j][i] for j in range(w)]) for i in range(k)])
        elif c == "reduce":
            out.append([red([by_rank[j][0] for j in range(w)])] if r == root else None)
        elif c == "broadcast":
            out.append([by_rank[root][0]])
        elif c == "all_gather":
            out.append([by_rank[j][0] for j in range(w)])
        elif c == "all_gather_into_tensor":
            out.append([torch.cat([by_rank[j][0] for j in range(w)])])
        elif c == "all_gather_into_tensor_coalesced":
            out.append([torch.cat([by_rank[j][i] for j in range(w)]) for i in range(2)])
        elif c == "gather":
            out.append([by_rank[j][0] for j in range(w)] if r == root else None)
        elif c == "reduce_scatter":
            out.append([red([by_rank[j][r] for j in range(w)])])
        elif c == "reduce_scatter_tensor":
            out.append([red([by_rank[j][0][r * n : (r + 1) * n] for j in range(w)])])
        elif c == "reduce_scatter_tensor_coalesced":
            sizes = (n, len(by_rank[0][1]) // w)
            out.append(
                [
                    red([by_rank[j][i][r * m : (r + 1) * m] for j in range(w)])
                    for i, m in enumerate(sizes)
                ]
            )
        elif c == "all_to_all":
            out.append([by_rank[j][r] for j in range(w)])
        elif c == "all_to_all_single":
            pieces = []
            for j in range(w):
                start = sum(split(case, j, k) for k in range(r))
                pieces.append(by_rank[j][0][start : start + split(case, j, r)])
            out.append([torch.cat(pieces)])
        elif c == "scatter":
            out.append([by_rank[root][r]])
        elif c in ("send_recv", "batch_isend_irecv"):
            out.append([by_rank[(r - 1) % w][0]])
        else:  # barrier: judged by its timings (judge.py)
            out.append([])
    return out


# ---- layouts ----------------------------------------------------------------------------------
def shape_of(n: int, layout: str, stacked: int = 1) -> tuple[int, ...]:
    """The shape of a tensor of `n` elements in `layout`: 2-D (q, p) for 'transposed' where
    the piece of n / `stacked` elements has a factor p (q rows: `stacked` pieces of n / stacked
    / p rows each, so a concatenation or split along dim 0, as all_gather_into_tensor and
    reduce_scatter_tensor take them, keeps every piece's rows), else 1-D. Inputs and outputs of
    one case have the shapes torch documents for the collective (issue 79: flat outputs of a
    2-D input, a form torch does not promise, failed on gloo and on any backend that checks)."""
    piece = n // stacked if stacked else n
    if layout == "transposed" and piece > 1 and factor(piece) is not None:
        p = factor(piece)
        assert p is not None
        return (n // p, p)
    return (n,)


def place(t: torch.Tensor, layout: str, device: torch.device, stacked: int = 1) -> torch.Tensor:
    """`t` (1-D, contiguous, CPU) on `device` in `layout` (`shape_of`; its row-major order is
    `t`'s): one contiguous host->device copy of a buffer, then as_strided (engine/transfer.py's
    way)."""
    from conformance.engine.transfer import to_device

    n = t.numel()
    shape = shape_of(n, layout, stacked)
    if len(shape) == 2:
        q, p = shape  # the (q, p) tensor is the transpose of a contiguous (p, q) buffer
        buffer = t.reshape(q, p).t().contiguous().reshape(-1)
        return to_device(buffer, device).as_strided((q, p), (1, q), 0)
    if layout == "sliced" and n:
        buffer = torch.full((2 * n,), GAP, dtype=t.dtype)
        buffer[::2] = t
        return to_device(buffer, device).as_strided((n,), (2,), 0)
    if layout == "offset":
        buffer = torch.cat([torch.full((3,), GAP, dtype=t.dtype), t])
        return to_device(buffer, device).as_strided((n,), (1,), 3)
    return to_device(t.contiguous(), device)

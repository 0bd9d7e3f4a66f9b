"""Rank side of tests/backend/test_backend_collectives.py: a pool of spawned rank processes in
one ``echo`` world of 3 (``w3``, the default group) with a subgroup of ranks 0 and 1 (``w2``),
serving the test's requests, and the cases they run.

Every case builds its inputs as ``rank * 1000 + index`` (cast to the dtype; bool: odd
``rank + index``; complex: that real part, ``-(index + 1)`` imaginary), runs one collective on
``npu`` tensors and compares the result with plain torch on the CPU computed from every rank's
inputs (reductions step by step in rank order in the dtype, the backend's contract). A case
returns the ids of the checks that failed, ``<world>/<collective>/<op>/<dtype>/n=<count>/<layout>``.
"""

from __future__ import annotations

import functools
import os
import time
import traceback
from datetime import timedelta

import torch

OPS = ("SUM", "PRODUCT", "MIN", "MAX", "AVG", "PREMUL_SUM", "BAND", "BOR", "BXOR")
DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.complex128,
)
INTEGRAL = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
PREMUL_FACTOR = 3.0
SENTINEL = -7

_GROUPS: dict = {}


# ----------------------------------------------------------------------------- the pool


def serve(rank: int, world: int, port: int, conn, timeout_s: float) -> None:
    """A rank process: init the ``echo`` world, then run requests until ``None``."""
    try:
        import echo_npu  # noqa: F401 (registers npu and the echo backend)
        import torch.distributed as dist

        dist.init_process_group(
            "echo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=timeout_s),
        )
        _GROUPS["w3"] = dist.group.WORLD
        _GROUPS["w2"] = dist.new_group([0, 1])
        conn.send(("ok", None))
    except BaseException:  # noqa: BLE001
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        request = conn.recv()
        if request is None:
            break
        name, kwargs = request
        try:
            conn.send(("ok", globals()[name](**kwargs)))
        except BaseException:  # noqa: BLE001
            conn.send(("error", f"rank {rank}: {traceback.format_exc()}"))
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass


# ----------------------------------------------------------------------------- data


def data(rank: int, n: int, dtype: torch.dtype, offset: int = 0) -> torch.Tensor:
    """Rank's distinct input of n elements (CPU)."""
    idx = torch.arange(offset, offset + n, dtype=torch.int64)
    if dtype == torch.bool:
        return ((idx + rank) % 2).bool()
    base = idx + rank * 1000
    if dtype.is_complex:
        return torch.complex(base.double(), -(idx + 1).double()).to(dtype)
    return base.to(dtype)  # integer types wrap, as torch's casts do


def defined(op: str, dtype: torch.dtype) -> bool:
    if op in ("BAND", "BOR", "BXOR"):
        return dtype in INTEGRAL or dtype == torch.bool
    if op in ("MIN", "MAX"):
        return not dtype.is_complex
    if op == "AVG":
        return dtype != torch.bool
    if op == "PREMUL_SUM":
        return dtype.is_floating_point or dtype.is_complex
    return True


def oracle(op: str, parts: list[torch.Tensor]) -> torch.Tensor:
    """Plain torch: the reduction of parts in rank order, in their dtype."""
    fn = {
        "SUM": torch.add,
        "AVG": torch.add,
        "PREMUL_SUM": torch.add,
        "PRODUCT": torch.mul,
        "MIN": torch.minimum,
        "MAX": torch.maximum,
        "BAND": torch.bitwise_and,
        "BOR": torch.bitwise_or,
        "BXOR": torch.bitwise_xor,
    }[op]
    if op == "PREMUL_SUM":
        parts = [p * PREMUL_FACTOR for p in parts]
    acc = functools.reduce(fn, parts)
    if op == "AVG":
        if acc.dtype.is_floating_point or acc.dtype.is_complex:
            acc = acc / len(parts)
        else:
            acc = torch.div(acc, len(parts), rounding_mode="trunc")
    return acc.to(parts[0].dtype)


def reduce_op(op: str):
    import torch.distributed as dist

    if op == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(PREMUL_FACTOR)
    return getattr(dist.ReduceOp, op)


def same(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Equal values in logical (row-major) order, NaN equal to NaN."""
    actual = actual.cpu().reshape(-1)
    expected = expected.reshape(-1)
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return False
    if actual.dtype.is_floating_point or actual.dtype.is_complex:
        return bool(torch.equal(actual, expected)) or bool(
            torch.all((actual == expected) | (torch.isnan(actual) & torch.isnan(expected)))
        )
    return bool(torch.equal(actual, expected))


def dname(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _device_view(t: torch.Tensor, layout: str) -> torch.Tensor:
    """t's values (1-D) on npu in a layout: ``contiguous``; ``strided``: every other element of
    a larger buffer, from an offset; ``transposed``: a (2, n/2) view, the transpose of a
    contiguous (n/2, 2) buffer (n even)."""
    if layout == "contiguous":
        return t.to("npu")
    if layout == "strided":
        base = torch.zeros(2 * t.numel() + 1, dtype=t.dtype)
        base[1::2] = t.reshape(-1)
        return base.to("npu")[1::2]
    assert layout == "transposed" and t.numel() % 2 == 0, (layout, t.numel())
    return t.reshape(2, -1).t().contiguous().to("npu").t()


def _empty_like_out(t: torch.Tensor, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(an output shaped like t on npu, in the layout, filled with SENTINEL; its base)."""
    if layout == "contiguous":
        out = _sentinel(t.shape, t.dtype).to("npu")
        return out, out
    base = _sentinel((2 * t.numel() + 3,), t.dtype).to("npu")
    return base[3::2].view(t.shape), base


def _sentinel(shape, dtype) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.zeros(shape, dtype=torch.bool)
    return torch.full(shape, SENTINEL).to(dtype)


# ----------------------------------------------------------------------------- cases


def _ctx(world: str):
    import torch.distributed as dist

    group = _GROUPS[world]
    if group == dist.GroupMember.NON_GROUP_MEMBER:
        return None
    return group, dist.get_rank(group), dist.get_world_size(group)


def run_cases(world: str, cases: list[dict], faults: list[str] = ()) -> list[str]:
    """Run ``cases`` (dicts with ``kind`` and its parameters) in the group; failed ids."""
    import echo_npu

    ctx = _ctx(world)
    if ctx is None:
        return []
    echo_npu.set_faults(list(faults))
    failed: list[str] = []
    try:
        for case in cases:
            params = dict(case)
            kind = params.pop("kind")
            failed += globals()[f"case_{kind}"](world, *ctx, **params)
    finally:
        echo_npu.set_faults([])
    return failed


def _reduce_check(cid, op, dtype, call):
    """Run call(); an undefined op must raise, a defined one must not."""
    if not defined(op, dtype):
        try:
            call()
        except (RuntimeError, ValueError):
            return None
        return [cid + " (no error for an undefined op)"]
    return call()


def case_allreduce(world, group, rank, size, op, dtype, n, layout="contiguous", coalesced=False):
    import torch.distributed as dist

    name = "allreduce_coalesced" if coalesced else "allreduce"
    cid = f"{world}/{name}/{op}/{dname(dtype)}/n={n}/{layout}"
    if coalesced and dtype.is_complex and op not in ("SUM", "AVG", "PREMUL_SUM"):
        return []  # torch's all_reduce_coalesced refuses these itself
    if dtype.is_complex and op not in ("SUM", "AVG", "PREMUL_SUM") and defined(op, dtype):
        return []  # torch's all_reduce refuses PRODUCT on complex before the backend
    t = _device_view(data(rank, n, dtype), layout)
    t2 = data(rank, n + 1, dtype, offset=50).to("npu")

    def call():
        if coalesced:
            dist.all_reduce_coalesced([t, t2], op=reduce_op(op), group=group)
            exp2 = oracle(op, [data(r, n + 1, dtype, offset=50) for r in range(size)])
            if not same(t2, exp2):
                return [cid + " (second tensor)"]
        else:
            dist.all_reduce(t, op=reduce_op(op), group=group)
        return []

    bad = _reduce_check(cid, op, dtype, call)
    if bad is not None:
        if bad:
            return bad
        exp = oracle(op, [data(r, n, dtype) for r in range(size)])
        return [] if same(t, exp) else [cid]
    return []


def case_reduce(world, group, rank, size, op, dtype, n, root=0, layout="contiguous"):
    import torch.distributed as dist

    cid = f"{world}/reduce/{op}/{dname(dtype)}/n={n}/{layout}/root={root}"
    mine = data(rank, n, dtype)
    t = _device_view(mine, layout)
    bad = _reduce_check(
        cid, op, dtype, lambda: dist.reduce(t, dst=root, op=reduce_op(op), group=group) or []
    )
    if bad is not None:
        if bad:
            return bad
        exp = oracle(op, [data(r, n, dtype) for r in range(size)]) if rank == root else mine
        return [] if same(t, exp) else [cid]
    return []


def case_broadcast(world, group, rank, size, dtype, n, root=0, layout="contiguous"):
    import torch.distributed as dist

    cid = f"{world}/broadcast/-/{dname(dtype)}/n={n}/{layout}/root={root}"
    t = _device_view(data(rank, n, dtype), layout)
    dist.broadcast(t, src=root, group=group)
    return [] if same(t, data(root, n, dtype)) else [cid]


def case_all_gather(
    world, group, rank, size, dtype, n, layout="contiguous", out_layout="contiguous"
):
    import torch.distributed as dist

    cid = f"{world}/all_gather/-/{dname(dtype)}/n={n}/{layout}/out={out_layout}"
    inp = _device_view(data(rank, n, dtype), layout)
    outs = [
        _empty_like_out(data(0, n, dtype).reshape(inp.shape), out_layout)[0] for _ in range(size)
    ]
    dist.all_gather(outs, inp, group=group)
    ok = all(same(o, data(r, n, dtype).reshape(inp.shape)) for r, o in enumerate(outs))
    return [] if ok else [cid]


def case_all_gather_into_tensor(
    world,
    group,
    rank,
    size,
    dtype,
    n,
    layout="contiguous",
    out_layout="contiguous",
    coalesced=False,
):
    import torch.distributed as dist

    name = "all_gather_into_tensor_coalesced" if coalesced else "all_gather_into_tensor"
    cid = f"{world}/{name}/-/{dname(dtype)}/n={n}/{layout}/out={out_layout}"
    inp = _device_view(data(rank, n, dtype), layout)
    exp = torch.cat([data(r, n, dtype) for r in range(size)])
    out, base = _empty_like_out(exp, out_layout)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    if coalesced:
        out2 = torch.zeros(size * 3, dtype=dtype).to("npu")
        with dist._coalescing_manager(group=group):
            gather(out, inp, group=group)
            gather(out2, data(rank, 3, dtype).to("npu"), group=group)
        exp2 = torch.cat([data(r, 3, dtype) for r in range(size)])
        if not same(out2, exp2):
            return [cid + " (second tensor)"]
    else:
        gather(out, inp, group=group)
    return [] if same(out, exp) else [cid]


def case_reduce_scatter(
    world, group, rank, size, op, dtype, n, layout="contiguous", out_layout="contiguous"
):
    import torch.distributed as dist

    cid = f"{world}/reduce_scatter/{op}/{dname(dtype)}/n={n}/{layout}/out={out_layout}"
    ins = [_device_view(data(rank, n, dtype, offset=100 * d), layout) for d in range(size)]
    out, _ = _empty_like_out(data(0, n, dtype), out_layout)
    bad = _reduce_check(
        cid, op, dtype, lambda: dist.reduce_scatter(out, ins, op=reduce_op(op), group=group) or []
    )
    if bad is not None:
        if bad:
            return bad
        exp = oracle(op, [data(r, n, dtype, offset=100 * rank) for r in range(size)])
        return [] if same(out, exp) else [cid]
    return []


def case_reduce_scatter_tensor(
    world,
    group,
    rank,
    size,
    op,
    dtype,
    n,
    layout="contiguous",
    out_layout="contiguous",
    coalesced=False,
):
    import torch.distributed as dist

    name = "reduce_scatter_tensor_coalesced" if coalesced else "reduce_scatter_tensor"
    cid = f"{world}/{name}/{op}/{dname(dtype)}/n={n}/{layout}/out={out_layout}"
    full = [data(r, n * size, dtype) for r in range(size)]
    inp = _device_view(full[rank], layout)
    out, _ = _empty_like_out(data(0, n, dtype), out_layout)
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

    def call():
        if coalesced:
            full2 = [data(r, 2 * size, dtype, offset=7) for r in range(size)]
            out2 = torch.zeros(2, dtype=dtype).to("npu")
            with dist._coalescing_manager(group=group):
                scatter(out, inp, op=reduce_op(op), group=group)
                scatter(out2, full2[rank].to("npu"), op=reduce_op(op), group=group)
            if not same(out2, oracle(op, [f[rank * 2 : rank * 2 + 2] for f in full2])):
                return [cid + " (second tensor)"]
        else:
            scatter(out, inp, op=reduce_op(op), group=group)
        return []

    bad = _reduce_check(cid, op, dtype, call)
    if bad is not None:
        if bad:
            return bad
        exp = oracle(op, [f[rank * n : (rank + 1) * n] for f in full])
        return [] if same(out, exp) else [cid]
    return []


def case_gather(world, group, rank, size, dtype, n, root=0, layout="contiguous"):
    import torch.distributed as dist

    cid = f"{world}/gather/-/{dname(dtype)}/n={n}/{layout}/root={root}"
    inp = _device_view(data(rank, n, dtype), layout)
    outs = (
        [_empty_like_out(data(0, n, dtype).reshape(inp.shape), "strided")[0] for _ in range(size)]
        if rank == root
        else None
    )
    dist.gather(inp, outs, dst=root, group=group)
    if rank != root:
        return []
    ok = all(same(o, data(r, n, dtype).reshape(inp.shape)) for r, o in enumerate(outs))
    return [] if ok else [cid]


def case_scatter(world, group, rank, size, dtype, n, root=0, layout="contiguous"):
    import torch.distributed as dist

    cid = f"{world}/scatter/-/{dname(dtype)}/n={n}/{layout}/root={root}"
    ins = (
        [_device_view(data(root, n, dtype, offset=100 * d), layout) for d in range(size)]
        if rank == root
        else None
    )
    out, _ = _empty_like_out(data(0, n, dtype), "strided")
    dist.scatter(out, ins, src=root, group=group)
    return [] if same(out, data(root, n, dtype, offset=100 * rank)) else [cid]


def case_alltoall(world, group, rank, size, dtype, n, layout="contiguous"):
    import torch.distributed as dist

    cid = f"{world}/all_to_all/-/{dname(dtype)}/n={n}/{layout}"
    ins = [_device_view(data(rank, n, dtype, offset=100 * d), layout) for d in range(size)]
    outs = [_empty_like_out(data(0, n, dtype), "strided")[0] for _ in range(size)]
    dist.all_to_all(outs, ins, group=group)
    ok = all(same(o, data(s, n, dtype, offset=100 * rank)) for s, o in enumerate(outs))
    return [] if ok else [cid]


def _splits(src: int, size: int) -> list[int]:
    """Rows rank src sends to each rank: uneven (including an empty piece)."""
    return [(src + 2 * d) % 4 for d in range(size)]


def case_all_to_all_single(world, group, rank, size, dtype, cols, uneven=True, layout="contiguous"):
    import torch.distributed as dist

    split = "uneven" if uneven else "even"
    cid = f"{world}/all_to_all_single/-/{dname(dtype)}/cols={cols}/{split}/{layout}"
    in_splits = _splits(rank, size) if uneven else [2] * size
    out_splits = [_splits(s, size)[rank] if uneven else 2 for s in range(size)]

    def rows(src):
        return data(src, sum(_splits(src, size) if uneven else [2] * size) * cols, dtype).reshape(
            -1, cols
        )

    inp = rows(rank)
    inp_dev = inp.to("npu") if layout == "contiguous" else inp.t().contiguous().to("npu").t()
    out = torch.full((sum(out_splits), cols), SENTINEL).to(dtype).to("npu")
    dist.all_to_all_single(
        out,
        inp_dev,
        output_split_sizes=out_splits if uneven else None,
        input_split_sizes=in_splits if uneven else None,
        group=group,
    )
    pieces = []
    for s in range(size):
        sp = _splits(s, size) if uneven else [2] * size
        start = sum(sp[:rank])
        pieces.append(rows(s)[start : start + sp[rank]])
    return [] if same(out, torch.cat(pieces)) else [cid]


def case_p2p(world, group, rank, size, dtype, n):
    """send/recv around the ring with two tags, then batch_isend_irecv both ways."""
    import torch.distributed as dist

    cid = f"{world}/send_recv/-/{dname(dtype)}/n={n}"
    ranks = dist.get_process_group_ranks(group)
    nxt, prv = ranks[(rank + 1) % size], ranks[(rank - 1) % size]
    got_a = torch.zeros(n, dtype=dtype).to("npu")
    got_b = _empty_like_out(data(0, n, dtype), "strided")[0]
    # tag 2 first on the receiving side: tags keep messages apart
    reqs = [
        dist.isend(data(rank, n, dtype).to("npu"), nxt, group=group, tag=1),
        dist.isend(data(rank, n, dtype, offset=10).to("npu"), nxt, group=group, tag=2),
    ]
    rb = dist.irecv(got_b, prv, group=group, tag=2)
    ra = dist.irecv(got_a, prv, group=group, tag=1)
    for w in reqs + [ra, rb]:
        w.wait()
    failed = []
    src = (rank - 1) % size
    if not (same(got_a, data(src, n, dtype)) and same(got_b, data(src, n, dtype, offset=10))):
        failed.append(cid)
    # batch_isend_irecv: receives listed before sends on every rank
    r1 = torch.zeros(n, dtype=dtype).to("npu")
    r2 = torch.zeros(n, dtype=dtype).to("npu")
    ops = [
        dist.P2POp(dist.irecv, r1, prv, group=group),
        dist.P2POp(dist.irecv, r2, nxt, group=group),
        dist.P2POp(dist.isend, data(rank, n, dtype, offset=20).to("npu"), nxt, group=group),
        dist.P2POp(dist.isend, data(rank, n, dtype, offset=30).to("npu"), prv, group=group),
    ]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    if size == 2:  # prv == nxt: messages of the same pair and tag match in order
        ok = same(r1, data(src, n, dtype, offset=20)) and same(r2, data(src, n, dtype, offset=30))
    else:
        ok = same(r1, data(src, n, dtype, offset=20)) and same(
            r2, data((rank + 1) % size, n, dtype, offset=30)
        )
    if not ok:
        failed.append(f"{world}/batch_isend_irecv/-/{dname(dtype)}/n={n}")
    # blocking send/recv
    if rank == 0:
        dist.send(data(0, n, dtype, offset=40).to("npu"), ranks[1], group=group, tag=5)
    elif rank == 1:
        r = torch.zeros(n, dtype=dtype).to("npu")
        dist.recv(r, ranks[0], group=group, tag=5)
        if not same(r, data(0, n, dtype, offset=40)):
            failed.append(f"{world}/send_recv_blocking/-/{dname(dtype)}/n={n}")
    # recv from any source: rank 0 takes one message of every other rank, in any order
    if rank == 0:
        seen = {}
        for _ in range(size - 1):
            r = torch.zeros(n, dtype=dtype).to("npu")
            sender = dist.recv(r, group=group, tag=9)
            seen[sender] = same(r, data(ranks.index(sender), n, dtype, offset=60))
        if sorted(seen) != sorted(ranks[1:]) or not all(seen.values()):
            failed.append(f"{world}/recv_anysource/-/{dname(dtype)}/n={n}")
    else:
        dist.send(data(rank, n, dtype, offset=60).to("npu"), ranks[0], group=group, tag=9)
    return failed


def case_barrier(world, group, rank, size):
    import torch.distributed as dist

    dist.barrier(group=group)
    return []


def case_async(world, group, rank, size, n=8):
    """async_op=True: a Work that is not complete while a peer is late, wait() lands the data,
    get_future() carries the outputs; then an async all_gather read right after wait()."""
    import torch.distributed as dist

    failed = []
    t = data(rank, n, torch.float32).to("npu")
    if rank == 1:
        time.sleep(0.4)  # rank 0's Work cannot be complete before rank 1 arrives
    work = dist.all_reduce(t, async_op=True, group=group)
    if rank == 0 and work.is_completed():
        failed.append(f"{world}/async/allreduce/completed-before-peer")
    fut = work.get_future()
    work.wait()
    if not work.is_completed():
        failed.append(f"{world}/async/allreduce/not-completed-after-wait")
    exp = oracle("SUM", [data(r, n, torch.float32) for r in range(size)])
    if not same(t, exp):
        failed.append(f"{world}/async/allreduce/data-after-wait")
    value = fut.wait()
    if not (isinstance(value, list) and value and same(value[0], exp)):
        failed.append(f"{world}/async/allreduce/future-value")
    outs = [torch.zeros(n).to("npu") for _ in range(size)]
    w2 = dist.all_gather(outs, data(rank, n, torch.float32).to("npu"), group=group, async_op=True)
    w2.wait()
    if not all(same(o, data(r, n, torch.float32)) for r, o in enumerate(outs)):
        failed.append(f"{world}/async/all_gather/data-after-wait")
    # several async collectives in flight complete in order
    ts = [data(rank, n, torch.float32, offset=k).to("npu") for k in range(3)]
    works = [dist.all_reduce(x, async_op=True, group=group) for x in ts]
    works[-1].wait()
    if not all(w.is_completed() for w in works):
        failed.append(f"{world}/async/in-order")
    for k, x in enumerate(ts):
        works[k].wait()
        if not same(x, oracle("SUM", [data(r, n, torch.float32, offset=k) for r in range(size)])):
            failed.append(f"{world}/async/in-order/data{k}")
    return failed


def case_missing_peer(world, group, rank, size, timeout_s=2.0):
    """Ranks other than 0 skip the collective: rank 0 must raise within the group's timeout.
    Run on a fresh group with a short timeout (it is left out of step afterwards)."""
    import torch.distributed as dist

    ranks = dist.get_process_group_ranks(group)
    short = dist.new_group(ranks, timeout=timedelta(seconds=timeout_s))
    if rank != 0:
        return []
    t = torch.ones(4).to("npu")
    start = time.monotonic()
    try:
        dist.all_reduce(t, group=short)
    except RuntimeError as exc:
        took = time.monotonic() - start
        msg = str(exc)
        if not (timeout_s * 0.8 <= took <= timeout_s + 10) or "timed out" not in msg:
            return [f"{world}/missing_peer/raised after {took:.1f} s: {msg[:200]}"]
        return []
    return [f"{world}/missing_peer/no error"]


def case_early_wait(world, group, rank, size, n=8):
    """An async all_reduce read right after wait(): stale under ccl_work_wait_early."""
    import torch.distributed as dist

    t = data(rank, n, torch.float32).to("npu")
    dist.all_reduce(t, async_op=True, group=group).wait()
    exp = oracle("SUM", [data(r, n, torch.float32) for r in range(size)])
    ok = same(t, exp)
    time.sleep(0.6)  # let a late copy land before the next case
    return [] if ok else [f"{world}/async/allreduce/float32/n={n}/read-after-wait"]


def registration() -> dict:
    import torch.distributed as dist

    pg = dist.group.WORLD
    return {
        "device_map": dist.Backend.default_device_backend_map.get("npu"),
        "backend": dist.get_backend(),
        "type": type(pg).__name__,
        "pid": os.getpid(),
    }

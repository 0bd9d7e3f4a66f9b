"""One rank of a world: a fresh interpreter (`python -m conformance.engine.collectives.ranks`)
that loads the backend as the suite does (engine/backend.py), joins the process group
(`init_process_group` with the c10d backend's name and a FileStore) and serves cases over the
connection its world passed it: each case's inputs built on the device in the case's layout, the
collective called, its outputs read back to CPU and sent back. Where the backend under test is
not gloo, a gloo group on CPU tensors answers one question only: whether gloo refuses a
combination the backend refused too (judge.py).

Messages (pickled over the connection): in `("case", dict)`, `("reference", dict)`, `("stop",)`;
out `("ready", info)`, `("result", outputs, info)`, `("raised", info)`.
"""

from __future__ import annotations

import argparse
import collections
import os
import pickle
import sys
import time
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any

import torch
import torch.distributed as dist

from conformance.engine.collectives.data import (
    GAP,
    inputs,
    place,
    second_size,
    shape_of,
    split,
)
from conformance.engine.collectives.spec import PREMUL_FACTOR, CollectiveCase
from conformance.processes.zygote import die_with_parent

POLL_S = 0.0005
KEEP = 8  # cases whose tensors a rank keeps alive (an early Work's late write lands in them)


#: collectives whose outputs are their inputs (the rest must leave their inputs alone)
IN_PLACE = frozenset({"all_reduce", "broadcast", "reduce", "all_reduce_coalesced"})


def send(conn: Connection, message: tuple) -> None:
    """One message, pickled with the plain pickler (torch's multiprocessing reducers would
    pass tensors as shared-memory handles, which need a multiprocessing parent)."""
    conn.send_bytes(pickle.dumps(message))


def receive(conn: Connection) -> tuple:
    return pickle.loads(conn.recv_bytes())


def reduce_op(name: str) -> Any:
    if name == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(PREMUL_FACTOR)
    return getattr(dist.ReduceOp, name)


class Rank:
    """The state of one rank process."""

    def __init__(self, rank: int, world: int, device: torch.device, reference: Any) -> None:
        self.rank, self.world, self.device = rank, world, device
        self.reference = reference  # the gloo group on CPU, or None
        self.kept: collections.deque = collections.deque(maxlen=KEEP)

    def run(self, case: CollectiveCase, group: Any = None, device: torch.device | None = None):
        """(outputs read back to CPU, info) of one case; raises what the backend raised, with
        `where` ("call" or the completion) on the exception."""
        device = device or self.device
        stacked = case.world if case.collective.startswith("reduce_scatter_tensor") else 1
        ins = [place(t, case.layout, device, stacked) for t in inputs(case, self.rank)]
        info: dict[str, Any] = {}
        if case.collective == "barrier":
            time.sleep(0.03 * self.rank)  # the last rank enters last
            info["enter"] = time.time()
        outs, works = self._call(case, ins, device, group)
        self._complete(case, works, info)
        if case.collective == "barrier":
            info["exit"] = time.time()
        self.kept.append((ins, outs))
        if case.collective in IN_PLACE:
            info["outside"] = sum(_outside_changed(t) for t in outs)
        else:  # an out-of-place collective reads its inputs: they stay as the caller made them
            info["inputs"] = _inputs_changed(case, self.rank, ins)
        return [_read(t) for t in outs], info

    def _call(self, case: CollectiveCase, ins: list, device: torch.device, group: Any):
        c, w, r, a = case.collective, case.world, self.rank, case.is_async
        kw: dict[str, Any] = {"group": group, "async_op": a}
        op = reduce_op(case.op) if case.spec.reduces else None

        def like(t: torch.Tensor, n: int | None = None) -> torch.Tensor:
            shape = t.shape if n is None else (n,)
            return torch.empty(shape, dtype=t.dtype, device=device)

        def new(n: int, stacked: int = 1) -> torch.Tensor:
            """An output of n elements, shaped as the case's layout shapes its inputs."""
            shape = shape_of(n, case.layout, stacked)
            return torch.empty(shape, dtype=getattr(torch, case.dtype), device=device)

        n = case.size
        if c == "all_reduce":
            return ins, [dist.all_reduce(ins[0], op, **kw)]
        if c == "broadcast":
            return ins, [dist.broadcast(ins[0], case.root, **kw)]
        if c == "reduce":
            return ins, [dist.reduce(ins[0], case.root, op, **kw)]
        if c == "all_gather":
            outs = [like(ins[0]) for _ in range(w)]
            return outs, [dist.all_gather(outs, ins[0], **kw)]
        if c == "all_gather_into_tensor":
            out = new(w * ins[0].numel(), w)
            return [out], [dist.all_gather_into_tensor(out, ins[0], **kw)]
        if c == "gather":
            outs = [like(ins[0]) for _ in range(w)] if r == case.root else []
            work = dist.gather(ins[0], outs if r == case.root else None, case.root, **kw)
            return outs, [work]
        if c == "scatter":
            out = new(n)
            work = dist.scatter(out, ins if r == case.root else None, case.root, **kw)
            return [out], [work]
        if c == "reduce_scatter":
            out = new(n)
            return [out], [dist.reduce_scatter(out, ins, op, **kw)]
        if c == "reduce_scatter_tensor":
            out = new(n)
            return [out], [dist.reduce_scatter_tensor(out, ins[0], op, **kw)]
        if c == "all_to_all":
            outs = [new(split(case, j, r)) for j in range(w)]
            return outs, [dist.all_to_all(outs, ins, **kw)]
        if c == "all_to_all_single":
            out_splits = [split(case, j, r) for j in range(w)]
            in_splits = [split(case, r, j) for j in range(w)]
            out = torch.empty((sum(out_splits),), dtype=ins[0].dtype, device=device)
            work = dist.all_to_all_single(out, ins[0], out_splits, in_splits, **kw)
            return [out], [work]
        if c == "send_recv":
            return self._ring(case, ins[0], new(n), group)
        if c == "batch_isend_irecv":
            out = new(n)
            ops = [
                dist.P2POp(dist.isend, ins[0], (r + 1) % w, group),
                dist.P2POp(dist.irecv, out, (r - 1) % w, group),
            ]
            return [out], list(dist.batch_isend_irecv(ops))
        if c == "barrier":
            return [], [dist.barrier(**kw)]
        return self._coalesced(case, ins, op, device, group, new)

    def _ring(self, case: CollectiveCase, x: torch.Tensor, out: torch.Tensor, group: Any):
        """Rank r sends to r + 1 and receives from r - 1: even ranks send first."""
        r, w = self.rank, case.world
        to, frm = (r + 1) % w, (r - 1) % w
        if case.is_async:
            return [out], [dist.isend(x, to, group), dist.irecv(out, frm, group)]
        if r % 2 == 0:
            dist.send(x, to, group)
            dist.recv(out, frm, group)
        else:
            dist.recv(out, frm, group)
            dist.send(x, to, group)
        return [out], [None]

    def _coalesced(self, case: CollectiveCase, ins: list, op: Any, device, group, new):
        c, w = case.collective, case.world
        # no device: the backend's own *_coalesced implementations (torch's primary path)
        manager = dist._coalescing_manager(group=group, async_ops=case.is_async)
        outs = ins
        with manager as cm:
            if c == "all_reduce_coalesced":
                for t in ins:
                    dist.all_reduce(t, op, group=group)
            elif c == "all_gather_into_tensor_coalesced":
                outs = [new(w * ins[0].numel(), w), new(w * ins[1].numel(), w)]
                for o, t in zip(outs, ins, strict=True):
                    dist.all_gather_into_tensor(o, t, group=group)
            else:  # reduce_scatter_tensor_coalesced
                outs = [new(case.size), new(second_size(case.size))]
                for o, t in zip(outs, ins, strict=True):
                    dist.reduce_scatter_tensor(o, t, op, group=group)
        return outs, [cm if case.is_async else None]

    def _complete(self, case: CollectiveCase, works: list, info: dict[str, Any]) -> None:
        """Complete async Works as the case's mode says (batch_isend_irecv's always)."""
        works = [w for w in works if w is not None]
        mode = case.mode if case.is_async else "wait"
        try:
            if mode == "wait":
                for w in works:
                    w.wait()
                done = [w.is_completed() for w in works if hasattr(w, "is_completed")]
                info["completed_after_wait"] = all(done)
            elif mode == "poll":
                while not all(w.is_completed() for w in works):
                    time.sleep(POLL_S)
            else:
                for w in works:
                    w.get_future().wait()
        except BaseException as exc:
            exc.where = f"the Work's {mode}"  # type: ignore[attr-defined]
            raise


def _inputs_changed(case: CollectiveCase, rank: int, ins: list) -> list[tuple[int, int, str]]:
    """(input, elements changed, the first as 'at i: got instead of want') of each input the
    collective changed, inside its view or in its buffer around it (an out-of-place collective
    must leave the caller's inputs alone, as op cases check theirs)."""
    changed = []
    for i, (t, want) in enumerate(zip(ins, inputs(case, rank), strict=True)):
        got, want = _read(t), want.reshape(-1)
        same = (got == want) | (_nan(got) & _nan(want))
        bad = (~same).nonzero().reshape(-1)
        if bad.numel():
            j = int(bad[0])
            first = f"at {j}: {got[j].item()!r} instead of {want[j].item()!r}"
            changed.append((i, int(bad.numel()), first))
        elif around := _outside_changed(t):
            changed.append((i, around, f"{around} element(s) of its buffer around the view"))
    return changed


def _nan(t: torch.Tensor) -> torch.Tensor:
    if t.is_floating_point() or t.is_complex():
        return torch.isnan(t)
    return torch.zeros_like(t, dtype=torch.bool)


def _read(t: torch.Tensor) -> torch.Tensor:
    from conformance.engine.transfer import read_back

    return read_back(t).reshape(-1).clone()


def _outside_changed(t: torch.Tensor) -> int:
    """Elements of `t`'s buffer outside the view that changed (they hold GAP)."""
    from conformance.engine.transfer import read_storage

    if t.is_contiguous() and t.storage_offset() == 0:
        return 0
    storage = read_storage(t)
    inside = torch.zeros(storage.numel(), dtype=torch.bool)
    index = torch.arange(storage.numel()).as_strided(t.shape, t.stride(), t.storage_offset())
    inside[index.reshape(-1)] = True
    return int((storage[~inside] != GAP).sum())


def _device(device_type: str, rank: int) -> torch.device:
    """The rank's device: index rank % the device count (one device per rank where there are
    enough), made current."""
    if device_type == "cpu":
        return torch.device("cpu")
    module = getattr(torch, device_type, None)
    count = getattr(module, "device_count", None)
    index = rank % max(1, int(count())) if callable(count) else 0
    set_device = getattr(module, "set_device", None)
    if callable(set_device):
        set_device(index)
    return torch.device(device_type, index)


def serve(conn: Connection, args: argparse.Namespace) -> None:
    if args.backend:
        from conformance.engine.backend import load_backend

        load_backend(args.backend, None if args.device == "cpu" else args.device)
    device = _device(args.device, args.rank)
    timeout = timedelta(seconds=args.timeout)
    store = dist.FileStore(args.store, args.world)
    dist.init_process_group(
        args.c10d, store=store, rank=args.rank, world_size=args.world, timeout=timeout
    )
    reference = dist.new_group(backend="gloo", timeout=timeout) if args.c10d != "gloo" else None
    rank = Rank(args.rank, args.world, device, reference)
    send(conn, ("ready", {"pid": os.getpid(), "device": str(device)}))
    while True:
        message = receive(conn)
        if message[0] == "stop":
            break
        case = CollectiveCase(**message[1])
        reference_run = message[0] == "reference"
        try:
            if reference_run:
                outputs, info = rank.run(case, rank.reference, torch.device("cpu"))
            else:
                outputs, info = rank.run(case)
        except Exception as exc:  # noqa: BLE001 - the backend's error, judged by the runner
            text = str(exc).strip().splitlines()
            where = getattr(exc, "where", "the call")
            send(
                conn,
                (
                    "raised",
                    {
                        "type": type(exc).__name__,
                        "message": text[0] if text else "",
                        "where": where,
                    },
                ),
            )
            continue
        send(conn, ("result", outputs, info))
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("fd", "rank", "world"):
        parser.add_argument(f"--{name}", type=int, required=True)
    parser.add_argument("--timeout", type=float, required=True)
    for name in ("store", "c10d", "device", "backend"):
        parser.add_argument(f"--{name}", default="")
    args = parser.parse_args(argv)
    die_with_parent()
    conn = Connection(args.fd)
    try:
        serve(conn, args)
    except (EOFError, KeyboardInterrupt):  # the world was closed
        os._exit(0)
    except Exception as exc:  # noqa: BLE001 - joining the group failed: say so, then end
        text = str(exc).strip().splitlines()
        try:
            send(conn, ("failed", f"{type(exc).__name__}: {text[0] if text else ''}"))
        except OSError:
            pass
        sys.exit(3)


if __name__ == "__main__":
    main()

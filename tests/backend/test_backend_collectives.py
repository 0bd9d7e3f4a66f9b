"""echo_npu's c10d backend ``echo`` (backend/echo_npu/distributed.py): every collective, op,
dtype and layout against plain torch on the CPU, async Works, a missing peer, and each
``ccl_*`` fault failing exactly its collective at its sizes/layouts.

One pool of 3 spawned rank processes serves the whole module: the world of 3 (``w3``, the
default group) and a group of ranks 0 and 1 (``w2``, ``new_group``). The rank side and the
cases are in ``_c10d_ranks.py``; a case returns the ids of its failed checks
(``<world>/<collective>/<op>/<dtype>/n=<count>/<layout>``).
"""

from __future__ import annotations

import multiprocessing
import os
import socket

import _c10d_ranks as ranks
import pytest
import torch
from _c10d_ranks import DTYPES, OPS

WORLD = 3
POOL_TIMEOUT_S = 60.0  # the world's c10d timeout (the missing-peer case uses its own group)
REPLY_TIMEOUT_S = 240.0


class Pool:
    """Rank processes, each running ``_c10d_ranks.serve``; ``run`` sends one request to all."""

    def __init__(self, world: int):
        ctx = multiprocessing.get_context("spawn")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("ECHO_NPU_")}
        self.conns, self.procs = [], []
        try:
            for rank in range(world):
                parent, child = ctx.Pipe()
                proc = ctx.Process(
                    target=ranks.serve,
                    args=(rank, world, port, child, POOL_TIMEOUT_S),
                    daemon=True,
                )
                proc.start()
                self.conns.append(parent)
                self.procs.append(proc)
        finally:
            os.environ.update(saved)
        self._replies("start")

    def _replies(self, what: str) -> list:
        out, errors = [], []
        for rank, conn in enumerate(self.conns):
            if not conn.poll(REPLY_TIMEOUT_S):
                errors.append(f"rank {rank}: no reply to {what} in {REPLY_TIMEOUT_S} s")
                out.append(None)
                continue
            status, payload = conn.recv()
            if status != "ok":
                errors.append(payload)
            out.append(payload)
        if errors:
            self.broken = True
            raise RuntimeError("\n".join(errors))
        return out

    def run(self, name: str, **kwargs) -> list:
        for conn in self.conns:
            conn.send((name, kwargs))
        return self._replies(name)

    def failed(self, world: str, cases: list[dict], faults: list[str] = ()) -> list[str]:
        """Ids of the failed checks of ``cases`` run in ``world`` (every rank's, deduplicated)."""
        per_rank = self.run("run_cases", world=world, cases=cases, faults=list(faults))
        return sorted({cid for ids in per_rank for cid in ids})

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except OSError:
                pass
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()


@pytest.fixture(scope="module")
def pool():
    p = Pool(WORLD)
    yield p
    p.close()


WORLDS = ("w2", "w3")


def _dn(dtype) -> str:
    return str(dtype).replace("torch.", "")


# ------------------------------------------------------------------------------ registration


def test_registration(pool):
    info = pool.run("registration")
    assert {i["device_map"] for i in info} == {"echo"}
    assert {i["backend"] for i in info} == {"echo"}
    assert {i["type"] for i in info} == {"EchoProcessGroup"}


def test_registration_manual_and_mixed(run_py):
    """ECHO_NPU_REGISTER=manual registers the backend with the device; a one-rank world of
    ``cpu:gloo,npu:echo`` runs npu collectives on echo."""
    code = """
        import torch, torch.distributed as dist
        import echo_npu
        print(dist.Backend.default_device_backend_map.get("npu"))
        echo_npu.register()
        print(dist.Backend.default_device_backend_map.get("npu"))
        store = dist.HashStore()
        dist.init_process_group("cpu:gloo,npu:echo", store=store, rank=0, world_size=1)
        t = torch.arange(4.0, device="npu")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        print(type(dist.group.WORLD).__name__, t.cpu().tolist())
        dist.destroy_process_group()
    """
    r = run_py(code, ECHO_NPU_REGISTER="manual")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["None", "echo", "EchoProcessGroup", "[0.0,", "1.0,", "2.0,", "3.0]"]


# ------------------------------------------------------------------------------ correctness


def _reduction_matrix(kind: str, n: int, **extra) -> list[dict]:
    return [dict(kind=kind, op=op, dtype=d, n=n, **extra) for op in OPS for d in DTYPES]


@pytest.mark.parametrize("world", WORLDS)
def test_allreduce_every_op_and_dtype(pool, world):
    cases = _reduction_matrix("allreduce", 5)
    cases += [dict(kind="allreduce", op="SUM", dtype=torch.float32, n=n) for n in (0, 1, 33, 64)]
    cases += [
        dict(kind="allreduce", op=op, dtype=d, n=6, layout=lay)
        for op in ("SUM", "AVG", "MAX")
        for d in (torch.float32, torch.int64, torch.bfloat16)
        for lay in ("strided", "transposed")
    ]
    cases += [
        dict(kind="allreduce", op=op, dtype=d, n=3, coalesced=True)
        for op in ("SUM", "AVG", "BXOR")
        for d in (torch.float32, torch.int32, torch.complex64)
    ]
    assert pool.failed(world, cases) == []


@pytest.mark.parametrize("world", WORLDS)
def test_reduce_and_reduce_scatter_every_op_and_dtype(pool, world):
    last = 1 if world == "w2" else 2
    cases = _reduction_matrix("reduce", 4, root=last)
    cases += _reduction_matrix("reduce_scatter_tensor", 3)
    cases += [
        dict(kind="reduce_scatter", op=op, dtype=d, n=3)
        for op in ("SUM", "AVG", "PRODUCT", "MIN", "BOR", "PREMUL_SUM")
        for d in DTYPES
    ]
    cases += [
        dict(kind="reduce_scatter_tensor", op="SUM", dtype=d, n=6, layout=lay, out_layout=out)
        for d in (torch.float32, torch.int16)
        for lay, out in (("strided", "strided"), ("transposed", "contiguous"))
    ]
    cases += [
        dict(
            kind="reduce_scatter",
            op="AVG",
            dtype=torch.float64,
            n=4,
            layout="strided",
            out_layout="strided",
        ),
        dict(kind="reduce", op="SUM", dtype=torch.float32, n=6, layout="transposed"),
        dict(kind="reduce_scatter_tensor", op="SUM", dtype=torch.float32, n=2, coalesced=True),
        dict(kind="reduce_scatter_tensor", op="MAX", dtype=torch.int8, n=5, coalesced=True),
    ]
    assert pool.failed(world, cases) == []


@pytest.mark.parametrize("world", WORLDS)
def test_data_movement_every_dtype_and_layout(pool, world):
    last = 1 if world == "w2" else 2
    cases = []
    for d in DTYPES:
        cases += [
            dict(kind="broadcast", dtype=d, n=5, root=last),
            dict(kind="all_gather", dtype=d, n=5),
            dict(kind="all_gather_into_tensor", dtype=d, n=5),
            dict(kind="gather", dtype=d, n=5, root=last),
            dict(kind="scatter", dtype=d, n=5, root=last),
            dict(kind="alltoall", dtype=d, n=3),
            dict(kind="all_to_all_single", dtype=d, cols=3),
        ]
    for lay in ("strided", "transposed"):
        cases += [
            dict(kind="broadcast", dtype=torch.float32, n=6, layout=lay),
            dict(kind="all_gather", dtype=torch.float32, n=34, layout=lay, out_layout="strided"),
            dict(
                kind="all_gather_into_tensor",
                dtype=torch.int64,
                n=34,
                layout=lay,
                out_layout="strided",
            ),
            dict(kind="gather", dtype=torch.float16, n=6, layout=lay),
            dict(kind="scatter", dtype=torch.float32, n=6, layout=lay),
            dict(kind="alltoall", dtype=torch.int32, n=6, layout=lay),
            dict(kind="all_to_all_single", dtype=torch.float32, cols=2, layout=lay),
        ]
    cases += [
        dict(kind="all_to_all_single", dtype=torch.float32, cols=2, uneven=False),
        dict(kind="all_gather_into_tensor", dtype=torch.float32, n=33, coalesced=True),
        dict(kind="all_gather", dtype=torch.float32, n=0),
    ]
    cases += [dict(kind="p2p", dtype=d, n=4) for d in (torch.float32, torch.bool, torch.complex128)]
    cases += [dict(kind="barrier")]
    assert pool.failed(world, cases) == []


@pytest.mark.parametrize("world", WORLDS)
def test_async_works(pool, world):
    assert pool.failed(world, [dict(kind="async")]) == []


def test_missing_peer_raises_within_timeout(pool):
    assert pool.failed("w3", [dict(kind="missing_peer", timeout_s=2.0)]) == []


# ------------------------------------------------------------------------------ faults

# Cases every fault is run on; each fault must fail exactly the ids its predicate names.
AVG_TWICE = {1, 2, 4, 28, 29, 30, 31, 33}
FAULT_CASES = (
    [
        dict(kind="allreduce", op="AVG", dtype=torch.float32, n=n)
        for n in (1, 2, 3, 4, 5, 28, 31, 32, 33, 34)
    ]
    + [
        dict(kind="allreduce", op="SUM", dtype=torch.float32, n=4),
        dict(kind="allreduce", op="AVG", dtype=torch.int32, n=4),
        dict(kind="allreduce", op="AVG", dtype=torch.float64, n=6, layout="strided"),
        dict(kind="reduce", op="AVG", dtype=torch.float32, n=4),
        dict(kind="reduce", op="AVG", dtype=torch.float32, n=5),
        dict(kind="reduce_scatter_tensor", op="AVG", dtype=torch.float32, n=2),
        dict(kind="reduce_scatter_tensor", op="SUM", dtype=torch.int32, n=5),
        dict(kind="reduce_scatter_tensor", op="SUM", dtype=torch.float16, n=5),
        dict(kind="reduce_scatter_tensor", op="SUM", dtype=torch.int64, n=40),
        dict(kind="reduce_scatter_tensor", op="MAX", dtype=torch.int16, n=3),
        dict(kind="reduce_scatter_tensor", op="PRODUCT", dtype=torch.int32, n=5),
        dict(kind="reduce_scatter", op="SUM", dtype=torch.float32, n=5),
        dict(kind="reduce_scatter", op="SUM", dtype=torch.float16, n=3),
        dict(kind="allreduce", op="SUM", dtype=torch.int32, n=5),
    ]
    + [
        dict(kind="all_gather", dtype=torch.float32, n=n, layout=lay)
        for n in (6, 32, 34)
        for lay in ("contiguous", "strided")
    ]
    + [dict(kind="all_gather_into_tensor", dtype=torch.float32, n=n) for n in (5, 32, 33, 64, 65)]
    + [
        dict(kind="all_gather_into_tensor", dtype=torch.int64, n=64, layout="strided"),
        dict(
            kind="all_gather_into_tensor",
            dtype=torch.float32,
            n=64,
            layout="transposed",
            out_layout="strided",
        ),
        dict(kind="gather", dtype=torch.float32, n=6),
        dict(kind="gather", dtype=torch.float32, n=6, layout="strided"),
        dict(kind="gather", dtype=torch.float32, n=64, layout="transposed"),
        dict(kind="broadcast", dtype=torch.float32, n=6, layout="strided"),
        dict(kind="scatter", dtype=torch.float32, n=33, layout="strided"),
        dict(kind="alltoall", dtype=torch.float32, n=33, layout="strided"),
        dict(kind="all_to_all_single", dtype=torch.float32, cols=3, layout="transposed"),
        dict(kind="p2p", dtype=torch.float32, n=5),
        dict(kind="early_wait", n=8),
    ]
)


def _parts(cid: str) -> dict:
    world, coll, op, dtype, *rest = cid.split("/")
    info = {"world": world, "coll": coll, "op": op, "dtype": dtype, "layout": "contiguous"}
    for item in rest:
        if item.startswith("n="):
            info["n"] = int(item[2:])
        elif item in ("contiguous", "strided", "transposed"):
            info["layout"] = item
    return info


def _expected_ids(world: str) -> list[str]:
    """Every check id of FAULT_CASES in the world (the ids a fault could fail)."""
    ids = []
    for case in FAULT_CASES:
        kind = case["kind"]
        lay = case.get("layout", "contiguous")
        dt = _dn(case.get("dtype", torch.float32))
        if kind in ("allreduce", "reduce", "reduce_scatter", "reduce_scatter_tensor"):
            root = "/root=0" if kind == "reduce" else ""
            out = f"/out={case.get('out_layout', 'contiguous')}" if "scatter" in kind else ""
            ids.append(f"{world}/{kind}/{case['op']}/{dt}/n={case['n']}/{lay}{out}{root}")
        elif kind in ("all_gather", "all_gather_into_tensor"):
            out = case.get("out_layout", "contiguous")
            ids.append(f"{world}/{kind}/-/{dt}/n={case['n']}/{lay}/out={out}")
        elif kind == "gather":
            ids.append(f"{world}/gather/-/{dt}/n={case['n']}/{lay}/root=0")
        elif kind == "early_wait":
            ids.append(f"{world}/async/allreduce/float32/n={case['n']}/read-after-wait")
    return ids


def _fails(fault: str, cid: str) -> bool:
    p = _parts(cid)
    if fault == "ccl_avg_divides_twice":
        return p["op"] == "AVG" and p.get("n") in AVG_TWICE
    if fault == "ccl_gather_strided_as_contiguous":
        return (
            p["coll"] in ("all_gather", "all_gather_into_tensor", "gather")
            and p["layout"] != "contiguous"
        )
    if fault == "ccl_reduce_scatter_casts":
        # float16-exact: every world-2 sum here (< 2048, even), float16 itself, MAX of
        # float16-exact values; world 3's sums of 3000 + odd are not, nor products
        # i * (1000 + i) (* (2000 + i)) of either world
        return p["coll"].startswith("reduce_scatter") and (
            p["op"] == "PRODUCT"
            or (p["world"] == "w3" and p["dtype"] != "float16" and p["op"] in ("SUM", "AVG"))
        )
    if fault == "ccl_all_gather_tail32":
        return p["coll"] in ("all_gather", "all_gather_into_tensor") and p["n"] % 32 != 0
    if fault == "ccl_work_wait_early":
        return p["coll"] == "async"
    raise AssertionError(fault)


FAULTS = (
    "ccl_avg_divides_twice",
    "ccl_gather_strided_as_contiguous",
    "ccl_reduce_scatter_casts",
    "ccl_all_gather_tail32",
    "ccl_work_wait_early",
)


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("fault", FAULTS)
def test_fault_fails_exactly_its_cases(pool, fault, world):
    expected = sorted(cid for cid in _expected_ids(world) if _fails(fault, cid))
    assert expected, "the fault's cases must include failing ones"
    assert pool.failed(world, FAULT_CASES, faults=[fault]) == expected


def test_fault_cases_pass_without_faults(pool):
    assert pool.failed("w2", FAULT_CASES) == []
    assert pool.failed("w3", FAULT_CASES) == []


def test_fault_names_listed():
    import echo_npu

    assert set(FAULTS) <= set(echo_npu.fault_names())


def test_async_device_inputs_after_side_stream_work(run_py):
    """Asynchronous echo_npu: a collective reads its inputs after the work queued before it on
    any stream (a side stream's here, delayed), as NCCL's waits for the caller's stream."""
    code = """
        import torch, torch.distributed as dist
        import echo_npu
        dist.init_process_group("echo", store=dist.HashStore(), rank=0, world_size=1)
        t = torch.zeros(4, device="npu")
        with torch.npu.stream(torch.Stream(device="npu")):
            t.add_(5)
        out = torch.zeros(4, device="npu")
        dist.all_gather_into_tensor(out, t)
        print(echo_npu.is_async(), out.cpu().tolist())
        dist.destroy_process_group()
    """
    r = run_py(code, ECHO_NPU_ASYNC="1", ECHO_NPU_DELAY="side.kernel:200ms")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["True", "[5.0,", "5.0,", "5.0,", "5.0]"]

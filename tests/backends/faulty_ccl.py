"""echo_npu plus a c10d backend `faulty` for CPU tensors: a Python ProcessGroup that hands every
collective to a gloo group and plants the bugs `FAULTY_CCL` names (comma-separated, read at each
call), for the collectives family's self-tests (tests/suite/test_collectives.py):

- `avg_twice`: all_reduce AVG divides twice for 1, 2, 4, 28-31 and 33 elements;
- `hang_all_gather`: all_gather never returns on rank 1;
- `crash_broadcast`: broadcast kills rank 0 (SIGSEGV);
- `refuse_max`: all_reduce MAX raises on every rank (gloo computes it);
- `wait_early`: an async all_reduce's Work completes before its data lands (0.3 s later);
- `barrier_skipped`: barrier returns at once on every rank;
- `avg_small_zero`: all_reduce AVG returns 0 wherever the mean's magnitude is below 1 (a
  kernel that flushes small means: hidden by a bound at the largest result's scale);
- `opaque_refusals`: all_reduce raises on every rank with an error that names nothing refused:
  "illegal address in the strided copy kernel" for a non-contiguous tensor, "out of resources"
  for a bitwise op (a refusal must name what it refuses, or it is a failure);
- `zero_inputs`: all_gather_into_tensor and reduce_scatter_tensor zero the caller's input after
  computing the right output (an out-of-place collective that uses its input as scratch).

Run: `PYTHONPATH=tests/backends pytest conformance/collectives --backend faulty_ccl
--collectives faulty:cpu`.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import echo_npu  # noqa: F401  (registers the device under test)
import torch
import torch.distributed as dist
from torch.futures import Future

AVG_SIZES = frozenset({1, 2, 4, 28, 29, 30, 31, 33})
DELEGATED = (
    "allreduce_coalesced", "broadcast", "reduce", "allgather", "allgather_coalesced",
    "all_gather_single", "_allgather_base", "all_gather_single_coalesced",
    "allgather_into_tensor_coalesced", "gather", "scatter", "reduce_scatter",
    "reduce_scatter_single", "_reduce_scatter_base", "reduce_scatter_single_coalesced",
    "reduce_scatter_tensor_coalesced", "alltoall", "alltoall_base", "all_to_all_single",
    "send", "recv", "recv_anysource", "barrier",
)  # fmt: skip


def faults() -> set[str]:
    return {f.strip() for f in os.environ.get("FAULTY_CCL", "").split(",") if f.strip()}


def _op(opts) -> object:
    reduce_op = opts.reduceOp
    return getattr(reduce_op, "op", reduce_op)


class DoneWork(dist.Work):
    """A Work that says it is complete at once."""

    def wait(self, timeout=None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def get_future(self) -> Future:
        future: Future = Future()
        future.set_result([])
        return future


class FaultyGroup(dist.ProcessGroup):
    def __init__(self, store, rank: int, size: int, timeout) -> None:
        super().__init__(rank, size)
        self.inner = dist.ProcessGroupGloo(dist.PrefixStore("faulty", store), rank, size, timeout)

    def getBackendName(self) -> str:  # noqa: N802 (c10d's name)
        return "faulty"

    def allreduce(self, tensors, opts=None):
        planted = faults()
        op = _op(opts)
        if "refuse_max" in planted and op == dist.ReduceOp.MAX:
            raise RuntimeError("faulty: MAX is not supported")
        if "opaque_refusals" in planted:
            if not all(t.is_contiguous() for t in tensors):
                raise RuntimeError("faulty: illegal address in the strided copy kernel")
            if op in (dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR):
                raise RuntimeError("faulty: out of resources")
        if "wait_early" in planted and getattr(opts, "asyncOp", True):
            copies = [t.clone() for t in tensors]
            work = self.inner.allreduce(copies, opts)

            def land() -> None:
                time.sleep(0.3)
                work.wait()
                for t, c in zip(tensors, copies, strict=True):
                    t.copy_(c)

            threading.Thread(target=land, daemon=True).start()
            return DoneWork()
        work = self.inner.allreduce(tensors, opts)
        if "avg_small_zero" in planted and op == dist.ReduceOp.AVG:
            work.wait()
            for t in tensors:
                t.masked_fill_(t.abs() < 1, 0)
        if "avg_twice" in planted and op == dist.ReduceOp.AVG:
            work.wait()
            for t in tensors:
                if t.numel() in AVG_SIZES:
                    t.div_(self.size())
        return work

    def allgather(self, outputs, inputs, opts=None):
        if "hang_all_gather" in faults() and self.rank() == 1:
            time.sleep(3600)
        return self.inner.allgather(outputs, inputs, opts)

    def broadcast(self, tensors, opts=None):
        if "crash_broadcast" in faults() and self.rank() == 0:
            os.kill(os.getpid(), signal.SIGSEGV)
        return self.inner.broadcast(tensors, opts)

    def _zeroing(self, name: str, output, input, opts):
        work = getattr(self.inner, name)(output, input, opts)
        if "zero_inputs" in faults():
            work.wait()
            input.zero_()
        return work

    def _allgather_base(self, output, input, opts=None):
        return self._zeroing("_allgather_base", output, input, opts)

    def _reduce_scatter_base(self, output, input, opts=None):
        return self._zeroing("_reduce_scatter_base", output, input, opts)

    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base

    def barrier(self, opts=None):
        if "barrier_skipped" in faults():
            return DoneWork()
        return self.inner.barrier(opts)


#: the names torch calls on a Python group -> gloo's binding of the same collective
ALIASES = {
    "all_gather_single": "_allgather_base",
    "reduce_scatter_single": "_reduce_scatter_base",
    "all_to_all_single": "alltoall_base",
    "all_gather_single_coalesced": "allgather_into_tensor_coalesced",
    "reduce_scatter_single_coalesced": "reduce_scatter_tensor_coalesced",
}


def _delegate(name: str):
    def method(self, *args):
        inner = name if hasattr(self.inner, name) else ALIASES.get(name, name)
        return getattr(self.inner, inner)(*args)

    method.__name__ = name
    return method


for _name in DELEGATED:
    if _name not in FaultyGroup.__dict__:
        setattr(FaultyGroup, _name, _delegate(_name))


def _create(store, rank, size, timeout):
    return FaultyGroup(store, rank, size, timeout)


if "faulty" not in dist.Backend.backend_list:
    dist.Backend.register_backend("faulty", _create, devices=["cpu"])
torch.distributed.Backend.default_device_backend_map["cpu"] = "gloo"  # cpu stays gloo's

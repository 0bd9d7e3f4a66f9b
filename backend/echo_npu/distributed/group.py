"""The ``echo`` process group's collectives (torch.distributed calls these methods of the
group; each queues its run on the worker of base.GroupBase and returns an EchoWork)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from .base import GroupBase
from .hostdata import (
    check_list,
    check_reduce,
    from_bytes,
    host,
    keep_tail32,
    pack,
    read_input,
    reduce_parts,
    split_rows,
    to_bytes,
    unpack,
    write,
    write_chunk,
)
from .store import opt

_RO = dist.ReduceOp


class EchoProcessGroup(GroupBase):
    """The ``echo`` process group: see the package docstring."""

    # collectives ------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        tensors = list(tensors)
        reduce_op = opt(opts, "reduceOp", _RO.SUM)
        for t in tensors:
            check_reduce(reduce_op, t.dtype)

        def run(seq, faults):
            mine = [host(t) for t in tensors]
            got = self._exchange(
                seq,
                "allreduce",
                {str(self._rank): pack(mine)},
                self._all_keys(),
                self._all_keys(),
            )
            parts = [
                mine if r == self._rank else unpack(got[str(r)], mine) for r in range(self._size)
            ]
            results = [
                reduce_parts(reduce_op, [parts[r][i] for r in range(self._size)], faults)
                for i in range(len(tensors))
            ]
            return lambda: [write(t, v) for t, v in zip(tensors, results, strict=True)]

        return self._submit("allreduce", tensors, run, opts)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts=None):
        tensors = list(tensors)
        root = opt(opts, "rootRank", 0)
        self._check_root(root, "broadcast")

        def run(seq, faults):
            put = {"root": pack([host(t) for t in tensors])} if self._rank == root else {}
            got = self._exchange(seq, "broadcast", put, ["root"], ["root"])
            if self._rank == root:
                return None
            values = unpack(got["root"], tensors)
            return lambda: [write(t, v) for t, v in zip(tensors, values, strict=True)]

        return self._submit("broadcast", tensors, run, opts)

    def reduce(self, tensors, opts=None):
        tensors = list(tensors)
        reduce_op = opt(opts, "reduceOp", _RO.SUM)
        root = opt(opts, "rootRank", 0)
        self._check_root(root, "reduce")
        for t in tensors:
            check_reduce(reduce_op, t.dtype)

        def run(seq, faults):
            mine = [host(t) for t in tensors]
            get = self._all_keys() if self._rank == root else []
            got = self._exchange(
                seq, "reduce", {str(self._rank): pack(mine)}, get, self._all_keys()
            )
            if self._rank != root:
                return None
            parts = [
                mine if r == self._rank else unpack(got[str(r)], mine) for r in range(self._size)
            ]
            results = [
                reduce_parts(reduce_op, [parts[r][i] for r in range(self._size)], faults)
                for i in range(len(tensors))
            ]
            return lambda: [write(t, v) for t, v in zip(tensors, results, strict=True)]

        return self._submit("reduce", tensors, run, opts)

    # all_gather ---------------------------------------------------------------------------
    def _gather_parts(self, seq, name, faults, inputs, to_root=None):
        """Every rank's inputs (host tensors, rank order), read as the faults say."""
        strided = "ccl_gather_strided_as_contiguous" in faults
        mine = [read_input(t, strided) for t in inputs]
        get = self._all_keys() if to_root is None or to_root == self._rank else []
        got = self._exchange(seq, name, {str(self._rank): pack(mine)}, get, self._all_keys())
        if not get:
            return None
        return [mine if r == self._rank else unpack(got[str(r)], inputs) for r in range(self._size)]

    def allgather(self, output_lists, inputs, opts=None):
        output_lists = [list(o) for o in output_lists]
        inputs = list(inputs)
        for outs, inp in zip(output_lists, inputs, strict=True):
            check_list(outs, self._size, inp, "allgather")

        def run(seq, faults):
            parts = self._gather_parts(seq, "allgather", faults, inputs)
            tail32 = "ccl_all_gather_tail32" in faults

            def land():
                for i, outs in enumerate(output_lists):
                    for r, out in enumerate(outs):
                        write_chunk(out, parts[r][i], tail32)

            return land

        return self._submit("allgather", output_lists, run, opts)

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        """``output_lists[r][i]`` receives rank r's ``inputs[i]``."""
        output_lists = [list(o) for o in output_lists]
        inputs = list(inputs)
        if len(output_lists) != self._size:
            raise ValueError(f"echo: allgather_coalesced needs {self._size} output lists")

        def run(seq, faults):
            parts = self._gather_parts(seq, "allgather_coalesced", faults, inputs)
            tail32 = "ccl_all_gather_tail32" in faults

            def land():
                for r, outs in enumerate(output_lists):
                    for i, out in enumerate(outs):
                        write_chunk(out, parts[r][i], tail32)

            return land

        return self._submit("allgather_coalesced", output_lists, run, opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        outputs, inputs = list(outputs), list(inputs)
        for out, inp in zip(outputs, inputs, strict=True):
            if out.numel() != inp.numel() * self._size or out.dtype != inp.dtype:
                raise ValueError(
                    "echo: all_gather_into_tensor: the output must have world_size times the "
                    f"input's elements and its dtype (output {out.dtype} {list(out.shape)}, "
                    f"input {inp.dtype} {list(inp.shape)}, world size {self._size})"
                )

        def run(seq, faults):
            parts = self._gather_parts(seq, "all_gather_into_tensor", faults, inputs)
            tail32 = "ccl_all_gather_tail32" in faults

            def land():
                for i, out in enumerate(outputs):
                    chunks = [parts[r][i].reshape(-1) for r in range(self._size)]
                    if tail32:
                        keep_tail32(out, chunks)
                    write(out, torch.cat(chunks))

            return land

        return self._submit("all_gather_into_tensor", outputs, run, opts)

    def all_gather_single(self, output, input, opts=None):  # noqa: A002 (torch's names)
        return self.all_gather_single_coalesced([output], [input], opts)

    _allgather_base = all_gather_single
    allgather_into_tensor_coalesced = all_gather_single_coalesced

    # gather / scatter ---------------------------------------------------------------------
    def gather(self, output_lists, inputs, opts=None):
        output_lists = [list(o) for o in output_lists]
        inputs = list(inputs)
        root = opt(opts, "rootRank", 0)
        self._check_root(root, "gather")
        if self._rank == root:
            if len(output_lists) != 1:
                raise ValueError("echo: gather: the root needs one list of output tensors")
            check_list(output_lists[0], self._size, inputs[0], "gather")
        elif output_lists and any(output_lists):
            raise ValueError("echo: gather: only the root passes output tensors")

        def run(seq, faults):
            parts = self._gather_parts(seq, "gather", faults, inputs, to_root=root)
            if parts is None:
                return None
            return lambda: [write(out, parts[r][0]) for r, out in enumerate(output_lists[0])]

        return self._submit("gather", output_lists, run, opts)

    def scatter(self, outputs, input_lists, opts=None):
        outputs = list(outputs)
        input_lists = [list(i) for i in input_lists]
        root = opt(opts, "rootRank", 0)
        self._check_root(root, "scatter")
        if self._rank == root:
            if len(input_lists) != 1:
                raise ValueError("echo: scatter: the root needs one list of input tensors")
            check_list(input_lists[0], self._size, outputs[0], "scatter")
        elif input_lists and any(input_lists):
            raise ValueError("echo: scatter: only the root passes input tensors")

        def run(seq, faults):
            put = {}
            if self._rank == root:
                put = {f"{root}>{d}": to_bytes(host(t)) for d, t in enumerate(input_lists[0])}
            key = f"{root}>{self._rank}"
            got = self._exchange(seq, "scatter", put, [key], self._pair_keys())
            value = from_bytes(got[key], outputs[0].shape, outputs[0].dtype)
            return lambda: write(outputs[0], value)

        return self._submit("scatter", outputs, run, opts)

    # reduce_scatter -----------------------------------------------------------------------
    def _reduce_scatter_run(self, name, outputs, pieces, reduce_op):
        """pieces[i][d]: this rank's part of output i for rank d (tensors shaped like out)."""

        def run(seq, faults):
            put = {
                f"{self._rank}>{d}": pack([host(p[d]) for p in pieces]) for d in range(self._size)
            }
            get = [f"{s}>{self._rank}" for s in range(self._size)]
            got = self._exchange(seq, name, put, get, self._pair_keys())
            likes = [(tuple(o.shape), o.dtype) for o in outputs]
            parts = [unpack(got[k], likes) for k in get]
            in_half = "ccl_reduce_scatter_casts" in faults
            results = [
                reduce_parts(reduce_op, [parts[s][i] for s in range(self._size)], faults, in_half)
                for i in range(len(outputs))
            ]
            return lambda: [write(o, v) for o, v in zip(outputs, results, strict=True)]

        return run

    def reduce_scatter(self, outputs, input_lists, opts=None):
        outputs = list(outputs)
        input_lists = [list(i) for i in input_lists]
        reduce_op = opt(opts, "reduceOp", _RO.SUM)
        for out, ins in zip(outputs, input_lists, strict=True):
            check_list(ins, self._size, out, "reduce_scatter")
            check_reduce(reduce_op, out.dtype)
        pieces = [
            [t.reshape(o.shape) for t in ins] for o, ins in zip(outputs, input_lists, strict=True)
        ]
        run = self._reduce_scatter_run("reduce_scatter", outputs, pieces, reduce_op)
        return self._submit("reduce_scatter", outputs, run, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        outputs, inputs = list(outputs), list(inputs)
        reduce_op = opt(opts, "reduceOp", _RO.SUM)
        pieces = []
        for out, inp in zip(outputs, inputs, strict=True):
            if inp.numel() != out.numel() * self._size or out.dtype != inp.dtype:
                raise ValueError(
                    "echo: reduce_scatter_tensor: the input must have world_size times the "
                    f"output's elements and its dtype (output {out.dtype} {list(out.shape)}, "
                    f"input {inp.dtype} {list(inp.shape)}, world size {self._size})"
                )
            check_reduce(reduce_op, out.dtype)
            flat = inp.reshape(-1)
            n = out.numel()
            pieces.append([flat[d * n : (d + 1) * n].reshape(out.shape) for d in range(self._size)])
        run = self._reduce_scatter_run("reduce_scatter_tensor", outputs, pieces, reduce_op)
        return self._submit("reduce_scatter_tensor", outputs, run, opts)

    def reduce_scatter_single(self, output, input, opts=None):  # noqa: A002
        return self.reduce_scatter_single_coalesced([output], [input], opts)

    _reduce_scatter_base = reduce_scatter_single
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # alltoall -----------------------------------------------------------------------------
    def _alltoall_run(self, name, send, recv):
        """send[d]: the tensor for rank d; recv[s]: the tensor that receives rank s's."""

        def run(seq, faults):
            put = {f"{self._rank}>{d}": to_bytes(host(t)) for d, t in enumerate(send)}
            get = [f"{s}>{self._rank}" for s in range(self._size)]
            got = self._exchange(seq, name, put, get, self._pair_keys())
            values = [from_bytes(got[k], r.shape, r.dtype) for k, r in zip(get, recv, strict=True)]
            return lambda: [write(r, v) for r, v in zip(recv, values, strict=True)]

        return run

    def alltoall(self, outputs, inputs, opts=None):
        outputs, inputs = list(outputs), list(inputs)
        if len(outputs) != self._size or len(inputs) != self._size:
            raise ValueError(f"echo: alltoall needs {self._size} input and output tensors")
        return self._submit(
            "alltoall", outputs, self._alltoall_run("alltoall", inputs, outputs), opts
        )

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # noqa: A002
        send = split_rows(input, list(input_split_sizes), self._size, "input")
        recv = split_rows(output, list(output_split_sizes), self._size, "output")
        run = self._alltoall_run("all_to_all_single", send, recv)
        return self._submit("all_to_all_single", [output], run, opts)

    alltoall_base = all_to_all_single

    # barrier ------------------------------------------------------------------------------
    def barrier(self, opts=None):
        def run(seq, faults):
            self._exchange(
                seq, "barrier", {str(self._rank): b""}, self._all_keys(), self._all_keys()
            )
            return None

        return self._submit("barrier", [], run, opts)

"""Measure how far CPU's own results drift for an op: the evidence for an op spec's tolerance.

    python -m conformance.measure.tolerances --ops 'baddbmm*' --dtypes float32,bfloat16
    python -m conformance.measure.tolerances --ops 'native_batch_norm*' --layouts contiguous,sliced

For each aten overload matching --ops (shell patterns, comma-separated) and each dtype it takes
the suite's own samples (OpInfo-derived plus the op spec's, as a run gets them:
samples `calls_for`), places them in every layout (engine/layouts.py) and runs CPU's
reference (the spec's, else the op), each layout in a forked child with one thread, as the
suite's forked runners do (a crashing CPU kernel costs that layout only):
  layouts  CPU on the layout against CPU on contiguous copies of the same values (what
           engine/consistency.py checks). A sample beyond SELF_TOLERANCE x the spec's tolerance,
           or whose finiteness changes, is a CPU bug (a `torch-bug` in a run, where the device is
           judged against the contiguous copies): counted apart, left out of the figures;
  float64  CPU on contiguous copies against the same computation with every floating input
           upcast to float64 (complex128): how far CPU's own kernel is from exact (0 for
           float64 itself, its own reference).

Rows are per dtype of the compared values ("bfloat16>float32": float32 outputs of bfloat16
samples): the tolerance is that of the compared tensor's dtype. Columns: the max absolute and
relative difference (relative where |expected| > the dtype's atol) and `x`, the multiplier of the
dtype's base tolerance (compare.TOLERANCES) it implies: the smallest x with
|a - e| <= x * (atol + rtol * |e|) for every element. `needs` is what a kernel as accurate as
CPU's needs against CPU: the layout differences and twice the float64 differences (two results
each that far from exact differ by up to twice it), never below 1; as one multiplier of rtol
and atol (`x`), of rtol alone with atol at its base (`r`) or of atol alone (`a`). `spec` is what
the op spec allows now (compare.tolerance: "x16", or "r1 a16" when they differ); "!" marks a
spec too tight for what was measured.

Choosing: set `OpSpec.tol_scale` only for a dtype whose needs exceed 1, as a multiplier (x) or
an (rtol, atol) pair: widen atol alone where the error is absolute (cancellation: large terms,
small results), so that a kernel some percent off still fails on the larger values; quote the
figures (torch version, samples, max rel/abs) in a comment next to it, and run again: no "!"
(which samples are CPU bugs depends on the spec's tolerance, as in a run). Needs no backend.
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import os
import pickle
import signal
import sys
import traceback
from collections.abc import Callable

import torch
from torch.utils._pytree import tree_flatten, tree_map

from conformance.engine import consistency, oracles
from conformance.engine.checks import Outcome, invoke
from conformance.engine.compare import TOLERANCES, tolerance
from conformance.engine.discovery import has_schema, overload_name, resolve
from conformance.engine.layout_names import parse_layouts
from conformance.engine.placing import Materialized, PlacedCall, place
from conformance.errors import ConformanceUsageError
from conformance.harness.options import parse_dtypes
from conformance.measure.tolerance_figures import Figures, Row, measure, report
from conformance.ops import OpSpec, spec_for
from conformance.processes import forking, launch, messages
from conformance.processes.messages import MessageReader
from conformance.samples import MAX_FALLBACK_SAMPLES, MAX_OPINFO_SAMPLES, calls_for

DEFAULT_DTYPES = "float32,float64,float16,bfloat16"
DEFAULT_CACHE = os.path.join(".pytest_cache", "d", "conformance")  # the suite's, run from here
WIDER = {torch.complex64: torch.complex128, torch.complex32: torch.complex128}


def _compared(spec: OpSpec, mat: Materialized, out: Outcome) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) of every value the suite compares: the outputs the spec compares, then the
    written arguments."""
    leaves, _ = tree_flatten(out.result)
    values = [
        (f"output {i}", t)
        for i, t in enumerate(leaves)
        if isinstance(t, torch.Tensor)
        and (spec.compared_outputs is None or i in spec.compared_outputs)
        and i not in spec.metadata_only_outputs
    ]
    return values + [(leaf.arg, view) for leaf, _, view in mat.bases if leaf.written]


def _upcast(mat: Materialized) -> Materialized:
    """The same arguments with every floating tensor in float64 (complex in complex128)."""

    def wide(x: object) -> object:
        if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()):
            return x.detach().to(WIDER.get(x.dtype, torch.float64)).clone()
        return x

    args, kwargs = tree_map(wide, (mat.args, mat.kwargs))
    flat_old, _ = tree_flatten((mat.args, mat.kwargs))
    flat_new, _ = tree_flatten((args, kwargs))
    new_of = {id(o): n for o, n in zip(flat_old, flat_new, strict=True)}
    bases = [(leaf, base, new_of.get(id(view), view)) for leaf, base, view in mat.bases]
    return Materialized(tuple(args), dict(kwargs), bases)


def _label(sample: torch.dtype, compared: torch.dtype) -> str:
    name = str(sample).removeprefix("torch.")
    return name if compared == sample else f"{name}>{str(compared).removeprefix('torch.')}"


def measure_overload(
    overload: str, dtypes: list[torch.dtype], layouts: list[str], cache_dir: str | None, limit: int
) -> tuple[dict[str, Row], list[str]]:
    """{row label: Row} of one overload, and notes (why nothing was measured, CPU crashes)."""
    spec = spec_for(overload)
    op = resolve(overload)
    if not spec.check_values:
        return {}, ["values not compared by the suite (OpSpec.check_values=False)"]
    if spec.nondeterministic or (spec.nondeterministic is None and oracles.is_nondeterministic(op)):
        return {}, ["random op: judged by the oracles of engine/oracles.py, not by a tolerance"]
    reference = spec.reference or op
    rows: dict[str, Row] = {}
    notes: list[str] = []
    sampled = False
    for dtype in dtypes:
        if spec.dtypes is not None and dtype not in spec.dtypes:
            continue
        calls = calls_for(overload, dtype, cache_dir, limit=limit)
        sampled = sampled or bool(calls)
        for layout in [lo for lo in layouts if spec.layouts is None or lo in spec.layouts]:
            placed = [place(c, layout, op._schema, written=spec.written_args) for c in calls]
            placed = [p for p in placed if p is not None]
            if not placed:
                continue

            def run(progress: Callable[[str], None], placed=placed, dtype=dtype, layout=layout):
                found: dict[str, Row] = {}
                for p in placed:
                    progress(f"{layout} {p.signature()}")
                    _measure_sample(spec, op, reference, p, dtype, found)
                return found

            found = in_child(run)
            if isinstance(found, str):
                notes.append(f"{str(dtype).removeprefix('torch.')}: {found}")
                continue
            for label, row in found.items():
                rows.setdefault(label, Row()).add(row)
    if not sampled:
        notes.append("no samples for these dtypes")
    return rows, notes


def in_child(fn: Callable[[Callable[[str], None]], object]) -> object:
    """fn(progress) in a forked child: its result, or what killed the child (a string naming the
    signal and the last progress it reported). Where this process may not fork (it has
    threads: processes/forking.py), fn runs here. The child says `progress` and then its
    `result` (pickled: rows of figures) as messages (processes/messages.py)."""
    if forking.refusal() is not None:
        return fn(lambda text: None)
    read, write = os.pipe()
    pid = launch.fork("task", "tolerances")
    if pid == 0:  # the child: never returns
        code = 0
        try:
            os.close(read)
            torch.set_num_threads(1)  # an OpenMP pool inherited through fork() would hang
            result = fn(lambda text: messages.say(write, "progress", at=text))
            data = base64.b64encode(pickle.dumps(result)).decode()
            messages.say(write, "result", pickle=data)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    said = _Said()
    for message in MessageReader(read).all():
        messages.dispatch(said, message)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return f"CPU crashed ({name}) at {said.at}: left out"
    if os.WEXITSTATUS(status) or said.result is None:
        return f"measuring failed at {said.at} (traceback above): left out"
    return pickle.loads(base64.b64decode(said.result))


class _Said:
    """What a measuring child said: how far it got, and its result."""

    def __init__(self) -> None:
        self.at = ""
        self.result: str | None = None

    def on_progress(self, at: str) -> None:
        self.at = at

    def on_result(self, pickle: str) -> None:  # noqa: A002 - the message's field
        self.result = pickle


def _measure_sample(
    spec: OpSpec,
    op: torch._ops.OpOverload,
    reference: object,
    placed: PlacedCall,
    dtype: torch.dtype,
    rows: dict[str, Row],
) -> None:
    """Add one placed sample's figures to `rows`."""
    cpu = placed.materialize("cpu")
    expected = invoke(reference, cpu)
    if expected.exc is not None:
        return  # error parity: no values
    free = placed.layout_free()
    wide = _upcast(free)
    exact = invoke(reference, wide)
    free_out = invoke(reference, free)
    if free_out.exc is not None:
        return
    values = _compared(spec, cpu, expected)
    free_values = _compared(spec, free, free_out)
    exact_values = _compared(spec, wide, exact) if exact.exc is None else []
    if len(free_values) != len(values):
        return
    layouts_apply = placed.layout != "contiguous" and not consistency.reads_memory(op)
    per_row: dict[str, Row] = {}
    for i, (name, t) in enumerate(values):
        if t.dtype not in TOLERANCES:
            continue
        where = f"{name} of {placed.layout} {placed.signature()}"
        allowed = tolerance(t.dtype, spec.tol_scale)
        row = per_row.setdefault(_label(dtype, t.dtype), Row(samples=1))
        free_t = free_values[i][1]
        if layouts_apply and free_t.shape == t.shape:
            if not row.per_layout:
                row.per_layout.append(Figures(samples=1))
            row.per_layout[0].merge(measure(t, free_t, allowed, 1.0, where))
            row.per_layout[0].samples = 1
        if len(exact_values) == len(values) and exact_values[i][1].shape == t.shape:
            e = exact_values[i][1]
            row.exact.merge(measure(free_t, e, allowed, 1.0, where))
            row.exact2.merge(measure(free_t, e, allowed, 2.0, where))
            row.exact.samples = row.exact2.samples = 1
    for label, row in per_row.items():
        rows.setdefault(label, Row()).add(row)


def _overloads(patterns: list[str]) -> list[str]:
    names = sorted(
        {overload_name(q) for q in torch._C._dispatch_get_all_op_names() if q.startswith("aten::")}
    )
    unknown = [p for p in patterns if not any(fnmatch.fnmatchcase(n, p) for n in names)]
    if unknown:
        raise ConformanceUsageError(f"--ops: {', '.join(unknown)} matches no aten overload")
    chosen = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    return [n for n in chosen if has_schema(n)]


def _flag(flag: str, parse: Callable[[str], list], text: str) -> list:
    """The suite's own parser of `flag`'s comma list, its one-line error naming the flag."""
    if not text.strip():
        raise ConformanceUsageError(f"{flag}: nothing given")
    try:
        return parse(text)
    except ConformanceUsageError as exc:
        raise ConformanceUsageError(f"{flag}: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m conformance.measure.tolerances",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--ops", required=True, help="comma-separated aten overload patterns, e.g. 'baddbmm*'"
    )
    parser.add_argument("--dtypes", default=DEFAULT_DTYPES, help=f"default: {DEFAULT_DTYPES}")
    parser.add_argument("--layouts", default="all", help="comma-separated layouts (default: all)")
    parser.add_argument(
        "--limit",
        type=int,
        default=MAX_OPINFO_SAMPLES,
        help=f"OpInfo samples per dtype, as a run takes them (default: {MAX_OPINFO_SAMPLES}, "
        f"an overload the backend registers; {MAX_FALLBACK_SAMPLES}: a fallback-only one)",
    )
    parser.add_argument(
        "--cache-dir",
        default=DEFAULT_CACHE,
        help=f"captured-sample cache, 'none' for none (default: {DEFAULT_CACHE}, the suite's)",
    )
    opts = parser.parse_args(argv)
    try:
        patterns = [p.strip() for p in opts.ops.split(",") if p.strip()]
        if not patterns:
            raise ConformanceUsageError("--ops: no pattern given")
        overloads = _overloads(patterns)
        dtypes = _flag("--dtypes", parse_dtypes, opts.dtypes)
        layouts = _flag("--layouts", parse_layouts, opts.layouts)
        if opts.limit < 1:
            raise ConformanceUsageError("--limit: must be at least 1")
    except ConformanceUsageError as exc:
        print(f"tolerances: {exc}", file=sys.stderr)
        return 2
    cache_dir = None if opts.cache_dir == "none" else opts.cache_dir
    # one thread, as its forked children compute: this process stays able to fork them
    # (processes/forking.py: never a process with threads)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}; layouts: {', '.join(layouts)}", flush=True)
    for overload in overloads:
        rows, notes = measure_overload(overload, dtypes, layouts, cache_dir, opts.limit)
        for line in report(overload, rows, notes):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The power of the suite's checks: the smallest planted fault each check family catches, per dtype.

    python -m conformance.measure.power                        # the table (Markdown) on stdout
    python -m conformance.measure.power --check                # exit 1 below a target
    python -m conformance.measure.power --write docs/POWER.md  # the table the docs publish
    python -m conformance.measure.power --quick --check        # each target and a control only

The faults are `fault_families.py` (the families table: what each check must catch, per dtype) and
their kernels `planted_faults.py`. The real case of a family's overload runs through the engine as a
run runs it (harness/casework.py: its samples, every check, contiguous layout, native path) at each
magnitude of a descending grid until one passes; the smallest magnitude caught, the largest missed
and the target are printed per family and dtype. Magnitude 0 (the right kernel with the fault's
machinery) is the control and must pass: a check that fires on it is a false alarm. A fault smaller
than the dtype's resolution does not exist: the perturbed result is rounded to the dtype, so a
bfloat16 output cannot be off by less than its ulp (0.4-0.8 %).

The kernels stay overridden for the life of the process: run it as its own process (the
self-test does, tests/measure/test_power.py). Needs echo_npu.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from conformance.engine import discovery
from conformance.measure.fault_families import FAMILIES, Family, dtype_name
from conformance.measure.markers import write_block
from conformance.measure.planted_faults import Planted, install

__all__ = ["FAMILIES", "Bench", "Power", "main", "measure_all", "render"]


@dataclass
class Power:
    """What one family and dtype measured."""

    family: Family
    dtype: torch.dtype
    caught: float | None = None  # the smallest magnitude caught (all larger ones caught too)
    missed: float | None = None  # the largest magnitude missed
    control: str = ""  # a check that fired at magnitude 0 (a false alarm), if any
    why: str = ""  # the message that caught the smallest fault

    @property
    def target(self) -> float:
        return self.family.targets[self.dtype]

    @property
    def met(self) -> bool:
        return not self.control and self.caught is not None and self.caught <= self.target


class Bench:
    """The planted kernels, and the run's own case construction, samples and engine, in this
    process: each family's case is built and run as a run builds and runs it
    (harness/casework.py), and must be one the run collects."""

    def __init__(self, families: list[Family]) -> None:
        import echo_npu

        from conformance.engine.backend import Backend
        from conformance.harness.casework import CaseWork
        from conformance.harness.sampling import RunSamples

        self.backend = Backend("echo_npu", echo_npu, torch._C._get_privateuse1_backend_name())
        self._cache = tempfile.TemporaryDirectory(prefix="conformance-power-")  # removed at exit
        self.cache = self._cache.name
        self.samples = RunSamples(self.cache)  # CPU's exactness, measured as a run does
        self.collected = self._collected(families)  # before the plants change what is registered
        self.state = Planted()
        install(self.state)
        registered = discovery.registered_overloads(self.backend.dispatch_key)
        self.work = CaseWork(self.backend, self.samples, set(registered))

    def _collected(self, families: list[Family]) -> set[str]:
        """The ids of the cases a run of these families' overloads on echo_npu collects
        (`--ops` for those it has kernels for, `--fallback-ops` for the others; every other
        option as the default run has it), without their path: the planted kernels are the
        device's own (native), where a run may reach echo_npu's fallback instead."""
        from conformance.harness.cases import CaseList
        from conformance.harness.options import default_options

        registered = set(discovery.registered_overloads(self.backend.dispatch_key))
        names = sorted({f.overload for f in families})
        given = {
            "ops": ",".join(n for n in names if n in registered),
            "fallback_ops": ",".join(n for n in names if n not in registered) or "none",
        }
        options = default_options(**{k: v for k, v in given.items() if v})
        cases = CaseList.for_run(options, self.backend, self.samples, sharded=False)
        return {str(replace(c, path="native")) for c in cases.cases()}

    def caught(self, family: Family, dtype: torch.dtype, magnitude: float) -> str | None:
        """The failure message of the family's case with the fault at `magnitude` (None: the
        case passed)."""
        case = family.case(dtype)
        if str(case) not in self.collected:
            raise RuntimeError(
                f"{case}: a run collects no case of this overload, dtype, layout and value set "
                "on any path, so its figure would describe a check the run never applies (name "
                "the overload as the run does)"
            )
        self.state.family, self.state.magnitude = family.name, magnitude
        try:
            outcome = self.work.outcome(case)
        finally:
            self.state.family, self.state.magnitude = "", 0.0
        if outcome.failure is not None:
            return f"[{outcome.failure.check}] {outcome.failure.message.splitlines()[0]}"
        if not outcome.samples:
            raise RuntimeError(
                f"{case}: no sample compared ({outcome.skip_reason or outcome.unsupported})"
            )
        return None

    def measure(self, family: Family, dtype: torch.dtype, quick: bool = False) -> Power:
        """Down the grid until a magnitude passes (quick: the target and the control only)."""
        result = Power(family, dtype)
        control = self.caught(family, dtype, 0.0)
        if control is not None:
            result.control = control
            return result
        grid = [result.target] if quick else list(family.grid)
        for magnitude in grid:
            why = self.caught(family, dtype, magnitude)
            if why is None:
                result.missed = magnitude
                break
            result.caught, result.why = magnitude, why
        return result


def measure_all(families: list[Family], dtypes: list[str] | None, quick: bool) -> Iterator[Power]:
    bench = Bench(families)
    for family in families:
        for dtype in family.dtypes:
            if dtypes and dtype_name(dtype) not in dtypes:
                continue
            yield bench.measure(family, dtype, quick)


def _magnitude(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "on/off":
        return "on"
    if unit == "relative":
        return f"{value * 100:g} %"
    if unit == "sigma":
        return f"{value:g} sigma"
    return f"{value:g}"


def _note(family: Family, dtype: torch.dtype) -> str:
    return family.note.get(dtype, "") if isinstance(family.note, dict) else family.note


def _caught_by(r: Power) -> str:
    """The check whose failure caught the smallest fault ("[rounding] ..." names it)."""
    return r.why[1:].split("]")[0] if r.why.startswith("[") else "-"


def render(results: list[Power]) -> str:
    """The power table (Markdown)."""
    lines = [
        "| fault (overload) | check | caught by | dtype | smallest caught | largest missed "
        "| target | | note |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        f = r.family
        verdict = "ok" if r.met else ("FALSE ALARM at 0" if r.control else "BELOW TARGET")
        lines.append(
            f"| {f.name} (`{f.overload}`{', -grad' if f.mode == 'grad' else ''}) | {f.check} | "
            f"{_caught_by(r)} | {dtype_name(r.dtype)} | {_magnitude(r.caught, f.unit)} | "
            f"{_magnitude(r.missed, f.unit)} | {_magnitude(r.target, f.unit)} | {verdict} | "
            f"{_note(f, r.dtype)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m conformance.measure.power",
        description=__doc__.splitlines()[0],
        epilog="The fault kernels override echo_npu's in this process; see the module docstring.",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is not met")
    parser.add_argument(
        "--quick", action="store_true", help="each target and the control only (no grid)"
    )
    parser.add_argument("--write", metavar="FILE", help="write the table into FILE")
    parser.add_argument("--family", action="append", help="only families whose name has this")
    parser.add_argument("--dtypes", help="comma-separated dtypes (default: each family's)")
    args = parser.parse_args(argv)
    families = [f for f in FAMILIES if not args.family or any(s in f.name for s in args.family)]
    if not families:
        print(f"error: --family matches none of: {', '.join(f.name for f in FAMILIES)}")
        return 2
    dtypes = args.dtypes.split(",") if args.dtypes else None
    results = []
    total = sum(
        len([d for d in f.dtypes if not dtypes or dtype_name(d) in dtypes]) for f in families
    )
    for result in measure_all(families, dtypes, args.quick):
        results.append(result)
        row = render([result]).splitlines()[-1]
        print(f"[{len(results)}/{total}] {row}", file=sys.stderr, flush=True)
    table = render(results)
    sys.stdout.write(table)
    if args.write:
        write_block(Path(args.write), BEGIN, END, table)
    return 1 if args.check and not all(r.met for r in results) else 0


BEGIN, END = "<!-- power:begin -->", "<!-- power:end -->"


if __name__ == "__main__":
    sys.exit(main())

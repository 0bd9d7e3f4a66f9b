"""python -m conformance.measure.mutants: the mutation campaign (see the package docstring).

python -m conformance.measure.mutants                          # every mutant, 2 at a time
python -m conformance.measure.mutants --sample 40 --seed 79 --check   # CI's sample
python -m conformance.measure.mutants --ops 'exp*' --operators 'ulp:*'
python -m conformance.measure.mutants --mutant 'abs=ulp:1'     # one mutant: its repro
python -m conformance.measure.mutants --list                   # the operators
python -m conformance.measure.mutants --write docs/POWER.md    # publish the table
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import random
import sys
import time
from pathlib import Path

from conformance.errors import ConformanceUsageError
from conformance.measure.markers import write_block
from conformance.measure.mutants.campaign import (
    SUITE_DIR,
    Campaign,
    Mutant,
    Result,
    load_results,
    plan,
)
from conformance.measure.mutants.install import parse
from conformance.measure.mutants.operators import OPERATORS
from conformance.measure.mutants.report import (
    TABLE_BEGIN,
    TABLE_END,
    known_gaps,
    new_misses,
    render,
)

DOCS = SUITE_DIR.parent / "docs" / "POWER.md"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m conformance.measure.mutants",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:]),
    )
    p.add_argument(
        "--backend", help="the backend module (as pytest's --backend; default: the suite's)"
    )
    p.add_argument(
        "--ops",
        default="*",
        help="overload patterns, comma-separated (default: every overload the backend registers)",
    )
    p.add_argument("--operators", default="*", help="operator patterns, comma-separated")
    p.add_argument("--mutant", action="append", default=[], help="OVERLOAD=OPERATOR: run these")
    p.add_argument("--sample", type=int, help="a seeded sample of this many mutants")
    p.add_argument("--seed", type=int, default=int(os.environ.get("CONFORMANCE_MUTANT_SEED", 0)))
    p.add_argument("--budget", type=float, help="seconds: start no mutant after this")
    p.add_argument("--jobs", type=int, default=2, help="mutants judged at once (default 2)")
    p.add_argument("--out", default="mutants-results", help="the campaign's folder")
    p.add_argument("--known", default=str(DOCS), help="the known gaps (docs/POWER.md)")
    p.add_argument(
        "--check",
        action="store_true",
        help="exit 1 on a miss that is not a known gap, or a control that fails",
    )
    p.add_argument("--write", metavar="FILE", help="write the table into FILE")
    p.add_argument("--list", action="store_true", help="list the operators and exit")
    p.add_argument(
        "--render",
        nargs="+",
        metavar="FOLDER",
        help="render the results of earlier campaigns' folders (a later folder's "
        "verdict on a mutant replaces an earlier one's) instead of running one",
    )
    p.add_argument("pytest_args", nargs="*", help="after --: more arguments of every suite run")
    return p


def _match(names: list[str], patterns: str, what: str) -> list[str]:
    chosen = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns.split(","))]
    if not chosen:
        raise ConformanceUsageError(f"{what} {patterns!r} matches none of: {', '.join(names)}")
    return chosen


def _mutants(args: argparse.Namespace) -> tuple[list[Mutant], list[str]]:
    from conformance.engine import discovery
    from conformance.engine.backend import load_backend

    backend = load_backend(args.backend)
    # the autograd key's too
    registered = discovery.case_overloads(discovery.registrations_by_key(backend.dispatch_key))
    if args.mutant:
        pairs = sorted({pair for m in args.mutant for pair in parse(m)})  # each judged alone
        unknown = [o for o, _ in pairs if o not in registered]
        if unknown:
            raise ConformanceUsageError(
                f"--mutant: {', '.join(unknown)} has no kernel of backend {backend.module_name}"
            )
        return [Mutant(o, n) for o, n in pairs], sorted({o for o, _ in pairs})
    overloads = _match(registered, args.ops, "--ops")
    operators = _match(list(OPERATORS), args.operators, "--operators")
    mutants = plan(overloads, operators, args.sample, args.seed)
    return mutants, sorted({m.overload for m in mutants})


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.list:
        for op in OPERATORS.values():
            print(f"{op.name:24} {op.group:13} {op.what}")
        return 0
    if args.render:
        return _render(args)
    try:
        mutants, overloads = _mutants(args)
    except ConformanceUsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    campaign = Campaign(args.backend, out, args.jobs, args.budget, args.pytest_args)
    start = time.monotonic()
    print(
        f"{len(mutants)} mutants of {len(overloads)} overloads; control run first",
        file=sys.stderr,
        flush=True,
    )
    failing = campaign.control(overloads)
    for r in failing[:10]:
        print(
            f"CONTROL FAILED: {r.id}: {r.check}: {(r.message or '').splitlines()[:1]}",
            file=sys.stderr,
        )
    results_file = out / "mutants.jsonl"
    results_file.write_text("")

    def progress(result: Result) -> None:
        with results_file.open("a") as f:
            f.write(json.dumps(result.to_json()) + "\n")
        print(
            f"[{time.monotonic() - start:6.0f} s] {result.verdict:16} {result.mutant.name}"
            + (f"  {result.message[:100]}" if result.verdict != "killed" else ""),
            file=sys.stderr,
            flush=True,
        )

    order = list(mutants)
    if args.budget is not None:  # a budget cuts a seeded sample, not the last overloads
        random.Random(args.seed).shuffle(order)
    results = campaign.run(order, progress)
    known = known_gaps(Path(args.known))
    header = (
        f"backend {args.backend or 'default'}; seed {args.seed}"
        + (f"; sample {args.sample}" if args.sample else "")
        + f"; control: {len(failing)} failing case(s); {time.monotonic() - start:.0f} s"
    )
    table = render(results, known, header)
    (out / "mutants.md").write_text(table)
    sys.stdout.write(table)
    if args.write:
        write_block(Path(args.write), TABLE_BEGIN, TABLE_END, table)
    new = new_misses(results, known)
    if args.check and (new or failing):
        print(
            f"{len(new)} miss(es) not listed as known gaps in {args.known}"
            + (f"; the control failed {len(failing)} case(s)" if failing else ""),
            file=sys.stderr,
        )
        return 1
    return 0


def _render(args: argparse.Namespace) -> int:
    folders = [Path(f) for f in args.render]
    missing = [str(f) for f in folders if not (f / "mutants.jsonl").is_file()]
    if missing:
        print(
            f"error: no mutants.jsonl in {', '.join(missing)} (a campaign's --out folder)",
            file=sys.stderr,
        )
        return 2
    results = load_results(folders)
    known = known_gaps(Path(args.known))
    table = render(results, known, f"rendered from {', '.join(args.render)}")
    sys.stdout.write(table)
    if args.write:
        write_block(Path(args.write), TABLE_BEGIN, TABLE_END, table)
    return 1 if args.check and new_misses(results, known) else 0


if __name__ == "__main__":
    sys.exit(main())

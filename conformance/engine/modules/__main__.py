"""One module case again, without pytest (the `script` of a record):

    python -m conformance.engine.modules nn.BatchNorm2d-float32-train-contiguous-0 \\
        [--backend MODULE[:FUNCTION]] [--device TYPE] [--diverged]
    python -m conformance.engine.modules --serve [--backend ...] [--device ...] [--cache-dir DIR]

loads the backend, runs the case on CPU and on the device, prints the verdict and exits 0
(passed) or 1. `--diverged` prints only the first op that diverged, as one JSON line; `--serve`
answers each `search` message on stdin with a `diverged` message (processes/messages.py: a run's
search child, engine/modules/divergence.py).
"""

from __future__ import annotations

import argparse
import json
import sys

from conformance.engine.backend import load_backend
from conformance.engine.modules.cases import ModuleCase
from conformance.engine.modules.divergence import decode_scales
from conformance.processes import messages
from conformance.processes.messages import MessageReader


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", nargs="?", help="a module case id")
    parser.add_argument("--backend", default=None, help="the backend module (MODULE:FUNCTION)")
    parser.add_argument("--device", default=None, help="the device type")
    parser.add_argument("--diverged", action="store_true", help="only search the diverged op")
    parser.add_argument("--serve", action="store_true", help="search the cases read from stdin")
    parser.add_argument("--scales", default="", help="the op specs' tolerance scales (JSON)")
    parser.add_argument("--cache-dir", default=None, help="the sample cache (engine/kept.py)")
    args = parser.parse_args(argv)
    backend = load_backend(args.backend, args.device)
    above = _autograd_kernels(backend.dispatch_key)
    scales = decode_scales(args.scales)
    if args.serve:
        requests = MessageReader(sys.stdin.fileno())
        while (request := requests.receive()) is not None:
            try:
                case = ModuleCase.parse(request["case"])
                found = _diverged(case, backend.device, above, scales, args.cache_dir)
            except Exception as exc:  # noqa: BLE001 - this search's failure, not the child's
                found = f"not found: {type(exc).__name__}: {str(exc)[:160]}"
            sys.stdout.flush()  # what the search printed comes before the answer
            messages.say(sys.stdout.fileno(), "diverged", op=found)
        return 0
    case = _parse(parser, args.case or "")
    if args.diverged:
        found = _diverged(case, backend.device, above, scales, args.cache_dir)
        print(json.dumps({"diverged": found}), flush=True)
        return 0
    device = backend.device
    from conformance.engine.modules.judge import NotComparable, judge

    try:
        verdict = judge(case, device, args.cache_dir)
    except NotComparable as exc:
        print(f"skipped: {case}: {exc}")
        return 0
    print(f"{'failed' if verdict.check else 'passed'}: {case}")
    if verdict.message:
        print(verdict.message)
    return 1 if verdict.check else 0


def _parse(parser: argparse.ArgumentParser, text: str) -> ModuleCase:
    try:
        return ModuleCase.parse(text)
    except ValueError as exc:
        parser.error(str(exc))
        raise


def _autograd_kernels(key: str) -> set[str]:
    """The base names of the ops the backend registered at its autograd key that draw no
    random numbers (those are run, not compared)."""
    from conformance.engine import discovery
    from conformance.engine.oracles import is_nondeterministic

    autograd = discovery.autograd_key(key)
    names = discovery.registered_overloads(autograd) if autograd else []
    return {
        name.split(".")[0] for name in names if not is_nondeterministic(discovery.resolve(name))
    }


def _diverged(
    case: ModuleCase, device: object, above: set[str], scales: dict, cache_dir: str | None = None
) -> str | None:
    from conformance.engine.modules.divergence import first_divergence
    from conformance.engine.modules.step import prepare, run_step

    prepared = prepare(case, cache_dir)
    _, seeds = run_step(prepared, "cpu")
    return first_divergence(prepared, device, seeds, above, scales)


if __name__ == "__main__":
    sys.exit(main())

"""The capability query: what the suite learns about a device, as JSON, without running a case.

    python -m conformance.profile                      # the autoloaded backend, or echo_npu
    python -m conformance.profile --backend my_npu     # any PrivateUse1 backend module
    python -m conformance.profile --backend my_npu:register --device my_npu
    python -m conformance.profile --backend lazy_backend:register --device lazy

Prints the device profile (engine/profile.py) a run would use: every fact with its value and
how it was learned (asked of torch, or probed as the run probes it: in a fresh interpreter, by
a child forked from it before it touched the device, and a second process that opens the
device meanwhile: engine/probe.py; this process never touches the device or its driver).
Also lists the checks the profile leaves out, and why. Answers within 30 s on any device.
Exit status 0; 2 with a one-line error for bad input.
"""

from __future__ import annotations

import argparse
import json
import sys

from conformance.engine.backend import load_backend
from conformance.engine.probe import probe_isolated
from conformance.engine.sample_run import checks_left_out
from conformance.errors import ConformanceUsageError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m conformance.profile",
        description="Print the device profile the conformance suite would use, as JSON.",
    )
    parser.add_argument(
        "--backend", help="MODULE or MODULE:FUNCTION (default: autoloaded backend, or echo_npu)"
    )
    parser.add_argument("--device", help="device type, where the module registers another")
    parser.add_argument("--heap-zones", default="auto", help="as the suite's --heap-zones")
    args = parser.parse_args(argv)
    try:
        backend = load_backend(args.backend, args.device)
    except ConformanceUsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    backend.heap_zones = args.heap_zones
    probe = probe_isolated(backend)
    profile = backend.declared_profile(ask_compiler=True).with_probe(probe.facts())
    out = {
        "backend": backend.spec,
        "how_loaded": backend.how_loaded,
        "hooks": backend.capabilities(),
        "profile": profile.to_json(),
        "checks_left_out": checks_left_out(profile),
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

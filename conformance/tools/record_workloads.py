"""Record the aten overloads the representative model workloads reach, for this torch.

    python -m conformance.tools.record_workloads          # conformance/workloads/torch-X.Y.txt
    python -m conformance.tools.record_workloads --check  # exit 1 if out of date

Runs the workloads of conformance/engine/workloads.py on CPU (no backend needed; the Qwen2
workload needs `transformers`, the `scenarios` extra) and writes the golden list that the
default run's fallback set is derived from. Run it for each new torch minor; review the diff.
"""

from __future__ import annotations

import argparse
import os
import sys

from conformance.engine import workloads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("--output", help="file to write (default: this torch's golden list)")
    opts = parser.parse_args(argv)
    path = opts.output or workloads.golden_path()
    try:
        text = workloads.golden_text(workloads.record())
    except ImportError as exc:
        print(f"record_workloads: {exc}; install the scenarios extra: pip install -e .[scenarios]")
        return 2
    old = open(path).read() if os.path.exists(path) else None
    if opts.check:
        if old != text:
            print(f"{path} is out of date: run python -m conformance.tools.record_workloads")
            return 1
        print(f"{path} is up to date ({len(text.splitlines())} overloads)")
        return 0
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {path} ({len(text.splitlines())} overloads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

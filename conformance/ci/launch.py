"""Run a command under a memory checker that must be in place before the process starts.

    python -m conformance.ci.launch --asan -- pytest conformance -k masked_fill
    python -m conformance.ci.launch --malloc-check -- pytest conformance

--asan preloads gcc's ASan runtime (required for an ASan-built backend in a stock Python;
`verify_asan_link_order=0` instead would run but miss real bugs) with detect_leaks=0.
--malloc-check preloads glibc's malloc debugging library with MALLOC_CHECK_=3, so an overflow of
a CPU temporary (cpu_fallback's copies, which device red zones cannot see) aborts at the next
free of that block; the crash isolation then reports it on the case that caused it.
"""

from __future__ import annotations

import argparse
import os
import sys

from conformance.engine.checkers import LaunchError, asan_runtime, malloc_debug_library
from conformance.processes import launch

__all__ = ["environment", "main"]


def environment(asan: bool, malloc_check: bool, base: dict[str, str]) -> dict[str, str]:
    """The environment for the command (base plus preloads and checker options)."""
    env = dict(base)
    preload = [p for p in env.get("LD_PRELOAD", "").split(":") if p]
    if asan:
        preload = asan_runtime() + preload  # the ASan runtime must come first
        options = env.get("ASAN_OPTIONS", "")
        if "detect_leaks" not in options:
            options = ":".join(x for x in (options, "detect_leaks=0") if x)
        env["ASAN_OPTIONS"] = options
    if malloc_check:
        preload.append(malloc_debug_library())
        env["MALLOC_CHECK_"] = "3"
    if preload:
        env["LD_PRELOAD"] = ":".join(preload)
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m conformance.ci.launch",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--asan", action="store_true", help="preload the ASan runtime")
    parser.add_argument(
        "--malloc-check",
        action="store_true",
        help="preload glibc's malloc debugging (MALLOC_CHECK_=3)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- command and arguments")
    opts = parser.parse_args(argv)
    command = opts.command[1:] if opts.command[:1] == ["--"] else opts.command
    if not command:
        parser.error("give the command to run after --, e.g. -- pytest conformance")
    try:
        env = environment(opts.asan, opts.malloc_check, dict(os.environ))
    except LaunchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if command[0] == "pytest":
        command = [sys.executable, "-m", "pytest", *command[1:]]
    launch.become(command, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())

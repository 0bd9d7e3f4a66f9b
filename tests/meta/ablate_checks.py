"""Switch each check off (or make a status path permissive) in turn and report which self-tests
notice (they must fail).

    python tests/meta/ablate_checks.py                 # every ablation in tests/meta/ablation.py
    python tests/meta/ablate_checks.py identity blame  # some
    python tests/meta/ablate_checks.py --list

For each name the self-tests below run with the check off (`ABLATE=<name>`, the plugin
tests/meta/ablation.py loaded through PYTEST_ADDOPTS so that the suites the self-tests start in
subprocesses have it off too). A check no self-test notices is reported as UNCAUGHT and the
script exits 1. A baseline run with nothing switched off must pass first.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.meta.ablation import ABLATIONS, ENV  # noqa: E402

SELF_TESTS = [
    "tests/engine/test_verdicts.py",
    "tests/engine/test_random_oracle.py",
    "tests/engine/test_gradients.py",
    "tests/engine/test_runner.py",
    "tests/engine/test_foundations.py",
    "tests/suite/test_catches_faults.py",
    "tests/suite/test_catches_bits.py",
    "tests/suite/test_computes_in_dtype.py",
    "tests/suite/test_first_calls.py",
    "tests/suite/test_verdict_faults.py",
    "tests/suite/test_results_and_expectations.py",
    "tests/engine/test_cpu_bugs.py",
    "tests/engine/test_parametric.py",
    "tests/measure/test_power.py",
    "tests/suite/test_crash_verdicts.py",
    "tests/suite/test_lazy_devices.py",
    "tests/suite/test_sticky_errors.py",
    "tests/suite/test_kept_memory.py",
    "tests/engine/test_syncing.py",
    "tests/suite/test_compile_mode.py",
    "tests/suite/test_environment_diff.py",
    "tests/engine/test_dynamic_shapes.py",
    "tests/scenarios/test_compiled_scenarios.py",
    "tests/suite/test_catches_sizes_and_arguments.py",
    "tests/engine/test_exactness.py",
    "tests/engine/test_arguments.py",
    "tests/engine/test_sizes.py",
    "tests/suite/test_heap_zones.py",
    "tests/suite/test_collectives.py",
    "tests/suite/test_runtime_contract.py",
]
# tests of crash isolation and repro commands check no verdict: left out to save time
DESELECT = "not repro and not sigkill and not segfault"


def run(name: str | None, workers: str) -> tuple[int, list[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONFORMANCE_", "ECHO_NPU_"))}
    env["PYTEST_ADDOPTS"] = "-p tests.meta.ablation"
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    if name:
        env[ENV] = name
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-rf", "-n", workers]
    cmd += ["-m", "slow or not slow"]  # the slow self-tests too (pyproject.toml leaves them out)
    start = time.time()
    args = [*cmd, "-k", DESELECT, *SELF_TESTS]
    proc = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True)
    failed = re.findall(r"^FAILED (\S+)", proc.stdout, flags=re.M)
    return proc.returncode, sorted(set(failed)), time.time() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="ablations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the ablations and exit")
    parser.add_argument("-n", default="2", help="pytest-xdist workers (default 2)")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(ABLATIONS))
        return 0
    unknown = [n for n in args.names if n not in ABLATIONS]
    if unknown:
        print(f"unknown ablation(s) {unknown}; valid: {', '.join(ABLATIONS)}", file=sys.stderr)
        return 2
    code, failed, secs = run(None, args.n)
    print(f"baseline (nothing off): exit {code}, {len(failed)} failed, {secs:.0f} s", flush=True)
    if code != 0:
        print("the self-tests fail with every check on: fix that first\n" + "\n".join(failed))
        return 1
    uncaught = []
    for name in args.names or list(ABLATIONS):
        code, failed, secs = run(name, args.n)
        status = "caught" if failed else "UNCAUGHT"
        if not failed:
            uncaught.append(name)
        print(f"{name:24s} {status:8s} by {len(failed)} self-test(s) ({secs:.0f} s)", flush=True)
        for test in failed:
            print(f"    {test}")
    if uncaught:
        print(f"no self-test notices: {', '.join(uncaught)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

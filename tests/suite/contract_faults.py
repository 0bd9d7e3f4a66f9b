"""Run the contract cases' functions in one process on echo_npu, once per fault of its runtime
(set at run time with `echo_npu.set_faults`) and RUNS times each, and print what failed as JSON:
{fault: {item: [failures naming the item, runs]}} ("" is the run without a fault).

    ECHO_NPU_ASYNC=1 python -m tests.suite.contract_faults 10          # every item
    ECHO_NPU_ASYNC=1 python -m tests.suite.contract_faults 3 FAULT=ITEM[,ITEM] ...
    ECHO_NPU_ASYNC=1 python -m tests.suite.contract_faults --no-hook 10   # set_delay hidden

With `--no-hook` the backend's set_delay hook is hidden, as on a backend that has none: the
streams are then held by calibrated work (engine/busy.py). Each item's verdict also says whether
it passed without observing a fence ("unobserved").

Used by tests/suite/test_runtime_contract.py (a few runs) and for the 10-of-10 figures of
docs/RUNTIME_CONTRACT.md; no pytest session: the functions get the `rt` object directly.
"""

from __future__ import annotations

import json
import sys

import echo_npu
import pytest

from conformance.contract import test_copies, test_device, test_streams
from conformance.contract.conftest import ContractBroken, Runtime
from conformance.engine import busy
from conformance.engine.backend import load_backend
from conformance.engine.runtime_contract import BY_NAME, ITEMS

MODULES = (test_device, test_streams, test_copies)


def run_item(backend, name: str) -> str:
    """'pass', 'unobserved: ...' (passed without seeing a fence), 'skip', 'fail' (a
    ContractBroken naming the item) or 'error: ...'."""
    item = BY_NAME[name]
    fn = next(getattr(m, item.test) for m in MODULES if hasattr(m, item.test))
    rt = Runtime(backend, item)
    rt.idle()
    try:
        fn(rt)
    except ContractBroken as exc:
        return "fail" if str(exc).startswith(f"[contract {name}]") else f"error: {exc}"
    except pytest.skip.Exception:
        return "skip"
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return f"error: {type(exc).__name__}: {exc}"
    return f"unobserved: {busy.said(rt.unobserved)}" if rt.unobserved else "pass"


def hide_hook(backend) -> None:
    """The backend as one without the set_delay hook."""
    hook = backend.hook
    backend.hook = lambda name: None if name == "set_delay" else hook(name)


def main(argv: list[str]) -> int:
    no_hook = "--no-hook" in argv
    argv = [a for a in argv if a != "--no-hook"]
    runs = int(argv[0])
    plan = {"": [i.name for i in ITEMS]}
    for arg in argv[1:]:
        fault, _, items = arg.partition("=")
        plan[fault] = items.split(",") if items else [i.name for i in ITEMS]
    if len(argv) == 1:
        plan |= {f: [i.name for i in ITEMS] for f in FAULTS}
    backend = load_backend("echo_npu")
    if no_hook:
        hide_hook(backend)
    out: dict[str, dict[str, list]] = {}
    for fault, names in plan.items():
        echo_npu.set_faults([fault] if fault else [])
        seen: dict[str, list] = {n: [0, 0, []] for n in names}
        for _ in range(runs):
            for name in names:
                verdict = run_item(backend, name)
                seen[name][1] += 1
                seen[name][0] += verdict == "fail"
                if verdict not in ("pass", "fail", "skip") and verdict not in seen[name][2]:
                    seen[name][2].append(verdict[:300])
        echo_npu.set_faults([])
        out[fault] = seen
    print("RESULT " + json.dumps(out))
    return 0


FAULTS = (
    "nonblocking_d2h_unfenced",
    "event_sync_early",
    "record_stream_ignored",
    "guard_no_switch",
    "set_stream_ignored",
    "pinned_refused",
    "memory_stats_zero",
    "copy_on_default_stream",
    "side_stream_early",
    "sync_current_stream_only",
    "stats_stale",
    "seed_only_restore",
)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A wrapper around the loaded backend, named by `CONFORMANCE_BACKEND_WRAPPER=MODULE:FUNCTION`.

Every process of a run that loads the backend (the pytest process, spawned runners, probes,
collectives ranks, the divergence search) calls `FUNCTION(backend)` right after loading it, so a
tool that changes the device's kernels from Python (the mutation campaign,
`conformance/measure/mutants/`) changes them on the path the run takes, on any backend, without
touching its source. Forked children inherit what the parent installed. Unset: nothing is done.
The variable is read, never set, here: it reaches children through the environment they inherit.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from conformance.errors import ConformanceUsageError

VARIABLE = "CONFORMANCE_BACKEND_WRAPPER"


def apply(backend: Any) -> str:
    """Call the wrapper named in the environment with `backend` (once per process and backend);
    its spec, or "" when none is named."""
    spec = os.environ.get(VARIABLE, "").strip()
    if not spec or getattr(backend, "wrapped_by", "") == spec:
        return spec
    module_name, _, function = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), function or "wrap")
    except (ImportError, AttributeError) as exc:
        raise ConformanceUsageError(
            f"{VARIABLE}={spec}: {type(exc).__name__}: {exc}; name MODULE:FUNCTION of an "
            "importable module, or unset it"
        ) from None
    try:
        fn(backend)
    except ConformanceUsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - the wrapper's own error, in one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConformanceUsageError(f"{VARIABLE}={spec}: {spec}() raised {first}") from None
    return spec

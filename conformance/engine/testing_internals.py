"""Importing torch's testing internals (`torch.testing._internal`: OpInfo's op_db, ModuleInfo's
module_db) without asking the device under test.

`common_utils`, which every one of them imports, asks the PrivateUse1 backend's device module
`is_available()` at import (TEST_PRIVATEUSE1, torch >= 2.1). A runtime may start its threads
there: an OpenCL ICD such as pocl starts its device threads on the first platform query
(torch_opencl's `is_available()` counts devices). The suite imports these modules for CPU work
(sample captures, module samples) in processes that must stay free to fork and never touch the
device (the pytest process before it forks its runner zygote, task zygotes); one such thread
made each of them refuse every later fork. The suite's CPU work needs no answer from the device,
so the import is made with torch's `_is_privateuse1_backend_available` answering False (the
modules that bound that name get torch's function back after it: only what the import computed
keeps the answer: common_utils' TEST_PRIVATEUSE1, common_device_type's `device_type_test_bases`
without PrivateUse1TestBase, so PyTorch-style device tests are never instantiated in a process
of the suite); a module imported earlier (the user's own code) is left as it is.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from types import ModuleType

INTERNAL = "torch.testing._internal"
COMMON_UTILS = f"{INTERNAL}.common_utils"


def import_testing(name: str) -> ModuleType:
    """`torch.testing._internal.<name>` (or a full module name), imported without asking the
    device under test whether it is available (see the module docstring)."""
    full = name if name.startswith("torch.") else f"{INTERNAL}.{name}"
    with _device_unasked():
        return importlib.import_module(full)


@contextlib.contextmanager
def _device_unasked() -> Iterator[None]:
    if COMMON_UTILS in sys.modules:  # imported already: nothing left to ask at import
        yield
        return
    import torch._utils as utils

    asked = getattr(utils, "_is_privateuse1_backend_available", None)
    if asked is None:  # a torch that does not ask
        yield
        return
    utils._is_privateuse1_backend_available = _not_asked
    try:
        yield
    finally:
        utils._is_privateuse1_backend_available = asked
        for name, module in list(sys.modules.items()):  # common_device_type asks later too
            bound = vars(module) if name.startswith(INTERNAL) and module is not None else {}
            if bound.get("_is_privateuse1_backend_available") is _not_asked:
                bound["_is_privateuse1_backend_available"] = asked


def _not_asked() -> bool:
    return False

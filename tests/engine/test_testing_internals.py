"""torch's testing internals imported without asking the device under test
(engine/testing_internals.py): seen with torch_opencl on pocl, whose `is_available()` starts the
OpenCL runtime's device threads. common_utils asks it at import (TEST_PRIVATEUSE1), so OpInfo's
op_db, imported to capture samples, left the pytest process and the task zygote with threads:
neither could fork again (the runner zygote was spawned instead, and every integer capture of a
cold sample cache imported op_db anew)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import clean_env

REPO = Path(__file__).resolve().parents[2]

#: a PrivateUse1 device whose is_available() starts a thread, as pocl's platform query does;
#: then torch's testing internals imported as argv[1] says; prints the threads and what
#: common_utils and common_device_type were told
SCRIPT = """
import os, sys, threading
import torch
import torch.utils.backend_registration as registration

class ThreadOnQuery:
    @staticmethod
    def is_available():
        threading.Thread(target=threading.Event().wait, daemon=True).start()
        return True
    @staticmethod
    def device_count():
        return 1

registration.rename_privateuse1_backend("querynpu")
torch._register_device_module("querynpu", ThreadOnQuery)
if sys.argv[1] == "suite":
    from conformance.engine.testing_internals import import_testing
    import_testing("common_methods_invocations")
else:
    import torch.testing._internal.common_methods_invocations
from torch.testing._internal import common_device_type, common_utils
import torch._utils
print(len(os.listdir("/proc/self/task")), common_utils.TEST_PRIVATEUSE1,
      common_device_type._is_privateuse1_backend_available is
      torch._utils._is_privateuse1_backend_available)
"""


@pytest.mark.parametrize("how", ["suite", "plain"])
def test_op_db_is_imported_without_asking_the_device(how):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, how],
        cwd=REPO,
        env=clean_env(  # no driver threads of a visible GPU either (a CUDA build of torch)
            {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
        ),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    threads, told, restored = done.stdout.split()
    if how == "plain":  # the import alone asks, and threads start (what the suite avoids)
        assert int(threads) > 1 and told == "True"
    else:
        assert (threads, told) == ("1", "False")
    assert restored == "True"  # common_device_type asks torch's own function again

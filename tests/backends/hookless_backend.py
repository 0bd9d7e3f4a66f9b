"""echo_npu with none of the suite's optional hooks (docs/BACKEND_PROTOCOL.md), as a backend the
suite did not write: importing it registers echo_npu's device 'npu' and its kernels, and the
module the suite is given has no `set_delay`, `check_memory`, `set_fallback_routes`, ... With
`ECHO_NPU_ASYNC=1` the contract's and the -asynchronous mode's streams are then held by
calibrated standard work (engine/busy.py), as on a real device without a delay injector.

    PYTHONPATH=tests/backends pytest conformance/contract --backend hookless_backend --device npu
"""

import echo_npu  # noqa: F401 - registers the device and its kernels

"""echo_npu without the suite's hooks whose events time the host, not the device: elapsed_time
reports when the host enqueued the two records (well under a millisecond), whatever work ran on
the device between them, as a runtime that stamps events at submission would (issue 79, hole
5: under calibrated-work holds the contract's event-elapsed-time passed it). `torch.Event` is
replaced by a subclass for the life of the process: a test backend only.

    ECHO_NPU_ASYNC=1 PYTHONPATH=tests/backends pytest conformance/contract \\
        --backend host_timed_backend --device npu -k elapsed
"""

import time

import echo_npu  # noqa: F401 - registers the device and its kernels
import torch

_Event = torch.Event


class HostTimedEvent(_Event):
    def record(self, stream=None):
        self._host_ms = time.perf_counter() * 1000.0
        return super().record(stream) if stream is not None else super().record()

    def elapsed_time(self, end):
        return end._host_ms - self._host_ms


torch.Event = HostTimedEvent

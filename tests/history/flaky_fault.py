"""A flaky fault, as the results store sees one: `-p tests.history.flaky_fault` switches echo_npu's
`neg_signed_zero` on through `set_faults`, which run.json's environment does not record, so the
run is the same configuration as one without it (as a race or an uninitialised read is)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    import echo_npu

    echo_npu.set_faults([*echo_npu.get_faults(), "neg_signed_zero"])  # beside ECHO_NPU_FAULTS

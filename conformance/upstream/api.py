"""The torch versions whose device-generic test configuration API the generator knows.

`DeviceTypeTestBase.set_test_configs(op_overrides=, op_allowlist=, test_exclusions=)` arrived in
torch 2.13; 2.14 added the dtype form of `test_exclusions` (for @dtypes-generated variants);
2.15 added the `Capability` namespace, `@requires_capabilities` and a test base's
`_capabilities()`. A version outside this table gets a one-line error: its keywords are unknown,
and a configuration its torch ignores would excuse nothing without a word.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType

from conformance.errors import ConformanceUsageError
from conformance.record import torch_minor

__all__ = ("KNOWN", "TestConfigApi", "api_for")


@dataclass(frozen=True)
class TestConfigApi:
    """What one torch minor's `set_test_configs` takes."""

    minor: str
    exclusion_dtypes: bool  # test_exclusions {"Class": {"test": {"dtypes": [...]}}}
    capabilities: bool  # Capability + PrivateUse1TestBase._capabilities()


KNOWN = MappingProxyType(
    {
        "2.13": TestConfigApi("2.13", exclusion_dtypes=False, capabilities=False),
        "2.14": TestConfigApi("2.14", exclusion_dtypes=True, capabilities=False),
        "2.15": TestConfigApi("2.15", exclusion_dtypes=True, capabilities=True),
    }
)


def api_for(version: str) -> TestConfigApi:
    """The API of `version`'s torch, or a one-line error naming the versions known."""
    minor = torch_minor(version)
    if not re.fullmatch(r"\d+\.\d+", minor):
        raise ConformanceUsageError(
            f"the results name no torch version ({version!r} in run.json): measure again"
        )
    api = KNOWN.get(minor)
    if api is None:
        known = ", ".join(KNOWN)
        first = next(iter(KNOWN))
        why = (
            f"has no set_test_configs (added in torch {first})"
            if tuple(int(p) for p in minor.split(".")) < tuple(int(p) for p in first.split("."))
            else "has a test-config API this generator does not know"
        )
        raise ConformanceUsageError(
            f"torch {version} {why}: upstream configurations are written for torch {known}; "
            "measure with one of those"
        )
    return api

"""Manifests: matching, allocator filters, and one-line errors for every malformed input."""

import pytest

from conformance.errors import ConformanceUsageError
from conformance.harness.expectations import load_manifest

GOOD = """
[[entry]]
pattern = "sum.dim_IntList-float16-*"
status = "xfail"
category = "backend-bug"
reason = "accumulates in half"

[[entry]]
pattern = "masked_fill_.*-transposed-*"
status = "skip"
category = "unsupported"
reason = "only in guard mode"
allocator = "guard"
"""


def _write(tmp_path, text):
    p = tmp_path / "m.toml"
    p.write_text(text)
    return str(p)


def test_match_first_entry_and_allocator_filter(tmp_path):
    m = load_manifest([_write(tmp_path, GOOD)])
    entry = m.match("sum.dim_IntList-float16-contiguous-native")
    assert entry.status == "xfail" and entry.source.endswith("m.toml:3")
    assert m.match("masked_fill_.Scalar-float32-transposed-native", "malloc") is None
    assert m.match("masked_fill_.Scalar-float32-transposed-native", "guard").status == "skip"
    assert m.match("add.Tensor-float32-contiguous-native") is None


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "[[entry]]\npattern = 'x'\nstatus = 'maybe'\ncategory = 'flaky'\nreason = 'r'",
            "status 'maybe' is not one of xfail, skip, crash",
        ),
        ("[[entry]]\npattern = 'x'\ncategory = 'nope'\nreason = 'r'", "category 'nope'"),
        ("[[entry]]\npattern = 'x'\ncategory = 'flaky'", "needs a 'reason'"),
        ("[[entry]]\ncategory = 'flaky'\nreason = 'r'", "needs a non-empty 'pattern'"),
        ("[[entry]]\npattern = 'x'\ncategory = 'flaky'\nreason = 'r'\ncolour = 1", "colour"),
        ("[[entry]\npattern = ", "malformed TOML"),
        ("[[xfail]]\npattern = 'x'", "unknown top-level key"),
    ],
)
def test_malformed_manifests_are_one_line_errors(tmp_path, text, message):
    with pytest.raises(ConformanceUsageError, match=message) as info:
        load_manifest([_write(tmp_path, text)])
    assert "\n" not in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConformanceUsageError, match="does not exist"):
        load_manifest([str(tmp_path / "nope.toml")])

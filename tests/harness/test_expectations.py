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
            "status 'maybe' is not one of xfail, unsupported, skip, crash",
        ),
        ("[[entry]]\npattern = 'x'\ncategory = 'nope'\nreason = 'r'", "category 'nope'"),
        ("[[entry]]\npattern = 'x'\ncategory = 'flaky'", "needs a 'reason'"),
        ("[[entry]]\ncategory = 'flaky'\nreason = 'r'", "needs a non-empty 'pattern'"),
        ("[[entry]]\npattern = 'x'\ncategory = 'flaky'\nreason = 'r'\ncolour = 1", "colour"),
        ("[[entry]\npattern = ", "malformed TOML"),
        ("[[xfail]]\npattern = 'x'", "unknown top-level key"),
        ("[[entry]]\npattern = []\ncategory = 'flaky'\nreason = 'r'", "non-empty 'pattern'"),
        ("[[entry]]\npattern = ['a', '']\ncategory = 'flaky'\nreason = 'r'", "non-empty"),
        ("unsupported_dtypes = ['flaot64']", "unsupported_dtypes must list dtype names"),
        ("unsupported_dtypes = 'float64'", "unsupported_dtypes must list dtype names"),
    ],
)
def test_malformed_manifests_are_one_line_errors(tmp_path, text, message):
    with pytest.raises(ConformanceUsageError, match=message) as info:
        load_manifest([_write(tmp_path, text)])
    assert "\n" not in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConformanceUsageError, match="does not exist"):
        load_manifest([str(tmp_path / "nope.toml")])


def test_one_entry_may_list_several_patterns_and_says_which_matched(tmp_path):
    text = (
        '[[entry]]\npattern = ["mul.Tensor-float32-*", "add.Tensor-*-native"]\n'
        'status = "unsupported"\nreason = "no kernel"\n'
    )
    m = load_manifest([_write(tmp_path, text)])
    (entry,) = m.entries
    assert entry.category == "unsupported"  # the default of an unsupported entry
    assert m.match("add.Tensor-int64-offset-native") is entry
    assert entry.matching("add.Tensor-int64-offset-native") == "add.Tensor-*-native"
    assert m.match("add.Tensor-int64-offset-fallback") is None


def test_a_backend_without_a_dtype_declares_it_in_one_line(tmp_path):
    m = load_manifest([_write(tmp_path, 'unsupported_dtypes = ["float64", "torch.complex64"]\n')])
    assert set(m.unsupported_dtypes) == {"float64", "complex64"}
    assert m.unsupported_dtypes["float64"].endswith("m.toml:1") and m.entries == []


SCREENED = """
[[entry]]
pattern = "scenario:test_generate[attention_mask]"
status = "xfail"
category = "backend-bug"
reason = "a name with brackets, matched as written"

[[entry]]
pattern = ["*native_batch_norm*-float32-*-native-compile", "add.Tensor-float1[6]-*"]
status = "xfail"
category = "backend-bug"
reason = "globs: a leading star, a character class"

[[entry]]
pattern = "add.Tensor-float16-offset-?ative"
status = "skip"
category = "unsupported"
reason = "shadowed by the entry before it (file order decides)"

[[entry]]
pattern = "unfold-*-sliced-fallback"
status = "skip"
category = "unsupported"
reason = "only in guard mode"
allocator = "guard"
"""


def test_one_screen_for_every_pattern_finds_what_the_entries_find(tmp_path):
    """`Manifest.match` first asks one regex of every pattern whether any could match; the
    entry it then finds is the one `Manifest.scan` (the entries in file order) finds, for
    literal names with brackets, globs with classes and leading stars, shadowed entries and
    allocators."""
    m = load_manifest([_write(tmp_path, SCREENED)])
    ids = [
        "scenario:test_generate[attention_mask]",
        "scenario:test_generate[a]",
        "scenario:test_generate",
        "_native_batch_norm_legit.no_stats-float32-transposed-native-compile",
        "native_batch_norm-float32-contiguous-fallback-compile",
        "add.Tensor-float16-offset-native",
        "add.Tensor-float32-offset-native",
        "add.Tensor-float16",
        "unfold-float32-sliced-fallback",
        "unfold-float32-sliced-native",
        "",
    ]
    found = 0
    for case_id in ids:
        for allocator in ("", "guard"):
            entry = m.match(case_id, allocator)
            assert entry is m.scan(case_id, allocator), (case_id, allocator)
            found += entry is not None
    assert found == 7  # the ids above that some entry matches, under each allocator
    assert m.match("add.Tensor-float16-offset-native").reason.startswith("globs")

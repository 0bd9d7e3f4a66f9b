"""engine/coverage.py: every selected overload is tested or untested for a named reason."""

from __future__ import annotations

import torch

from conformance.engine.coverage import compute

F32, I64, BOOL = torch.float32, torch.int64, torch.bool


def _samples(table: dict[tuple[str, torch.dtype], int]):
    def samples_of(overload: str, dtype: torch.dtype) -> list:
        if overload == "broken":
            raise ValueError("sample builder broke\nsecond line")
        return [object()] * table.get((overload, dtype), 0)

    return samples_of


def test_untested_partial_errors_schemaless_and_fallback_only() -> None:
    table = {("abs", F32): 2, ("abs", I64): 1, ("nonzero", F32): 3}
    cov = compute(
        ["abs", "broken", "set_", "conv"],
        ["abs", "broken", "set_", "conv"],
        [F32, I64, BOOL],
        lambda o: (F32,) if o == "conv" else None,
        _samples(table),
        lambda o: f"no samples for {o}",
        schemaless=["isfinite.out"],
        has_fallback=True,
        fallback_only=["nonzero", "cumsum"],
        fallback_selected=["nonzero", "cumsum"],
    )
    assert cov.tested == ["abs", "broken"]  # a broken sample source is reported by its cases
    assert cov.untested == {"set_": "no samples for set_", "conv": "no samples for conv"}
    assert cov.no_samples["abs"] == ["bool"] and cov.missing("abs", "bool")
    assert not cov.missing("abs", "float32")
    assert cov.sample_errors == {"broken": "ValueError: sample builder broke"}
    assert cov.fallback_tested == ["nonzero"]  # cumsum has no samples: not tested
    text = "\n".join(cov.header_lines())
    assert "coverage: 2 of 4 registered overloads tested" in text
    assert "untested, no samples for set_: set_" in text
    assert "no samples for some dtypes (not collected): abs (bool)" in text
    assert "(no schema, never called, not tested): isfinite.out" in text
    assert "2 aten overloads with OpInfo samples reach the backend only through its boxed " in text
    assert "1 tested" in text


def test_dtypes_the_spec_does_not_allow_and_no_fallback() -> None:
    cov = compute(
        ["conv", "abs"],
        ["conv"],
        [I64],
        lambda o: (F32,),
        _samples({}),
        lambda o: "never asked",
    )
    assert cov.untested == {"conv": "its op spec allows none of the requested dtypes (--dtypes)"}
    text = "\n".join(cov.header_lines())
    assert "1 not selected (--ops or -k)" in text and "no boxed fallback" in text

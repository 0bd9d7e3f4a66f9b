"""Whether a modelled upstream test (models.py) sees a failure the run measured.

An expected failure is written only where the test certainly fails: it makes the failing call
on the inputs it uses, in a dtype it runs, and compares what failed.

- The case ran as the test's inputs run: the native route; the contiguous layout (the
  non-contiguous one for a test of non-contiguous samples); the ordinary samples or the OpInfo's
  reference, promotion or special inputs (not the suite's sizes, arguments or models).
- Tests of the OpInfo's own inputs: the failing call's signature (`  sample: ...` of the message)
  is one the test makes, on a functional overload; a failure of the special values only where
  the test makes that call on inputs holding such values (NaN or infinite ones where the failing
  element is NaN or infinite).
- Tests of generated inputs (reference numerics) run shapes of their own, so only what does not
  depend on shapes: a kernel missing for the dtype, or a special-value failure at a NaN or
  infinite element whose ordinary twin passed (the values, not the shapes, fail), seen by the
  tests whose inputs hold NaN and infinities.
- A failure of values beyond the test's tolerance at the first differing element the message
  names; a dtype, shape, error or missing kernel fails any comparison.
- A test against itself (non-contiguous samples) only where the contiguous twin passed: the
  device shows the failure against itself.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from conformance.record import CaseId, CaseRecord, Status
from conformance.upstream.models import UpstreamTest
from conformance.upstream.opinfos import COMPARED, OpInfoView, is_functional, sample_signature

__all__ = ("Seer", "Sight", "failing_sample", "first_element")

#: value sets whose inputs are the OpInfo's own (ordinary samples, reference inputs)
OPINFO_VALUES = ("", "reference", "promotion", "special")

_SAMPLE = re.compile(r"^\s*sample: (.*) \(layout ", re.M)
_FIRST = re.compile(r"first at \[[^\]]*\]: device (\S+) vs cpu (\S+?);?$", re.M)


@dataclass(frozen=True)
class Sight:
    """A test's view of one failure: `seen` True (an entry), False (not seen: `why`), or None
    (undecidable from the record: `why`)."""

    seen: bool | None
    why: str = ""


def failing_sample(message: str) -> str | None:
    """The signature of the call a failure message names (`  sample: ...`), if any."""
    m = _SAMPLE.search(message)
    return sample_signature(m.group(1)) if m else None


def _number(text: str) -> complex | None:
    try:
        return complex(text.strip("(),"))
    except ValueError:
        return {"True": 1, "False": 0}.get(text)


def first_element(record: CaseRecord) -> tuple[complex, complex] | None:
    """(device, cpu) of the first differing element the message names."""
    m = _FIRST.search(record.message or "")
    if not m:
        return None
    device, cpu = _number(m.group(1)), _number(m.group(2))
    return None if device is None or cpu is None else (device, cpu)


def _finite(z: complex) -> bool:
    return math.isfinite(z.real) and math.isfinite(z.imag)


def _differs(device: complex, cpu: complex, atol: float, rtol: float) -> bool:
    """Whether `device` differs from `cpu` beyond atol + rtol * |cpu| (NaN equal to NaN)."""
    for d, c in ((device.real, cpu.real), (device.imag, cpu.imag)):
        if math.isnan(d) or math.isnan(c):
            if math.isnan(d) != math.isnan(c):
                return True
        elif (math.isinf(d) or math.isinf(c)) and d != c:
            return True
    return _finite(device) and _finite(cpu) and abs(device - cpu) > atol + rtol * abs(cpu)


class Seer:
    """Judges failures against the modelled tests; `records` are the run's, by case id."""

    def __init__(
        self,
        view: OpInfoView,
        records: Mapping[str, CaseRecord],
        registered: Collection[str] = (),
    ) -> None:
        self.view = view
        self.records = records
        self.registered = frozenset(registered)  # the overloads the backend has kernels for

    def _passed(self, case: CaseId) -> bool:
        twin = self.records.get(str(case))
        return twin is not None and twin.status == Status.PASSED

    def sees(self, test: UpstreamTest, op: str, record: CaseRecord, case: CaseId) -> Sight:
        """Whether `test` of OpInfo `op` fails on the failure `record` (of `case`) shows."""
        check = str(record.check)
        if check not in COMPARED and not (check == "inplace" and test.inputs == "sample-inplace"):
            return Sight(False, f"its {check} check is not one a comparison of outputs sees")
        if case.path != "native":
            return Sight(False, f"the {case.path} route")
        wanted = ["contiguous"]
        if test.inputs == "sample-noncontiguous":  # it calls the contiguous sample first
            raised = check in ("error", "unsupported")
            wanted = ["noncontiguous", "contiguous"] if raised else ["noncontiguous"]
        if case.layout not in wanted:
            return Sight(False, f"the {case.layout} layout (the test runs {wanted[0]} inputs)")
        if case.values == "grad":
            return Sight(False, "a backward failure: gradients are not modelled (upstream, "
                         "test_noncontiguous_samples compares them too)")  # fmt: skip
        if case.values not in OPINFO_VALUES:
            return Sight(False, f"the suite's own {case.values} cases")
        if test.inputs == "sample-inplace":
            return self._variant(test, op, record, case)
        if not is_functional(case.overload):
            return Sight(False, "an in-place or out= overload (its OpInfo test calls the function)")
        if test.inputs == "generated":
            return self._generated(test, op, record, case)
        sample = failing_sample(record.message or "")
        if sample is None:
            return Sight(None, "the failure names no sample")
        first = first_element(record)
        holding = ""
        if case.values == "special":
            holding = "special" if first and all(map(_finite, first)) else "nonfinite"
        calls = self.view.calls(op, case.dtype, test.inputs)
        if not calls.made(sample, values=check == "values", holding=holding):
            held = f" on inputs holding {holding} values" if holding else ""
            return Sight(False, f"the test makes no call {sample}{held}")
        if test.compares == "self" and check not in ("error", "unsupported"):
            twin = CaseId(case.overload, case.dtype, "contiguous", case.path, case.values)
            if not self._passed(twin):
                return Sight(False, f"{twin} failed too: the device may agree with itself")
        return self._beyond(test, record, case, first)

    def _variant(self, test: UpstreamTest, op: str, record: CaseRecord, case: CaseId) -> Sight:
        """test_variant_consistency_eager: the function against its in-place variant (and the
        method, the same call) on the sample inputs, on the device. It fails where either call
        raises, where the in-place result is not its input (`inplace`), and where the two
        disagree: a failing in-place case whose function passed, or a failing function whose
        in-place variant passed or is served by CPU's kernel (no kernel of the backend's)."""
        if case.values:
            return Sight(False, f"the {case.values} inputs (the test runs the sample inputs)")
        sample = failing_sample(record.message or "")
        if sample is None:
            return Sight(None, "the failure names no sample")
        if not self.view.calls(op, case.dtype, test.inputs).made(sample):
            return Sight(False, f"the test makes no call {sample}")
        check = str(record.check)
        if check in ("error", "unsupported", "inplace"):
            return Sight(True)
        name, dot, tag = case.overload.partition(".")
        if name.endswith("_"):  # the in-place variant failed: the function must have passed
            twin = CaseId(f"{name[:-1]}{dot}{tag}", case.dtype, case.layout, case.path)
            if not self._passed(twin):
                return Sight(False, f"{twin} did not pass: the variants may agree")
        else:  # the function failed: the in-place variant must compute what CPU does
            if not self.view.has_inplace(op):
                return Sight(False, "the OpInfo has no in-place variant to disagree with")
            twin = CaseId(f"{name}_{dot}{tag}", case.dtype, case.layout, case.path)
            served = str(twin.overload) not in self.registered and bool(self.registered)
            if not (served or self._passed(twin)):
                return Sight(False, f"{twin} did not pass: the variants may agree")
        return self._beyond(test, record, case, first_element(record))

    def _generated(self, test: UpstreamTest, op: str, record: CaseRecord, case: CaseId) -> Sight:
        if not self.view.reaches(op, case.overload, case.dtype):
            return Sight(False, f"the OpInfo's own calls do not reach {case.overload}")
        if str(record.check) == "unsupported":
            return Sight(True)  # no kernel for the dtype: every call fails, whatever its shape
        first = first_element(record)
        if str(record.check) != "values" or case.values != "special" or first is None:
            return Sight(False, "the test runs shapes of its own: only a missing kernel or a "
                         "special-value failure is known to reach them")  # fmt: skip
        if all(map(_finite, first)):
            return Sight(False, "a failure at a finite element: which special value is not known")
        if not test.nonfinite:
            return Sight(False, "its inputs hold no NaN or infinity")
        ordinary = CaseId(case.overload, case.dtype, case.layout, case.path)
        if not self._passed(ordinary):
            return Sight(False, f"{ordinary} did not pass: the failure may depend on shapes")
        return self._beyond(test, record, case, first)

    @staticmethod
    def _beyond(
        test: UpstreamTest, record: CaseRecord, case: CaseId, first: tuple[complex, complex] | None
    ) -> Sight:
        if str(record.check) != "values":
            return Sight(True)  # a dtype, shape, error or missing kernel fails any comparison
        if first is None:
            return Sight(None, "the message names no element to judge by")
        rtol, atol = test.tolerance_for(case.dtype)
        if _differs(*first, atol, rtol):
            return Sight(True)
        return Sight(False, "within the test's tolerance: its test likely passes")

"""The OpInfo tests (targets) an expected failure or a tolerance applies to, and what each sees.

A template is a test method of PyTorch's (`Class.test_name`) with the tolerance its comparison
uses. An expected failure is written for a template only where the failing call certainly fails
there too: a missing kernel, an error, a wrong dtype or shape, or a value whose first differing
element (as the failure message names it: device value vs CPU's) lies beyond the template's
tolerance; a finding within it would make a strict expected failure pass unexpectedly.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from conformance.errors import ConformanceUsageError
from conformance.record import CaseRecord
from conformance.upstream.opinfos import default_tolerance, sample_signature

__all__ = ("DEFAULT_TEMPLATES", "KNOWN_TEMPLATES", "Template", "failing_sample", "sees", "template")


@dataclass(frozen=True)
class Template:
    """One test method and the tolerance of its comparison (None: assertEqual's default)."""

    cls: str
    test: str
    atol: float | None = None
    rtol: float | None = None
    note: str = ""

    @property
    def name(self) -> str:
        return f"{self.cls}.{self.test}"

    def tolerance(self, dtype: str) -> tuple[float, float]:
        """(rtol, atol) of its comparison in `dtype`: its own where it passes them to
        assertEqual (used as given, whatever the dtype), else assertEqual's default."""
        if self.atol is not None and self.rtol is not None:
            return self.rtol, self.atol
        return default_tolerance(dtype)


#: templates whose comparison the generator knows (test/test_ops.py of torch 2.13-2.15)
KNOWN_TEMPLATES = {
    t.name: t
    for t in (
        Template(
            "TestCommon",
            "test_compare_cpu",
            atol=1e-3,
            rtol=1e-3,
            note="the OpInfo's reference inputs on the device against CPU, atol = rtol = 1e-3; "
            "upstream it is @onlyOn(['cuda', 'xpu']) and @slowTest: on a PrivateUse1 device it "
            "runs with bypass_device_restrictions (--bypass-device-restrictions) and "
            "PYTORCH_TEST_WITH_SLOW=1",
        ),
    )
}
DEFAULT_TEMPLATES = (KNOWN_TEMPLATES["TestCommon.test_compare_cpu"],)

_SAMPLE = re.compile(r"^\s*sample: (.*) \(layout ", re.M)
_FIRST = re.compile(r"first at \[[^\]]*\]: device (\S+) vs cpu (\S+?);?$", re.M)


def template(text: str) -> Template:
    """`Class.test_name` -> a template (a known one keeps its tolerance)."""
    cls, sep, test = text.partition(".")
    if not sep or not cls or not test.startswith("test"):
        raise ConformanceUsageError(f"--test {text!r}: expected Class.test_name")
    return KNOWN_TEMPLATES.get(text, Template(cls, test))


def failing_sample(message: str) -> str | None:
    """The signature of the call a failure message names (`  sample: ...`), if any."""
    m = _SAMPLE.search(message)
    return sample_signature(m.group(1)) if m else None


def _number(text: str) -> complex | None:
    try:
        return complex(text.strip("(),"))
    except ValueError:
        return {"True": 1, "False": 0}.get(text)


def _beyond(device: complex, cpu: complex, atol: float, rtol: float) -> bool:
    """Whether `device` differs from `cpu` beyond atol + rtol * |cpu| (NaN equal to NaN)."""
    parts = [(device.real, cpu.real), (device.imag, cpu.imag)]
    for d, c in parts:
        if math.isnan(d) or math.isnan(c):
            if math.isnan(d) != math.isnan(c):
                return True
            continue
        if math.isinf(d) or math.isinf(c):
            if d != c:
                return True
            continue
    finite = all(math.isfinite(x) for pair in parts for x in pair)
    return finite and abs(device - cpu) > atol + rtol * abs(cpu)


def sees(t: Template, record: CaseRecord, dtype: str) -> bool | None:
    """Whether the template certainly fails on the call the record failed (None: the message
    names no element to judge by)."""
    if str(record.check) != "values":
        return True  # a missing kernel, an error, a wrong dtype or shape fails any comparison
    m = _FIRST.search(record.message or "")
    device, cpu = (_number(m.group(1)), _number(m.group(2))) if m else (None, None)
    if device is None or cpu is None:
        return None
    rtol, atol = t.tolerance(dtype)
    return _beyond(device, cpu, atol, rtol)

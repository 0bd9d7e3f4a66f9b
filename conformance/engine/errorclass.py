"""Classify an exception raised by an op: what kind of error it is, not which Python type.

Error parity compares classes: CPU's `RuntimeError("... can't be cast to the desired output
type Long")` and a device's `TypeError`-free rewording of it are both ``dtype``; a device's
`NotImplementedError` is ``not_implemented`` and never matches anything (it is `unsupported`),
although it is a subclass of `RuntimeError`. Classes, most specific first:

- ``not_implemented``: no kernel (`NotImplementedError`, the dispatcher's "Could not run
  'aten::x' with arguments from the 'B' backend", "not implemented for 'Half'")
- ``internal``: an internal assert of torch or the backend ("INTERNAL ASSERT FAILED")
- ``layout``: a precondition on memory layout only ("Expected X.is_contiguous() to be true")
- ``device``: tensors on different devices, or a device the op cannot take
- ``dtype``: type promotion, casting, unsupported argument dtypes
- ``index``: an index or dim out of range
- ``shape``: sizes, ranks, broadcasting, view/reshape compatibility
- ``value``: any other invalid argument value (`ValueError`, "must be", "expected ...")
- ``other``: none of the above (matches only ``other`` of the same Python type)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NOT_IMPLEMENTED = "not_implemented"
INTERNAL = "internal"
LAYOUT = "layout"
DEVICE = "device"
DTYPE = "dtype"
INDEX = "index"
SHAPE = "shape"
VALUE = "value"
OTHER = "other"

CLASSES = (NOT_IMPLEMENTED, INTERNAL, LAYOUT, DEVICE, DTYPE, INDEX, SHAPE, VALUE, OTHER)

# (class, pattern over the message), tried in order after the exception type rules.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (cls, re.compile(pattern, re.IGNORECASE))
    for cls, pattern in (
        (NOT_IMPLEMENTED, r"could not run '[^']+' with arguments from the"),
        (
            NOT_IMPLEMENTED,
            r"\bnot (yet )?(implemented|supported) (for|on) (the )?'?\w+'? ?(device|backend)",
        ),
        (NOT_IMPLEMENTED, r"\bis not implemented\b|\bno kernel\b|\bunsupported (device|backend)\b"),
        (INTERNAL, r"internal assert failed|please report a bug to pytorch"),
        # a runtime's own internal check or a lowering that failed (torch_xla: "Check failed:
        # total_element_count == ...", "RET_CHECK failure", "Bad StatusOr access: INTERNAL")
        (INTERNAL, r"\bcheck failed\b|\bret_check failure\b|\bstatusor access: internal\b"),
        (INTERNAL, r"\bfailed to lower\b|\blowering\b.*\bfail|^error while lowering\b"),
        (LAYOUT, r"is_contiguous|\bmust be contiguous|\bto be contiguous|\bnon-?contiguous\b"),
        (LAYOUT, r"\bcontiguous (input|tensor)s? (is|are) (required|expected)"),
        (DEVICE, r"same device|\bdevices?\b.*\b(cpu|cuda|found|expected)\b|\bon (the )?cpu\b"),
        (DTYPE, r"can't be cast|cannot be cast|result type|scalar type|\bdtypes?\b|\bpromot"),
        (
            DTYPE,
            r"not implemented for '"
            r"|\b(integral|floating|complex|boolean|bool) (types?|tensors?|inputs?)",
        ),
        (
            DTYPE,
            r"\b(int|long|float|double|half|bfloat16|bool|byte|char|short)\b.*\b(type|tensor)s?\b.*\bexpected\b",
        ),
        (INDEX, r"out of (range|bounds)|\bindex(es|ices)?\b.*\b(invalid|range|bounds)"),
        (
            SHAPE,
            r"\bsizes?\b|\bshapes?\b|\bdim(ension)?s?\b|\brank\b|broadcast|numel|\bview\b|\belements\b"
            r"|element_count",
        ),
        (SHAPE, r"\bmat[12]\b|\b\d+-?d\b|\bscalar\b.*\btensor\b"),
        (VALUE, r"\bmust be\b|\bexpected\b|\binvalid\b|\bshould be\b|\bcannot\b|\bnot allowed\b"),
    )
)
# "X not implemented for 'Long'": CPU's kernel lacks a dtype (the device may raise the same way)
_KERNEL_DTYPE = re.compile(r"not implemented for '(\w+)'", re.IGNORECASE)


@dataclass(frozen=True)
class ErrorClass:
    """The class of one exception and the first line of its message (for failure messages)."""

    kind: str
    type_name: str
    text: str
    kernel_lacks_dtype: bool = False  # "not implemented for '<dtype>'" (a dtype gap, not a bug)

    def describe(self) -> str:
        return f"{self.type_name} [{self.kind}]: {self.text}"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


def classify(exc: BaseException) -> ErrorClass:
    """The class of `exc` (see the module docstring)."""
    message = str(exc)
    kind = _by_type(exc) or _by_message(message)
    lacks_dtype = bool(_KERNEL_DTYPE.search(message))
    if lacks_dtype and kind == DTYPE:
        kind = NOT_IMPLEMENTED  # a kernel without this dtype: nothing was computed
    return ErrorClass(kind, type(exc).__name__, first_line(exc), lacks_dtype)


def _by_type(exc: BaseException) -> str | None:
    if isinstance(exc, NotImplementedError):
        return NOT_IMPLEMENTED
    if isinstance(exc, IndexError):
        return INDEX
    if isinstance(exc, TypeError):
        return DTYPE if re.search(r"dtype|scalar type", str(exc), re.IGNORECASE) else VALUE
    return None


def _by_message(message: str) -> str:
    head = message.strip().splitlines()[0] if message.strip() else ""
    for cls, pattern in _PATTERNS:
        if pattern.search(head):
            return cls
    if isinstance(message, str) and "INTERNAL ASSERT" in message:
        return INTERNAL
    return OTHER


def same_class(expected: ErrorClass, actual: ErrorClass) -> bool:
    """Error parity: the same class. Two unclassifiable (``other``) messages match when their
    Python types do; ``other`` never matches a known class (an opaque device error such as
    "runtime error 0x7" says nothing of being CPU's dtype or index error).

    ``not_implemented`` on the device never matches (the caller reports it as unsupported)."""
    if actual.kind == NOT_IMPLEMENTED:
        return False
    if expected.kind == OTHER or actual.kind == OTHER:
        return expected.kind == actual.kind and expected.type_name == actual.type_name
    if expected.kind == actual.kind:
        return True
    # value vs a more specific class: a rewording of the same complaint, as long as neither is
    # about devices or layout (those are never interchangeable)
    loose = {VALUE, SHAPE, INDEX}
    return expected.kind in loose and actual.kind in loose and VALUE in (expected.kind, actual.kind)


def both_refused(expected: ErrorClass, actual: ErrorClass) -> bool:
    """The device stopped at an internal check or a failed lowering where CPU raised an error
    of a known class, and what the check states names the same cause as CPU's error (torch_xla:
    "Check failed: total_element_count == ..." where CPU's view raises a shape error): both
    refused the input for one reason, worded as an assertion (a message-quality note, not a
    verdict). A check that names another cause, or none ("Check failed: the command queue was
    destroyed"), is a runtime failure, not a refusal."""
    known = expected.kind not in (OTHER, NOT_IMPLEMENTED, INTERNAL)
    if actual.kind != INTERNAL or not known:
        return False
    stated = ErrorClass(cause(actual.text), actual.type_name, actual.text)
    return stated.kind != OTHER and same_class(expected, stated)


def cause(text: str) -> str:
    """The class of what an internal check's text states, its assertion wording aside."""
    for cls, pattern in _PATTERNS:
        if cls not in (INTERNAL, NOT_IMPLEMENTED) and pattern.search(text):
            return cls
    return OTHER


MEMORY_FORMAT = re.compile(r"channels_last|memory[_ ]format", re.IGNORECASE)


def about_memory_format(error: ErrorClass) -> bool:
    """Whether the error states a precondition on memory layout (channels_last needs rank 4, a
    memory format, contiguity): meaningless where storage cannot be observed."""
    return error.kind == LAYOUT or bool(MEMORY_FORMAT.search(error.text))


def opaque_hint(expected: ErrorClass, actual: ErrorClass) -> str:
    """What a backend whose message says nothing of the error's kind should raise instead."""
    if actual.kind != OTHER or expected.kind == OTHER:
        return ""
    return (
        f"; the device's message does not say what is wrong: raise {expected.type_name} with a "
        f"message naming the {expected.kind} problem, as cpu does"
    )

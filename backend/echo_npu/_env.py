"""Parsing of the ECHO_NPU_* environment variables (read once at import).

Every bad value raises ``ValueError`` with a one-line message naming the valid values.
"""

from __future__ import annotations

import math
import os
import tempfile

ALLOCATOR_MODES = ("malloc", "aligned", "guard", "page")
DEVICE_NAMES = ("npu", "privateuseone")


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def allocator_mode() -> str:
    """``ECHO_NPU_ALLOCATOR`` (default ``malloc``)."""
    mode = os.environ.get("ECHO_NPU_ALLOCATOR", "malloc").strip() or "malloc"
    if mode not in ALLOCATOR_MODES:
        raise ValueError(
            f"invalid ECHO_NPU_ALLOCATOR value {mode!r}; valid values: {', '.join(ALLOCATOR_MODES)}"
        )
    return mode


def device_name() -> str:
    """``ECHO_NPU_DEVICE_NAME`` (default ``npu``; ``privateuseone`` skips the rename)."""
    name = os.environ.get("ECHO_NPU_DEVICE_NAME", "npu").strip() or "npu"
    if name not in DEVICE_NAMES:
        raise ValueError(
            f"invalid ECHO_NPU_DEVICE_NAME value {name!r}; valid values: {', '.join(DEVICE_NAMES)}"
        )
    return name


def fallback_ops() -> list[str]:
    """``ECHO_NPU_FALLBACK_OPS``: comma-separated overload names (validated by the backend)."""
    return _split(os.environ.get("ECHO_NPU_FALLBACK_OPS", ""))


def faults() -> list[str]:
    """``ECHO_NPU_FAULTS``: comma-separated fault names (validated by the backend)."""
    return _split(os.environ.get("ECHO_NPU_FAULTS", ""))


REGISTRATIONS = ("import", "manual")


def registration() -> str:
    """``ECHO_NPU_REGISTER``: ``import`` (default: importing registers the device) or ``manual``
    (importing registers nothing; ``echo_npu.register()`` does, as packages whose users call a
    register function)."""
    value = os.environ.get("ECHO_NPU_REGISTER", "import").strip() or "import"
    if value not in REGISTRATIONS:
        raise ValueError(
            f"invalid ECHO_NPU_REGISTER value {value!r}; valid values: {', '.join(REGISTRATIONS)}"
        )
    return value


def _flag(var: str) -> bool:
    value = os.environ.get(var, "0").strip() or "0"
    if value not in ("0", "1"):
        raise ValueError(f"invalid {var} value {value!r}; valid values: 0, 1")
    return value == "1"


def refuse_fork() -> bool:
    """``ECHO_NPU_REFUSE_FORK=1``: like CUDA, refuse use in a forked child once initialised."""
    return _flag("ECHO_NPU_REFUSE_FORK")


def no_fallback() -> bool:
    """``ECHO_NPU_NO_FALLBACK=1``: register no boxed cpu_fallback."""
    return _flag("ECHO_NPU_NO_FALLBACK")


def no_hooks() -> bool:
    """``ECHO_NPU_NO_HOOKS=1``: expose none of the suite's optional protocol hooks."""
    return _flag("ECHO_NPU_NO_HOOKS")


def async_mode() -> bool:
    """``ECHO_NPU_ASYNC=1``: a queue and a worker thread per stream (default ``0``: synchronous)."""
    return _flag("ECHO_NPU_ASYNC")


# the delay injector's kinds of work, in the order of the runtime's enpuWorkKind (stream.h)
DELAY_KINDS = ("kernel", "h2d", "d2h", "d2d")
DELAY_SCOPES = ("all", "default", "side")
_UNITS = {"us": 1, "ms": 1000, "s": 1_000_000}


def _micros(amount: str) -> int:
    for unit in ("us", "ms", "s"):  # "ms" before "s"
        if amount.endswith(unit):
            number = amount[: -len(unit)]
            try:
                value = float(number)
            except ValueError:
                break
            if 0 <= value < math.inf:  # not nan, not inf (round(inf) raises OverflowError)
                return round(value * _UNITS[unit])
            break
    raise ValueError(f"bad amount {amount!r}")


def delays(asynchronous: bool) -> list[tuple[str, str, int]]:
    """``ECHO_NPU_DELAY``: comma-separated ``[scope.]kind:amount`` (scope ``default`` or
    ``side`` streams, every stream without one; kind ``kernel``, ``h2d``, ``d2h``, ``d2d``;
    amount ``2ms``, ``500us``, ``0.1s``), e.g. ``kernel:2ms,side.d2h:5ms``. Needs
    ``ECHO_NPU_ASYNC=1``. Returns (scope, kind, microseconds)."""
    raw = os.environ.get("ECHO_NPU_DELAY", "")
    out: list[tuple[str, str, int]] = []
    for item in _split(raw):
        head, sep, amount = item.partition(":")
        scope, dot, kind = head.rpartition(".")
        scope = scope if dot else "all"
        try:
            if not sep or scope not in DELAY_SCOPES or kind not in DELAY_KINDS:
                raise ValueError(item)
            out.append((scope, kind, _micros(amount.strip())))
        except ValueError:
            raise ValueError(
                f"invalid ECHO_NPU_DELAY item {item!r}; valid: [default.|side.]"
                f"{'|'.join(DELAY_KINDS)}:<number>(us|ms|s), comma-separated"
            ) from None
    if out and not asynchronous:
        raise ValueError("ECHO_NPU_DELAY needs ECHO_NPU_ASYNC=1 (work runs at once otherwise)")
    return out


# ECHO_NPU_RUNTIME's names, in the order of the runtime's personality bits (runtime.h)
RUNTIME_PERSONALITIES = ("threaded", "exclusive", "slow_init", "teardown_hang")


def runtime_personality() -> tuple[str, ...]:
    """``ECHO_NPU_RUNTIME``: comma-separated runtime personalities (default none: today's
    runtime), behaviours of real vendor runtimes: ``threaded`` (driver threads; a forked child
    of an initialised process hangs when it touches the device), ``exclusive`` (one process may
    open the device), ``slow_init`` (initialisation takes 2 s), ``teardown_hang`` (a process
    that initialised the device never ends at a normal exit). Returned in the canonical order."""
    names = _split(os.environ.get("ECHO_NPU_RUNTIME", ""))
    for name in names:
        if name not in RUNTIME_PERSONALITIES:
            raise ValueError(
                f"invalid ECHO_NPU_RUNTIME item {name!r}; valid names: "
                f"{', '.join(RUNTIME_PERSONALITIES)} (comma-separated)"
            )
    return tuple(n for n in RUNTIME_PERSONALITIES if n in names)


def device_lock_path() -> str:
    """``ECHO_NPU_DEVICE_LOCK``: the lock file of the ``exclusive`` personality (default
    ``<temp dir>/echo_npu-<uid>.device.lock``, one per user)."""
    path = os.environ.get("ECHO_NPU_DEVICE_LOCK", "").strip()
    if path:
        return path
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(tempfile.gettempdir(), f"echo_npu-{uid}.device.lock")

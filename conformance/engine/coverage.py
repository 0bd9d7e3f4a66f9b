"""What a run tests of what the backend registered, and why the rest is not tested.

Computed once per run from the dispatcher and the sample sources (warm caches make it cheap):
every registered overload is tested, or untested for a named reason (no samples, not selected);
(overload, dtype) pairs without samples are not collected as cases but named here once;
kernels registered for names without an aten schema are listed; overloads reached only through
the backend's boxed fallback are counted, with those tested (`--fallback-ops`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

CountOf = Callable[[str, Any], int]  # (overload, torch dtype) -> how many sample calls


class SampleError(Exception):
    """Building the samples failed; the message says how (a remembered answer, see
    samples/summary.py)."""


@dataclass
class Coverage:
    registered: list[str]
    selected: list[str]
    schemaless: list[str] = field(default_factory=list)
    # overload -> dtype names without samples (only requested dtypes the op spec allows)
    no_samples: dict[str, list[str]] = field(default_factory=dict)
    # overload -> why no dtype has samples (a subset of no_samples' keys)
    untested: dict[str, str] = field(default_factory=dict)
    # overload -> error raised while building its samples (its cases report it as harness)
    sample_errors: dict[str, str] = field(default_factory=dict)
    has_fallback: bool = False
    fallback_only: list[str] = field(default_factory=list)  # unregistered, reach the fallback
    fallback_tested: list[str] = field(default_factory=list)
    fallback_set: str = ""  # how the fallback-only overloads were chosen: models, all, globs
    excluded: list[str] = field(default_factory=list)  # model-derived, left out with a reason
    # model-derived overloads the backend runs through torch's composite kernels, not tested as
    # ops in this run (what they compute is done by the overloads they call)
    default_kernels: list[str] = field(default_factory=list)
    # what the representative models need of this backend: the overloads they reach that end on
    # one of its kernels or its boxed fallback (engine/workloads.py); the scorecard's model set
    models: list[str] = field(default_factory=list)
    # key -> the overloads with a kernel there (the backend key and its autograd key: a kernel
    # at the autograd key is an op case like any other, its backward the vendor's own)
    by_key: dict[str, list[str]] = field(default_factory=dict)

    def missing(self, overload: str, dtype_name: str) -> bool:
        """Whether (overload, dtype) has no samples, so no case is collected for it."""
        return dtype_name in self.no_samples.get(overload, ())

    @property
    def tested(self) -> list[str]:
        return [o for o in self.selected if o not in self.untested]

    def header_lines(self) -> list[str]:
        """Lines of the run header: registered, tested, untested and why, fallback-only."""
        skipped = [o for o in self.registered if o not in self.selected]
        text = f"coverage: {len(self.tested)} of {len(self.registered)} registered overloads tested"
        text += self._by_key_counts()
        if skipped:
            text += f", {len(skipped)} not selected (--ops or -k)"
        lines = [text, *self._key_lines()]
        by_reason: dict[str, list[str]] = {}
        for overload, reason in sorted(self.untested.items()):
            by_reason.setdefault(reason, []).append(overload)
        for reason, names in by_reason.items():
            lines.append(f"coverage: untested, {reason}: {', '.join(names)}")
        partial = {o: d for o, d in self.no_samples.items() if o not in self.untested}
        if partial:
            listed = "; ".join(f"{o} ({', '.join(d)})" for o, d in sorted(partial.items()))
            lines.append(f"coverage: no samples for some dtypes (not collected): {listed}")
        if self.sample_errors:
            listed = "; ".join(f"{o}: {e}" for o, e in sorted(self.sample_errors.items()))
            lines.append(f"coverage: building samples failed (cases report it): {listed}")
        if self.schemaless:
            lines.append(
                "coverage: kernels registered for names aten does not declare (no schema, "
                f"never called, not tested): {', '.join(self.schemaless)}"
            )
        if not self.has_fallback:
            lines.append(
                "coverage: no boxed fallback: aten overloads without a kernel are unsupported "
                "on this device"
            )
        else:
            tested = len(self.fallback_tested)
            how = " (test them with --fallback-ops GLOBS or 'all')" if not tested else ""
            if tested and self.fallback_set:
                how = f" (--fallback-ops {self.fallback_set})"
            lines.append(
                f"coverage: {len(self.fallback_only)} aten overloads with OpInfo samples reach "
                f"the backend only through its boxed fallback; {tested} tested{how}"
            )
            if tested and self.fallback_set == "models" and self.excluded:
                lines.append(
                    "coverage: model-derived fallback overloads left out "
                    f"(conformance/workloads/excluded.toml): {', '.join(self.excluded)}"
                )
        if self.default_kernels:
            lines.append(
                "coverage: model-derived overloads not tested as ops: this backend runs torch's "
                "composite kernel for them, which calls the overloads tested above (test them "
                f"as ops with --fallback-ops GLOBS): {', '.join(self.default_kernels)}"
            )
        return lines

    def _by_key_counts(self) -> str:
        """' (87 at PrivateUse1, 1 at AutogradPrivateUse1)' where a key besides the backend's
        has kernels (none is hidden)."""
        if sum(bool(names) for names in self.by_key.values()) < 2:
            return ""
        return " (" + ", ".join(f"{len(n)} at {k}" for k, n in self.by_key.items()) + ")"

    def _key_lines(self) -> list[str]:
        """The kernels at keys other than the backend's, named."""
        return [
            f"coverage: kernels at {key} (they run for every tensor of the device, grad or "
            "not; their op cases judge the forward and, in -grad cases, the backward they "
            f"define): {', '.join(names)}"
            for key, names in list(self.by_key.items())[1:]
            if names
        ]

    def summary_line(self) -> str:
        """One line for the end of a run: what is tested, and how many gaps of each kind (the
        run header and run.json `coverage` name them)."""
        text = f"coverage: {len(self.tested)} of {len(self.registered)} registered overloads"
        if self.has_fallback:
            tested = len(self.fallback_tested)
            how = f" (--fallback-ops {self.fallback_set})" if tested else ""
            text += f", {tested} of {len(self.fallback_only)} fallback-only{how} tested"
        else:
            text += " tested (no boxed fallback)"
        partial = [o for o in self.no_samples if o not in self.untested]
        gaps = [
            (len(self.untested), "untested"),
            (len(self.registered) - len(self.selected), "not selected"),
            (len(partial), "lack samples in some dtypes"),
            (len(self.sample_errors), "failed to build samples"),
            (len(self.schemaless), "schema-less"),
        ]
        listed = ", ".join(f"{n} {what}" for n, what in gaps if n)
        return text + (f"; {listed} (see the header)" if listed else "")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["tested"] = self.tested
        return data


def compute(
    registered: Sequence[str],
    selected: Sequence[str],
    dtypes: Sequence[Any],
    allowed_dtypes: Callable[[str], Sequence[Any] | None],
    samples_of: CountOf,
    no_sample_reason: Callable[[str], str],
    *,
    schemaless: Sequence[str] = (),
    has_fallback: bool = False,
    fallback_only: Sequence[str] = (),
    fallback_selected: Sequence[str] = (),
    fallback_set: str = "",
    excluded: Sequence[str] = (),
    default_kernels: Sequence[str] = (),
    models: Sequence[str] = (),
    by_key: dict[str, list[str]] | None = None,
) -> Coverage:
    """Ask the sample sources about every selected overload x requested dtype."""
    cov = Coverage(
        list(registered),
        list(selected),
        schemaless=list(schemaless),
        has_fallback=has_fallback,
        fallback_only=list(fallback_only),
        fallback_set=fallback_set,
        excluded=list(excluded),
        default_kernels=list(default_kernels),
        models=list(models),
        by_key=dict(by_key or {}),
    )
    for overload in [*selected, *fallback_selected]:
        allowed = allowed_dtypes(overload)
        wanted = [d for d in dtypes if allowed is None or d in allowed]
        empty = []
        for dtype in wanted:
            try:
                count = samples_of(overload, dtype)
            except Exception as exc:  # noqa: BLE001 - reported by the cases, never hidden here
                cov.sample_errors[overload] = describe_error(exc)
                break
            if not count:
                empty.append(str(dtype).removeprefix("torch."))
        if overload in cov.sample_errors:
            continue
        if empty:
            cov.no_samples[overload] = empty
        if len(empty) < len(wanted):
            if overload in fallback_selected:
                cov.fallback_tested.append(overload)
        elif overload in selected:
            cov.untested[overload] = (
                no_sample_reason(overload)
                if wanted
                else "its op spec allows none of the requested dtypes (--dtypes)"
            )
    return cov


def describe_error(exc: BaseException) -> str:
    """How building samples failed, in one line ("TypeError: ...")."""
    if isinstance(exc, SampleError):
        return str(exc)
    return f"{type(exc).__name__}: {_first_line(exc)}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""

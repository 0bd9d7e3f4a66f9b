"""The generated module's text (templates/upstream_config.py.j2, rendered with jinja2)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass

import jinja2

from conformance.upstream.evidence import TOLERANCE_CAP, Override, UpstreamConfig

__all__ = ("render",)

#: evidence lines per entry (a finding's repro first); the rest are counted
EVIDENCE_LINES = 3


@dataclass
class _Entry:
    """An Override as the template writes it."""

    o: Override

    @property
    def kind(self) -> str:
        return self.o.kind

    @property
    def dtype_list(self) -> list[str]:
        return sorted(self.o.dtypes)

    @property
    def dtype_args(self) -> str:
        return ", ".join(f"torch.{d}" for d in self.dtype_list)

    @property
    def reason_literal(self) -> str:
        return repr(self.o.reason)

    @property
    def cls(self) -> str:
        return self.o.test.cls if self.o.test else ""

    @property
    def test(self) -> str:
        return self.o.test.test if self.o.test else ""

    @property
    def comments(self) -> list[str]:
        evidence = sorted(self.o.evidence, key=lambda e: (not e.startswith("F"), e))
        where = f" on {self.o.test.name}" if self.o.test else ""
        lines = [f"{self.o.kind}{where} ({', '.join(self.dtype_list)}): {self.o.reason}"]
        lines += [e[:300] for e in evidence[:EVIDENCE_LINES]]
        if len(evidence) > EVIDENCE_LINES:
            lines.append(f"... and {len(evidence) - EVIDENCE_LINES} more")
        return [" ".join(line.split()) for line in lines]

    def atol_text(self, dtype: str) -> str:
        assert self.o.test is not None
        return _up(max(self.o.atol, self.o.test.tolerance_for(dtype)[1]))

    def rtol_text(self, dtype: str) -> str:
        assert self.o.test is not None
        return _up(max(self.o.rtol, self.o.test.tolerance_for(dtype)[0]))


def _up(value: float) -> str:
    """`value` to 3 significant digits, rounded up (a tolerance never below what was measured)."""
    if value <= 0:
        return "0"
    digits = 2 - math.floor(math.log10(value))
    scaled = value * 10**digits
    return f"{math.ceil(scaled * (1 - 1e-12)) / 10**digits:.3g}"  # 1e-05 stays 1e-05


def _grouped(overrides: Iterable[Override]) -> list[tuple[str, list[_Entry]]]:
    out: dict[str, list[_Entry]] = {}
    for o in overrides:
        out.setdefault(o.op, []).append(_Entry(o))
    return sorted(out.items())


def _environment() -> jinja2.Environment:
    folder = os.path.join(os.path.dirname(__file__), "templates")
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701 - Python source, not HTML
    )


def render(config: UpstreamConfig, filename: str) -> str:
    """The module's source; `filename` is where it will be written (its import name)."""
    meta = config.meta
    statuses = meta.get("statuses") or meta.get("counts") or {}
    name = os.path.splitext(os.path.basename(filename))[0] if filename != "-" else "<module>"
    backend = str(meta.get("backend", "?"))
    module, _, register = str(meta.get("backend_spec") or backend).partition(":")
    versions = (meta.get("compile_environment") or {}).get("backend", "")
    return (
        _environment()
        .get_template("upstream_config.py.j2")
        .render(
            api=config.api,
            backend=backend,
            backend_module=module,
            register=register,
            backend_line=versions or backend,
            device=str(meta.get("device", "?")),
            source=config.source,
            filename=os.path.basename(filename) if filename != "-" else "upstream_config.py",
            module=name,
            generated=config.generated,
            started=meta.get("started", "?"),
            finished=meta.get("finished", "?"),
            cases=sum(statuses.values()) if isinstance(statuses, dict) else "?",
            statuses=", ".join(f"{v} {k}" for k, v in sorted(statuses.items())),
            torch=meta.get("torch", "?"),
            allocator=meta.get("allocator", "?"),
            allowlist=config.allowlist,
            tests=config.tests,
            files=sorted({t.file for t in config.tests}),
            partial=config.partial,
            unmeasured=config.unmeasured,
            apply_allowlist=config.apply_allowlist,
            bypass=config.bypass_device_restrictions,
            cap=f"{TOLERANCE_CAP:g}",
            measured_dtypes=config.measured_dtypes,
            overrides=_grouped(config.overrides),
            exclusions=sorted(config.exclusions.items()),
            capabilities=sorted(config.capabilities.items()),
            not_excused=config.not_excused,
            prerequisites=config.prerequisites,
        )
    )

"""What changed between two runs: their environments side by side with the cases whose verdict
changed (`python -m conformance.report A B --diff`).

The environment is run.json's `compile_environment` (engine/environment.py: versions, compiler,
C library, instruction set, the variables torch, Inductor and the backend read). A verdict
changed where a case's status differs, or where a case ran in one run only.
"""

from __future__ import annotations

from dataclasses import dataclass

from conformance.report.load import Run


@dataclass(frozen=True)
class Change:
    """One case whose verdict differs: its id, its status in A and in B ("-": not run), and the
    first line of B's message (A's when B passed)."""

    case: str
    before: str
    after: str
    message: str


def environment_changes(a: Run, b: Run) -> list[tuple[str, str, str]]:
    """(key, value in A, value in B) for every entry of the environment that differs ("-":
    absent)."""
    ea = a.meta.get("compile_environment") or {}
    eb = b.meta.get("compile_environment") or {}
    keys = sorted(set(ea) | set(eb))
    return [(k, str(ea.get(k, "-")), str(eb.get(k, "-"))) for k in keys if ea.get(k) != eb.get(k)]


def verdict_changes(a: Run, b: Run) -> list[Change]:
    """Every case whose status differs between the two runs, in case id order."""
    sa = {c.id: c for c in a.cases}
    sb = {c.id: c for c in b.cases}
    out = []
    for case in sorted(set(sa) | set(sb)):
        ca, cb = sa.get(case), sb.get(case)
        before = ca.status.value if ca is not None else "-"
        after = cb.status.value if cb is not None else "-"
        if before == after:
            continue
        source = cb if cb is not None and cb.message else ca
        message = (source.message or "").strip().splitlines()[0] if source is not None else ""
        out.append(Change(case, before, after, message))
    return out


def render_diff(a: Run, b: Run) -> str:
    """The diff as Markdown: what differs in the environment, then the verdicts that changed."""
    lines = [f"# What changed: {a.path} -> {b.path}", ""]
    env = environment_changes(a, b)
    if not (a.meta.get("compile_environment") and b.meta.get("compile_environment")):
        lines += ["A run.json without `compile_environment` (an older suite): not compared.", ""]
    lines += [f"## Environment: {len(env)} difference(s)", ""]
    if env:
        lines += ["| what | A | B |", "| --- | --- | --- |"]
        lines += [f"| `{k}` | {_cell(va)} | {_cell(vb)} |" for k, va, vb in env]
    else:
        lines.append("The environments are the same.")
    changes = verdict_changes(a, b)
    lines += ["", f"## Verdicts: {len(changes)} case(s) changed", ""]
    if changes:
        lines += ["| case | A | B | message |", "| --- | --- | --- | --- |"]
        lines += [f"| `{c.case}` | {c.before} | {c.after} | {_cell(c.message)} |" for c in changes]
    else:
        lines.append("No case changed its verdict.")
    return "\n".join(lines) + "\n"


def _cell(text: str, limit: int = 160) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."

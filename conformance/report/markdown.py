"""Markdown summary of one or more runs, sized for ``$GITHUB_STEP_SUMMARY``.

Layout: one overview table (a row per session), then the failures of every session with message
and repro command (crashes first), then per-session status counts per layout and per op (ops with
problems first; the full per-op table is folded in a ``<details>`` block), and per axis (ordinary
samples, the value sets, the -grad and -inference modes).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from conformance.report.load import FAILING, STATUSES, Case, Run
from conformance.report.summary import counts_by, family_rows, family_tables

__all__ = ["coverage_lines", "render_markdown"]

#: Columns of every count table, in this order.
COLUMNS: tuple[str, ...] = (
    "passed",
    "failed",
    "blocked",
    "unsupported",
    "torch-bug",
    "xfailed",
    "xpassed",
    "crashed",
    "hung",
    "error",
    "not-run",
    "skipped",
)
#: a family's section lists every case up to this many, else those that did not pass
MAX_FAMILY_ROWS = 100
_ICONS = {
    "crashed": "💥",
    "hung": "⏳",
    "unsupported": "🚫",
    "error": "⛔",
    "not-run": "❔",
    "failed": "❌",
    "blocked": "🚧",
    "torch-bug": "🐛",
    "xpassed": "❗",
    "xfailed": "➖",
    "passed": "✅",
    "skipped": "⏭",
}


def _cell(text: str | None, limit: int = 300, code: bool = False) -> str:
    """Make ``text`` safe inside a Markdown table cell (one line, escaped pipes; outside a code
    span also `<`, so that "<op>" of a finding's title is not read as an HTML tag)."""
    text = " ".join((text or "").split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    text = text.replace("\\", "\\\\").replace("|", "\\|")
    return text if code else text.replace("<", "&lt;").replace(">", "&gt;")


def _code(text: str) -> str:
    if not text:
        return ""
    text = _cell(text, 400, code=True).replace("`", "'")
    return f"`{text}`"


def _count_row(name: str, counts: Counter[str]) -> str:
    values = [str(counts.get(s, 0) or "") for s in COLUMNS]
    extra = sum(n for s, n in counts.items() if s not in COLUMNS)
    total = sum(counts.values())
    if extra:
        values[COLUMNS.index("error")] = str(counts.get("error", 0) + extra)
    return f"| {_cell(name)} | " + " | ".join(values) + f" | {total} |"


def _count_table(title: str, rows: dict[str, Counter[str]]) -> list[str]:
    header = f"| {title} | " + " | ".join(COLUMNS) + " | total |"
    sep = "| --- | " + " | ".join("---:" for _ in COLUMNS) + " | ---: |"
    return [header, sep, *(_count_row(name, counts) for name, counts in rows.items())]


def _failure_rows(cases: Sequence[Case], limit: int) -> list[str]:
    lines = ["| status | case | check | message | repro |", "| --- | --- | --- | --- | --- |"]
    for case in cases[:limit]:
        icon = _ICONS.get(case.status, "")
        lines.append(
            f"| {icon} {case.status} | {_code(case.id)} | {_cell(case.check)} | "
            f"{_cell(case.message)} | {_code(case.repro)} |"
        )
    if len(cases) > limit:
        lines.append(f"\n… and {len(cases) - limit} more (see the HTML report).")
    return lines


def coverage_lines(cov: dict[str, Any] | None) -> list[str]:
    """The run's coverage (run.json `coverage`, engine/coverage.py): registered overloads, tested,
    untested with the reason, dtypes without samples, schema-less kernels, fallback-only ops."""
    if not cov:
        return []
    untested = cov.get("untested") or {}
    out = [
        "### Coverage",
        "",
        f"- {len(cov.get('registered', []))} registered aten overloads, "
        f"{len(cov.get('tested', []))} tested, {len(untested)} untested",
    ]
    out += [f"- untested `{_cell(o)}`: {_cell(r)}" for o, r in sorted(untested.items())]
    partial = {o: d for o, d in (cov.get("no_samples") or {}).items() if o not in untested}
    if partial:
        listed = "; ".join(f"`{o}` ({', '.join(d)})" for o, d in sorted(partial.items()))
        out.append(f"- no samples for some dtypes (not collected): {_cell(listed, 2000)}")
    if cov.get("schemaless"):
        names = ", ".join(f"`{o}`" for o in cov["schemaless"])
        out.append(f"- kernels for names without an aten schema (never called): {names}")
    if not cov.get("has_fallback"):
        out.append("- no boxed fallback: overloads without a kernel are unsupported")
    else:
        out.append(
            f"- {len(cov.get('fallback_only', []))} overloads reach the backend only through its "
            f"boxed fallback; {len(cov.get('fallback_tested', []))} tested"
        )
    return [*out, ""]


def argument_lines(account: dict[str, dict[str, str]] | None) -> list[str]:
    """The run's argument coverage (run.json `arguments`, harness/accounts.py): per overload the
    value classes of its schema's arguments reached (by the samples or an -arguments case) and
    each class left out with the reason."""
    if not account:
        return []
    reached = ("ordinary", "derived")
    total = sum(len(v) for v in account.values())
    hit = sum(1 for v in account.values() for how in v.values() if how in reached)
    rows = []
    for overload, classes in sorted(account.items()):
        left = [f"{label} ({how})" for label, how in classes.items() if how not in reached]
        derived = [label for label, how in classes.items() if how == "derived"]
        rows.append(
            f"| `{_cell(overload)}` | {len(classes) - len(left)}/{len(classes)} | "
            f"{_cell(', '.join(derived)) or '-'} | {_cell('; '.join(left), 800) or '-'} |"
        )
    return [
        "### Argument coverage",
        "",
        f"- {hit} of {total} argument value classes of {len(account)} overloads reached "
        "(by the samples, or by an `-arguments` case made for it)",
        "",
        "<details><summary>Per overload</summary>",
        "",
        "| overload | reached | by -arguments cases | left out (why) |",
        "| --- | --- | --- | --- |",
        *rows,
        "",
        "</details>",
        "",
    ]


def _findings_section(runs: Sequence[Run]) -> list[str]:
    """One row per root cause: failing cases grouped (conformance/findings.py)."""
    out = ["## Findings (one per root cause)", ""]
    any_finding = False
    for run in runs:
        findings = run.findings()
        if not findings:
            continue
        any_finding = True
        failing = sum(f.count for f in findings)
        out += [f"### {_cell(run.label)}: {failing} failing cases = {len(findings)} findings", ""]
        out += ["| # | finding | check | cases | blocked | example | repro |"]
        out += ["| ---: | --- | --- | ---: | ---: | --- | --- |"]
        for i, f in enumerate(findings, 1):
            rep = f.representative
            out.append(
                f"| {i} | {_cell(f.title)} | {_cell(f.key.check)} | {f.count} | "
                f"{f.blocked or ''} | {_code(rep.id)} | {_code(rep.repro)} |"
            )
        out.append("")
        unsupported = run.unsupported_by_op()
        if unsupported:
            ops = ", ".join(f"`{op}` ({n})" for op, n in unsupported.items())
            out += [
                f"🚫 unsupported (the device raised 'not implemented'; never a pass): "
                f"{sum(unsupported.values())} cases: {ops}",
                "",
            ]
    if not any_finding:
        out += ["None.", ""]
    return out


def _family_sections(runs: Sequence[Run]) -> list[str]:
    """A section per family besides the op cases (scenarios, the runtime contract,
    collectives): the table its cases carry, if any (every row), then every case, or, past
    MAX_FAMILY_ROWS, those that did not pass."""
    out: list[str] = []
    tables = family_tables(runs)
    for family, found in family_rows(runs).items():
        shown = found
        if len(found) > MAX_FAMILY_ROWS:
            shown = [(run, c) for run, c in found if c.status.value != "passed"]
        out += [f"## {family.capitalize()} ({len(found)})", ""]
        if family in tables:  # the table its cases carry, every row
            columns, rows = tables[family]
            out += [
                "| " + " | ".join(["session", *columns]) + " |",
                "| " + " | ".join(["---"] * (len(columns) + 1)) + " |",
            ]
            out += [
                "| "
                + " | ".join([_cell(run.name), *(_cell(str(r.get(k, ""))) for k in columns)])
                + " |"
                for run, r in rows
            ]
            out.append("")
        if len(shown) < len(found):
            out += [f"{len(found) - len(shown)} passed case(s) not listed.", ""]
        if not shown:
            continue
        out += ["| session | case | status | message |", "| --- | --- | --- | --- |"]
        for run, c in shown:
            icon = _ICONS.get(c.status, "")
            out.append(
                f"| {_cell(run.name)} | {_code(c.id)} | {icon} {c.status} | {_cell(c.message)} |"
            )
        out.append("")
    return out


def render_markdown(
    runs: Sequence[Run], *, title: str = "Conformance report", max_failures: int = 100
) -> str:
    """The Markdown report of ``runs``; at most ``max_failures`` failure rows per session."""
    out: list[str] = [f"# {title}", ""]
    if not runs:
        return "\n".join([*out, "No results.", ""])
    out += [
        "| session | torch | allocator | backend | "
        + " | ".join(COLUMNS)
        + " | total | finished |",
        "| --- | --- | --- | --- | " + " | ".join("---:" for _ in COLUMNS) + " | ---: | --- |",
    ]
    for run in runs:
        row = _count_row(run.name, run.counts())
        first, rest = row.split(" | ", 1)
        meta = f"{_cell(run.torch)} | {_cell(run.allocator)} | {_cell(run.backend)}"
        out.append(f"{first} | {meta} | {rest} {'yes' if run.finished else '**no**'} |")
    total = Counter[str]()
    for run in runs:
        total.update(run.counts())
    bad = sum(total.get(s, 0) for s in FAILING)
    findings = sum(len(run.findings()) for run in runs)
    verdict = (
        "all cases passed or failed as expected"
        if not bad
        else f"{bad} cases need attention = {findings} finding(s)"
    )
    incomplete = [f"{run.name}: {reason}" for run in runs for reason in run.incomplete]
    if incomplete:
        verdict += f"; **incomplete**, not every case was seen ({'; '.join(incomplete)})"
    out += ["", f"**{verdict}** ({sum(total.values())} cases in {len(runs)} session(s))", ""]

    out += _findings_section(runs)
    out += _family_sections(runs)
    out += ["## Failures", ""]
    any_failure = False
    for run in runs:
        failures = run.failures()
        if not failures:
            continue
        any_failure = True
        out += [f"### {_cell(run.label)}: {len(failures)}", ""]
        out += _failure_rows(failures, max_failures)
        out.append("")
    if not any_failure:
        out += ["None.", ""]

    for run in runs:
        out += [f"## {_cell(run.label)}", ""]
        for warning in run.warnings:
            out.append(f"- ⚠ {_cell(warning)}")
        if run.warnings:
            out.append("")
        out += coverage_lines(run.meta.get("coverage"))
        out += argument_lines(run.meta.get("arguments"))
        out += ["### Per layout", ""]
        out += _count_table("layout", counts_by(run.op_cases(), "layout"))
        axes = counts_by(run.op_cases(), "axis")
        if set(axes) != {"ordinary"}:  # value sets (-special, -promotion), modes (-grad, ...)
            out += ["", "### Per axis", ""]
            out += _count_table("axis", axes)
        per_op = counts_by(run.op_cases(), "op_name")
        problems = {k: v for k, v in per_op.items() if any(s in FAILING for s in v)}
        out += ["", "### Per op", ""]
        if problems:
            out += ["Ops with failures:", ""]
            out += _count_table("op", problems)
            out.append("")
        out += [
            f"<details><summary>All {len(per_op)} ops</summary>",
            "",
            *_count_table("op", per_op),
            "",
            "</details>",
            "",
        ]
    out.append(f"Statuses: {', '.join(f'{_ICONS[s]} {s}' for s in STATUSES)}.")
    return "\n".join(out) + "\n"

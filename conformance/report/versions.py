"""The nightly version report: the op x torch-version grid (`version_grid.py`) as Markdown (for a
CI step summary) and HTML with an embedded heatmap PNG.

The report leads with *findings* (:mod:`conformance.findings`): failing cases grouped by root cause
(check + normalised message + crash signature), each with the first and last version where it
fails and its cases per version, so one regression is one row ("finding X first fails in 2.10
(312 cases)") with its cases folded underneath; then the cases whose status changes across
versions, the changes since the previous nightly, and the op grid.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from typing import Any

from conformance.report.load import STATUSES
from conformance.report.version_grid import (
    MISSING,
    Comparison,
    VersionFinding,
    VersionGrid,
    build_version_grid,
    case_count,
    compare_previous,
    run_variant,
    run_version,
    version_findings,
)

__all__ = [
    "Comparison",
    "VersionFinding",
    "VersionGrid",
    "build_version_grid",
    "compare_previous",
    "render_versions_html",
    "render_versions_markdown",
    "run_variant",
    "run_version",
    "version_findings",
]


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _finding_details_md(vf: VersionFinding, grid: VersionGrid, max_rows: int) -> list[str]:
    """A folded block per finding: its representative and its cases with status per version."""
    rep = vf.finding.representative
    cases = sorted({c for ids in vf.cases_by_version.values() for c in ids})
    lines = [
        f"<details><summary><code>{vf.finding.id}</code> {html.escape(vf.finding.title)}: "
        f"{case_count(len(cases))}, {html.escape(vf.headline())}</summary>",
        "",
        f"- representative: `{_md_escape(rep.id)}`: "
        f"{_md_escape(rep.message.splitlines()[0] if rep.message else '')}",
        f"- ops: {', '.join(f'`{op}`' for op in vf.finding.ops[:30])}"
        + (f" and {len(vf.finding.ops) - 30} more" if len(vf.finding.ops) > 30 else ""),
        "",
        "| case | " + " | ".join(str(v) for v in grid.versions) + " |",
        "|---" * (len(grid.versions) + 1) + "|",
    ]
    for case in cases[:max_rows]:
        lines.append(
            f"| `{_md_escape(case)}` | "
            + " | ".join(grid.status(case, v) for v in grid.versions)
            + " |"
        )
    if len(cases) > max_rows:
        lines.append(f"| ... {len(cases) - max_rows} more (all in the HTML report) |")
    return [*lines, "", "</details>"]


def render_versions_markdown(
    grid: VersionGrid,
    comparison: Comparison | None = None,
    *,
    title: str = "Torch version report",
    max_rows: int = 100,
) -> str:
    """Markdown: counts per version, first changes, changes since the previous nightly, and the op
    grid (ops whose status changes first, then all in a collapsed block)."""
    versions = grid.versions
    head = "| | " + " | ".join(str(v) for v in versions) + " |"
    rule = "|---" * (len(versions) + 1) + "|"
    lines = [f"## {title}", ""]
    if not versions:
        return "\n".join([*lines, "No runs with a torch version.", ""])
    lines += ["### Cases per status", "", head, rule]
    for status in STATUSES:
        cells = [str(grid.counts(v).get(status, 0)) for v in versions]
        if any(c != "0" for c in cells):
            lines.append(f"| {status} | " + " | ".join(cells) + " |")
    findings = version_findings(grid)
    lines += ["", f"### Findings across versions: {len(findings)}", ""]
    if findings:
        lines += [
            "Failing cases grouped by root cause (check + message with numbers, shapes, dtypes "
            "and names masked + crash signature).",
            "",
            "| finding | when | " + " | ".join(str(v) for v in versions) + " | repro |",
            "|---|---|" + "---|" * len(versions) + "---|",
        ]
        for vf in findings[:max_rows]:
            counts = [str(len(vf.cases_by_version.get(v, []))) for v in versions]
            repro = vf.finding.representative.repro
            lines.append(
                f"| `{vf.finding.id}` {_md_escape(vf.finding.title)} | **{vf.headline()}** | "
                + " | ".join(counts)
                + f" | {'`' + _md_escape(repro) + '`' if repro else ''} |"
            )
        if len(findings) > max_rows:
            lines.append(f"| ... {len(findings) - max_rows} more | |" + " |" * len(versions) + " |")
        for vf in findings[:max_rows]:
            lines += ["", *_finding_details_md(vf, grid, max_rows)]
    else:
        lines.append("None: no case fails on any version.")
    firsts = grid.first_changes()
    lines += [
        "",
        f"<details><summary>Cases whose status changes across versions: {len(firsts)}</summary>",
        "",
    ]
    if firsts:
        lines += ["| case | first changed in | kind | from | to |", "|---|---|---|---|---|"]
        for ch in firsts[:max_rows]:
            lines.append(
                f"| `{_md_escape(ch.case)}` | **{ch.version}** | {ch.kind} | {ch.before} | "
                f"{ch.after} |"
            )
        if len(firsts) > max_rows:
            lines.append(f"| ... {len(firsts) - max_rows} more | | | | |")
    else:
        lines.append("None: every case has the same status on every version.")
    lines += ["", "</details>"]
    if comparison is not None:
        for name, rows, groups in (
            (
                "New failures since the previous nightly",
                comparison.new_failures,
                comparison.failure_groups,
            ),
            (
                "New passes since the previous nightly",
                comparison.new_passes,
                comparison.pass_groups,
            ),
        ):
            lines += ["", f"### {name}: {len(rows)} in {len(groups)} findings", ""]
            for fid, ftitle, group in groups[:max_rows]:
                lines += [
                    f"<details><summary><code>{fid}</code> {html.escape(ftitle)}: "
                    f"{case_count(len(group))}</summary>",
                    "",
                    "| case | torch | before | now |",
                    "|---|---|---|---|",
                ]
                for case, version, before, now in group[:max_rows]:
                    lines.append(f"| `{_md_escape(case)}` | {version} | {before} | {now} |")
                lines += ["", "</details>", ""]
    changing = [op for op in sorted(grid.ops) if len(set(grid.ops[op].values())) > 1]

    def op_rows(ops: Sequence[str]) -> list[str]:
        return [
            f"| `{_md_escape(op)}` | "
            + " | ".join(grid.ops[op].get(v, MISSING) for v in versions)
            + " |"
            for op in ops
        ]

    lines += ["", f"### Ops whose status differs across versions: {len(changing)}", ""]
    if changing:
        lines += [head.replace("| |", "| op |", 1), rule, *op_rows(changing[:max_rows])]
    lines += ["", "<details><summary>Op x torch-version grid (worst status per op)</summary>", ""]
    lines += [head.replace("| |", "| op |", 1), rule, *op_rows(sorted(grid.ops)), "", "</details>"]
    return "\n".join(lines) + "\n"


_COLOURS = {
    "crashed": "#7f0000",
    "hung": "#8a3b12",
    "error": "#b30000",
    "not-run": "#3c3c3c",
    "failed": "#e34a33",
    "blocked": "#f0a08c",
    "xpassed": "#fc8d59",
    "xfailed": "#fdd49e",
    "unsupported": "#7d8fa8",
    "torch-bug": "#9b6fd0",
    "passed": "#41ab5d",
    "skipped": "#bdbdbd",
    MISSING: "#ffffff",
}


def heatmap_png(grid: VersionGrid, max_ops: int = 400) -> bytes:
    """A PNG heatmap of the op x version grid (changing ops first), made with matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    keys = [*STATUSES, MISSING]
    index = {s: i for i, s in enumerate(keys)}
    ops = sorted(grid.ops, key=lambda op: (len(set(grid.ops[op].values())) == 1, op))[:max_ops]
    data = [[index.get(grid.ops[op].get(v, MISSING), 0) for v in grid.versions] for op in ops]
    if not data:
        data, ops = [[len(keys) - 1] * max(len(grid.versions), 1)], ["(no cases)"]
    height = min(2 + 0.18 * len(ops), 60)
    fig, ax = plt.subplots(figsize=(2 + 0.7 * max(len(grid.versions), 1), height))
    cmap = ListedColormap([_COLOURS[k] for k in keys])
    ax.imshow(
        data, aspect="auto", cmap=cmap, vmin=-0.5, vmax=len(keys) - 0.5, interpolation="nearest"
    )
    ax.set_xticks(range(len(grid.versions)), [str(v) for v in grid.versions], rotation=45)
    ax.set_yticks(range(len(ops)), ops, fontsize=6)
    ax.set_xlabel("torch")
    used = sorted(
        {grid.ops[op].get(v, MISSING) for op in grid.ops for v in grid.versions},
        key=lambda s: index.get(s, 0),
    )
    ax.legend(
        handles=[Patch(color=_COLOURS[s], label="not run" if s == MISSING else s) for s in used],
        loc="upper left",
        bbox_to_anchor=(1.01, 1),
        fontsize=7,
    )
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def render_versions_html(
    grid: VersionGrid,
    comparison: Comparison | None = None,
    *,
    title: str = "Torch version report",
    generated: str = "",
) -> str:
    """A self-contained HTML page: the heatmap (base64 PNG), first changes and the op grid."""
    esc = html.escape
    try:
        png = base64.b64encode(heatmap_png(grid)).decode("ascii")
        image = f"<img alt='op x torch-version heatmap' src='data:image/png;base64,{png}'>"
    except ImportError:  # matplotlib is a dev extra: the tables still work without it
        image = "<p>(no heatmap: pip install matplotlib)</p>"
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{esc(title)}</title><style>body{{font-family:sans-serif}}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;"
        "font-size:12px}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        f"<p>{esc(generated)}</p>" if generated else "",
        image,
    ]
    findings = version_findings(grid)
    heads = "".join(f"<th>{esc(str(v))}</th>" for v in grid.versions)
    parts += [
        f"<h2>Findings across versions: {len(findings)}</h2>",
        "<p>Failing cases grouped by root cause; click a finding for its cases.</p>",
        f"<table><tr><th>finding</th><th>when</th>{heads}</tr>",
    ]
    for vf in findings:
        counts = "".join(
            f"<td>{len(vf.cases_by_version.get(v, [])) or ''}</td>" for v in grid.versions
        )
        parts.append(
            f"<tr><td><a href='#{vf.finding.id}'><code>{vf.finding.id}</code></a> "
            f"{esc(vf.finding.title)}</td><td><b>{esc(vf.headline())}</b></td>{counts}</tr>"
        )
    parts.append("</table>")
    for vf in findings:
        rep = vf.finding.representative
        cases = sorted({c for ids in vf.cases_by_version.values() for c in ids})
        parts += [
            f"<details id='{vf.finding.id}'><summary><code>{vf.finding.id}</code> "
            f"{esc(vf.finding.title)}: {case_count(len(cases))}, {esc(vf.headline())}</summary>",
            f"<p>representative <code>{esc(rep.id)}</code>: "
            f"{esc(_text(rep.message))}<br>repro: <code>{esc(rep.repro)}"
            f"</code></p><p>ops: {esc(', '.join(vf.finding.ops))}</p>",
            f"<table><tr><th>case</th>{heads}</tr>",
        ]
        for case in cases:
            cells = "".join(
                f"<td style='background:{_COLOURS.get(st, '#fff')}'>{esc(st)}</td>"
                for st in (grid.status(case, v) for v in grid.versions)
            )
            parts.append(f"<tr><td>{esc(case)}</td>{cells}</tr>")
        parts.append("</table></details>")
    parts += [
        "<h2>First version where a case changed</h2><table>",
        "<tr><th>case</th><th>first changed in</th><th>kind</th><th>from</th><th>to</th></tr>",
    ]
    for ch in grid.first_changes():
        parts.append(
            f"<tr><td>{esc(ch.case)}</td><td><b>{esc(ch.version)}</b></td><td>{ch.kind}</td>"
            f"<td>{esc(ch.before)}</td><td>{esc(ch.after)}</td></tr>"
        )
    parts.append("</table>")
    if comparison is not None:
        for name, rows in (
            ("New failures since the previous nightly", comparison.new_failures),
            ("New passes since the previous nightly", comparison.new_passes),
        ):
            parts.append(f"<h2>{name}: {len(rows)}</h2><table>")
            parts += ["<tr>" + "".join(f"<td>{esc(x)}</td>" for x in row) + "</tr>" for row in rows]
            parts.append("</table>")
    parts.append("<h2>Op x torch-version grid</h2><table><tr><th>op</th>")
    parts += [f"<th>{esc(str(v))}</th>" for v in grid.versions]
    parts.append("</tr>")
    for op in sorted(grid.ops):
        cells = "".join(
            f"<td style='background:{_COLOURS.get(s, '#fff')}'>{esc(s)}</td>"
            for s in (grid.ops[op].get(v, MISSING) for v in grid.versions)
        )
        parts.append(f"<tr><td>{esc(op)}</td>{cells}</tr>")
    parts.append("</table></body></html>\n")
    return "\n".join(parts)

"""A campaign's results as tables: killed / survived / equivalent / ... per operator group and
per op category, the score (killed share of the mutants that are not equivalent), every
survivor with its one-line repro; and the known gaps docs/POWER.md lists (a survivor that
matches none fails `--check`)."""

from __future__ import annotations

import fnmatch
import re
from collections import Counter
from pathlib import Path

from conformance.measure.markers import read_block
from conformance.measure.mutants.campaign import VERDICTS, Result

KNOWN_BEGIN, KNOWN_END = "<!-- mutants-known:begin -->", "<!-- mutants-known:end -->"
TABLE_BEGIN, TABLE_END = "<!-- mutants:begin -->", "<!-- mutants:end -->"
SHOWN = tuple(v for v in VERDICTS if v != "not-run")  # the tables' columns
MISSES = ("survived", "killed-elsewhere", "error", "unreached")


def score(results: list[Result]) -> tuple[int, int]:
    """(killed or crashed, judged and neither equivalent nor unobservable on this device)."""
    judged = [r for r in results if r.verdict not in ("equivalent", "unobservable", "not-run")]
    return sum(r.verdict in ("killed", "crashed") for r in judged), len(judged)


def _rows(results: list[Result], key: str) -> list[str]:
    groups: dict[str, Counter] = {}
    for r in results:
        groups.setdefault(getattr(r.mutant, key), Counter())[r.verdict] += 1
    lines = [
        f"| {key} | " + " | ".join(SHOWN) + " | score |",
        "| --- |" + " --- |" * (len(SHOWN) + 1),
    ]
    for name, counts in sorted(groups.items()):
        killed, judged = score([r for r in results if getattr(r.mutant, key) == name])
        share = f"{100 * killed / judged:.1f} %" if judged else "-"
        lines.append(f"| {name} | " + " | ".join(str(counts[v]) for v in SHOWN) + f" | {share} |")
    return lines


def render(results: list[Result], known: dict[str, str], header: str = "") -> str:
    """The campaign's Markdown: totals, the two tables, every miss with why and its repro, and
    every unobservable mutant with why."""
    counts = Counter(r.verdict for r in results)
    killed, judged = score(results)
    lines = [header] if header else []
    lines.append(
        f"{len(results)} mutants: "
        + ", ".join(f"{counts[v]} {v}" for v in VERDICTS if counts[v])
        + (
            f"; score {100 * killed / judged:.1f} % ({killed} of {judged} judged: neither "
            "equivalent nor unobservable)"
            if judged
            else ""
        )
    )
    lines += ["", *_rows(results, "group"), "", *_rows(results, "category"), ""]
    misses = [r for r in results if r.verdict in MISSES]
    if misses:
        lines += [
            "| mutant | verdict | known gap | what it changed / the case | repro |",
            "| --- | --- | --- | --- | --- |",
        ]
        for r in misses:
            why = known_gap(r.mutant.name, known) or "NEW"
            what = _cell(r.case + (": " if r.case else "") + r.message)
            lines.append(
                f"| `{r.mutant.name}` | {r.verdict} | {_cell(why)} | {what} | `{r.mutant.repro}` |"
            )
    unseen = [r for r in results if r.verdict == "unobservable"]
    if unseen:  # out of the score, never out of sight
        lines += ["", "| unobservable mutant | why no check of this run sees it |", "| --- | --- |"]
        lines += [f"| `{r.mutant.name}` | {_cell(r.message)} |" for r in unseen]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:240]


def known_gaps(path: Path) -> dict[str, str]:
    """docs/POWER.md's known gaps: pattern -> why (lines "- `PATTERN`: WHY" between markers)."""
    block = read_block(path, KNOWN_BEGIN, KNOWN_END)
    return {
        m.group(1): m.group(2).strip() for m in re.finditer(r"^- `([^`]+)`:?\s*(.*)$", block, re.M)
    }


def known_gap(name: str, known: dict[str, str]) -> str:
    """Why a missed mutant is a known gap (its pattern's reason), or ""."""
    return next(
        (why or pattern for pattern, why in known.items() if fnmatch.fnmatchcase(name, pattern)), ""
    )


def new_misses(results: list[Result], known: dict[str, str]) -> list[Result]:
    return [r for r in results if r.verdict in MISSES and not known_gap(r.mutant.name, known)]

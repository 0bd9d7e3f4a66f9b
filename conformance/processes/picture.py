"""The processes drawn from their table (kinds.py), so the words cannot drift from the code:
the tree and table of docs/ARCHITECTURE.md (between `DOC_BEGIN` and `DOC_END`; rewrite them
with `python -m conformance.processes.picture`) and the run header's isolation and fork-rule
words (harness/plan.py asks `runner_words`, harness/header.py `fork_rule`)."""

from __future__ import annotations

import sys
from pathlib import Path

from conformance.processes import kinds

DOC_BEGIN = "<!-- processes:begin -->"
DOC_END = "<!-- processes:end -->"
DOC = Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md"


DEVICE = {
    "yes": "opens the device",
    "no": "never touches the device",
    "hidden": "accelerators hidden",
    "isolate none": "the device only with --isolate none",
}
FORKS = {"never": "never forks", "its job": "forks on request", "while clean": "forks while clean"}


def _facts(k: kinds.Kind) -> str:
    done = [f"{k.start}", DEVICE[k.device], FORKS[k.forks]]
    done += ["runs cases"] if k.runs_cases else []
    done += ["writes results"] if k.writes_results else []
    return ", ".join(done)


def tree() -> list[str]:
    """Each kind under the first kind that starts it (the others named on its line)."""
    lines: list[str] = []

    def draw(k: kinds.Kind, prefix: str, last: bool, top: bool) -> None:
        branch = "" if top else ("`- " if last else "|- ")
        more = f"; also from {', '.join(k.parents[1:])}" if k.parents[1:] else ""
        lines.append(f"{prefix}{branch}{k.name} ({_facts(k)}{more})")
        below = [c for c in kinds.children(k.name) if c.parents[0] == k.name and c is not k]
        step = "" if top else ("   " if last else "|  ")
        for i, child in enumerate(below):
            draw(child, prefix + step, i == len(below) - 1, False)

    for root in (k for k in kinds.KINDS if not k.parents or k.parents[0] == k.name):
        draw(root, "", True, True)
    return lines


def markdown() -> str:
    """The doc's section: the tree, then one row per kind."""
    rows = [
        "| kind | started by | channel to its parent | entry | about it |",
        "| --- | --- | --- | --- | --- |",
    ]
    for k in kinds.KINDS:
        starters = ["the user"] if "user" in k.start else []
        parents = ", ".join(starters + [p for p in k.parents if p != k.name])
        rows.append(f"| `{k.name}` | {parents} | {k.channel} | {k.entry} | {k.why} |")
    body = ["```", *tree(), "```", "", *rows]
    return "\n".join([DOC_BEGIN, *body, DOC_END])


def runner_words(mode: str) -> str:
    """How a runner of `mode` ("fork", "spawn") comes to be, for the run header."""
    if mode == "fork":
        zygote = kinds.kind("runner-zygote")
        return f"a child forked by the runner zygote, which {zygote.why}"
    return f"a fresh interpreter {kinds.kind('spawned-runner').why}"


def fork_rule() -> str:
    """The header's words for who may fork, from the table: the zygotes (which never open the
    device) and the kinds that fork only while clean."""
    zygotes = [k.name for k in kinds.KINDS if k.forks == "its job"]
    clean = [k.name for k in kinds.KINDS if k.forks == "while clean"]
    return (
        f"no process that forks touches the device or its driver: the zygotes never do "
        f"({', '.join(zygotes)}), and {', '.join(clean)} fork only while clean (one thread, "
        "the device untouched: processes/kinds.py, forking.py)"
    )


def write(doc: Path = DOC) -> None:
    text = doc.read_text()
    start, end = text.index(DOC_BEGIN), text.index(DOC_END) + len(DOC_END)
    doc.write_text(text[:start] + markdown() + text[end:])


if __name__ == "__main__":
    write()
    sys.exit(0)

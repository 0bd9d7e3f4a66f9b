"""Small steps of the CI workflows, kept in Python so that the workflows stay thin and the local
rehearsal (:mod:`conformance.ci.rehearse`) runs exactly the same code.

    python -m conformance.ci.steps sessions [--filter REGEX] [--shards N] [--matrix FILE]
    python -m conformance.ci.steps summary FILE...              # -> $GITHUB_STEP_SUMMARY, capped

``sessions`` lists the ``conformance-*`` nox sessions (``nox -l --json -t conformance``: the cells
of the matrix file the noxfile registers), keeps those matching ``--filter`` and writes
``sessions=<JSON list>`` to ``$GITHUB_OUTPUT`` (stdout too), with the shards each cell runs as:
``shards=["1-of-N", ..., "N-of-N"]`` (``--shards``, else ``[nightly].shards`` of the matrix file:
``$CONFORMANCE_MATRIX``, else ``--matrix``). ``summary`` appends files to the step summary,
each cut at a line boundary so the whole stays under GitHub's 1 MiB limit per step.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from conformance.ci.matrix_file import CONFORMANCE_MATRIX_ENV, load_matrix, parse_shards
from conformance.ci.matrix_spec import MatrixError
from conformance.processes import launch
from conformance.sharding import Shard

SUMMARY_LIMIT = 1_000_000  # bytes per step (GitHub refuses more than 1 MiB)


def list_sessions(pattern: str = "", nox: Sequence[str] | None = None) -> list[str]:
    """The ``conformance-*`` sessions of the noxfile in the current folder matching ``pattern``."""
    command = list(nox) if nox else ([shutil.which("nox")] if shutil.which("nox") else [])
    if not command:
        command = [sys.executable, "-m", "nox"]
    proc = launch.tool(
        [*command, "-l", "--json", "-t", "conformance"], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"nox -l failed: {(proc.stderr or proc.stdout).strip()}")
    names = [s["session"] for s in json.loads(proc.stdout)]
    regex = re.compile(pattern or ".*")
    return [n for n in names if n.startswith("conformance-") and regex.search(n)]


def append_summary(paths: Sequence[str], limit: int = SUMMARY_LIMIT) -> int:
    """Append ``paths`` to ``$GITHUB_STEP_SUMMARY`` (stdout when unset); returns bytes written."""
    budget = limit // max(len(paths), 1)
    chunks = []
    for name in paths:
        path = Path(name)
        if not path.is_file():
            chunks.append(f"\n(no {path.name}: the step that writes it did not run)\n")
            continue
        text = path.read_text(encoding="utf-8")
        if len(text.encode()) > budget:
            cut = text.encode()[:budget].decode("utf-8", errors="ignore")
            cut = cut[: cut.rfind("\n") + 1]
            text = cut + f"\n\n... cut at {budget} bytes; the full file is in the artifacts\n"
        chunks.append(text)
    data = "\n".join(chunks)
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(data)
    else:
        sys.stdout.write(data)
    return len(data.encode())


def main(argv: Sequence[str] | None = None) -> int:
    """Command line."""
    parser = argparse.ArgumentParser(prog="python -m conformance.ci.steps", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_sessions = sub.add_parser("sessions", help="the nightly's job matrix -> $GITHUB_OUTPUT")
    p_sessions.add_argument("--filter", default="", help="Python regex over session names")
    p_sessions.add_argument(
        "--shards", default="", help="jobs per cell (empty: [nightly].shards of the matrix file)"
    )
    p_sessions.add_argument("--matrix", default=None, help="the matrix file the noxfile registers")
    p_summary = sub.add_parser("summary", help="append files to $GITHUB_STEP_SUMMARY, capped")
    p_summary.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "sessions":
        try:
            count = (
                parse_shards(args.shards, "--shards")
                if args.shards.strip()
                else load_matrix(os.environ.get(CONFORMANCE_MATRIX_ENV) or args.matrix).shards
            )
        except MatrixError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        names = list_sessions(args.filter)
        if not names:
            print(f"no conformance session matches the filter {args.filter!r}", file=sys.stderr)
            return 1
        shards = [Shard(k, count).name for k in range(1, count + 1)]
        lines = [f"sessions={json.dumps(names)}", f"shards={json.dumps(shards)}"]
        output = os.environ.get("GITHUB_OUTPUT")
        if output:
            with open(output, "a", encoding="utf-8") as fh:
                fh.write("".join(line + "\n" for line in lines))
        print("\n".join(names))
        print(f"{count} shard(s) per session")
        return 0
    append_summary(args.files)
    return 0


if __name__ == "__main__":
    sys.exit(main())

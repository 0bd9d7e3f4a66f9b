"""A block of generated text between two HTML comment markers in a document (docs/POWER.md):
the power table and the mutation campaign's table are written there, its known gaps read."""

from __future__ import annotations

from pathlib import Path


def read_block(path: Path, begin: str, end: str) -> str:
    """The text between the markers of `path` ("" where the file or the markers are missing)."""
    text = path.read_text() if path.exists() else ""
    return text.partition(begin)[2].partition(end)[0]


def write_block(path: Path, begin: str, end: str, body: str) -> None:
    """Replace the text between the markers of `path` with `body`; markers missing from the
    file are appended, a missing file is written."""
    text = path.read_text() if path.exists() else ""
    if begin not in text:
        text += f"{chr(10) if text else ''}{begin}\n{end}\n"
    head, _, rest = text.partition(begin)
    tail = rest.partition(end)[2]
    path.write_text(f"{head}{begin}\n{body}{end}{tail}")

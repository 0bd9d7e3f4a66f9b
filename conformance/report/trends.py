"""Trends the results store drew (`python -m conformance.history pictures -o DIR`): its pictures
per cell and its flaky cases, read from DIR's trends.json, for the HTML report (pictures inline,
flaky cases marked) and the scorecard (pictures beside it). The report never reads the store."""

from __future__ import annotations

import base64
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from conformance.report.load import ReportError

INDEX = "trends.json"


@dataclass(frozen=True)
class Picture:
    """One trend picture of a cell."""

    cell: str
    title: str
    path: Path

    @property
    def data_uri(self) -> str:
        """The picture inline (the HTML page stays one self-contained file)."""
        data = base64.b64encode(self.path.read_bytes()).decode("ascii")
        return f"data:image/svg+xml;base64,{data}"


@dataclass
class Trends:
    """The pictures and the flaky cases (cell -> case id -> why) of a trends folder."""

    folder: Path
    pictures: list[Picture] = field(default_factory=list)
    flaky: dict[str, dict[str, str]] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)

    def flaky_note(self, cell: str, case: str) -> str:
        """Why the case is flaky in that cell ('' if it is not)."""
        return self.flaky.get(cell, {}).get(case, "")

    def copy_pictures(self, dest: Path) -> list[Path]:
        """The pictures copied into ``dest`` (a scorecard's folder links them)."""
        dest.mkdir(parents=True, exist_ok=True)
        return [Path(shutil.copy2(p.path, dest / p.path.name)) for p in self.pictures]


def load_trends(folder: str | Path) -> Trends:
    """The trends folder's index; one-line ReportError where it is missing or unreadable."""
    root = Path(folder)
    try:
        index = json.loads((root / INDEX).read_text(encoding="utf-8"))
        cells = index["cells"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ReportError(
            f"--trends {root}: no readable {INDEX} ({exc.__class__.__name__}): write it with "
            f"`python -m conformance.history pictures --output {root}`"
        ) from None
    trends = Trends(root)
    for cell, entry in cells.items():
        trends.runs[cell] = int(entry.get("runs") or 0)
        trends.flaky[cell] = dict(entry.get("flaky") or {})
        for picture in entry.get("pictures") or []:
            path = root / picture["file"]
            if path.is_file():
                trends.pictures.append(Picture(cell, picture["title"], path))
    return trends

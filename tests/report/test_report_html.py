"""conformance/report/html.py: the page renders in headless Chromium with the right grid.

Chromium comes from Debian (`.ci/install-chromium`, called by .ci/run); without it the test skips.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

import pytest
from report_fixtures import DTYPES, LAYOUTS, OPS

from conformance.report.html import render_html
from conformance.report.load import load_results

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _browser() -> str | None:
    return next((p for b in BROWSERS if (p := shutil.which(b))), None)


class _Grid(HTMLParser):
    """Counts grid cells per session section and reads the filter counter."""

    def __init__(self) -> None:
        super().__init__()
        self.session = ""
        self.cells: Counter[str] = Counter()
        self.empty: Counter[str] = Counter()
        self.statuses: Counter[str] = Counter()
        self.in_count = False
        self.count_text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "section" and "run" in classes:
            self.session = a.get("data-session") or ""
        if tag == "td" and "cell" in classes:
            self.cells[self.session] += 1
            self.statuses[a.get("data-status") or ""] += 1
        if tag == "td" and "empty" in classes:
            self.empty[self.session] += 1
        self.in_count = a.get("id") == "f-count"

    def handle_data(self, data: str) -> None:
        if self.in_count:
            self.count_text += data


def _drop(folder: Path, op: str, dtype: str) -> None:
    """Remove one (op, dtype) from a results folder so that its grid has empty cells."""
    for f in folder.glob("cases-*.jsonl"):
        keep = [
            ln
            for ln in f.read_text(encoding="utf-8").splitlines()
            if not (json.loads(ln)["op"] == op and json.loads(ln)["dtype"] == dtype)
        ]
        f.write_text("".join(ln + "\n" for ln in keep), encoding="utf-8")


@pytest.fixture
def page(make_results: Callable[..., Path], tmp_path: Path) -> Path:
    a = make_results("conformance-2.8-guard", "2.8.0", "guard", truncate=True)
    b = make_results("conformance-2.13", "2.13.0", "malloc")
    _drop(b, "abs", "int64")
    out = tmp_path / "report.html"
    out.write_text(render_html(load_results([a, b])), encoding="utf-8")
    return out


def test_html_structure_without_a_browser(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    grid = _Grid()
    grid.feed(text)
    full = len(OPS) * len(DTYPES) * len(LAYOUTS)
    assert grid.cells == {"conformance-2.8-guard": full, "conformance-2.13": full - len(LAYOUTS)}
    assert grid.empty == {"conformance-2.13": len(LAYOUTS)}
    assert "http://" not in text and "https://" not in text  # no CDN: works offline
    assert "Segmentation fault" in text and "pytest conformance -k" in text


def test_html_renders_in_headless_chromium(page: Path, tmp_path: Path) -> None:
    browser = _browser()
    if browser is None:
        pytest.skip("no Chromium on PATH (.ci/install-chromium installs it)")
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    proc = subprocess.run(
        [*cmd, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=90
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    grid = _Grid()
    grid.feed(proc.stdout)
    full = len(OPS) * len(DTYPES) * len(LAYOUTS)
    assert grid.cells == {"conformance-2.8-guard": full, "conformance-2.13": full - len(LAYOUTS)}
    # the worst status over paths colours a cell: 2.8-guard has the masked_fill_ failures
    assert grid.statuses["crashed"] == 2 and grid.statuses["failed"] == 2
    # the inline script ran: it fills the filter counter after applying the (empty) filters
    assert "ops," in grid.count_text and "failures shown" in grid.count_text

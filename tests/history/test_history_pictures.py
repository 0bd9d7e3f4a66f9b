"""Trends drawn from the store: the pictures, the HTML report that shows them (parsed, and
rendered by headless Chromium where one is installed), the scorecard that links them, and the
flaky case marked in the report, the scorecard and the manifest writer's output."""

from __future__ import annotations

import base64
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conformance.history.__main__ import main as history
from conformance.measure.baseline import main as baseline
from conformance.report.__main__ import main as report
from tests.history.synthetic import write_run

FLAKY = "test_matches_cpu[abs-float32-contiguous-native]"


@pytest.fixture
def nights(tmp_path: Path) -> tuple[str, list[Path], Path]:
    """Four nights of one configuration: abs float32 passes, fails, passes, fails (flaky); mul
    float32 fails every night (not flaky); the store, the folders and the pictures' folder."""
    store, folders = str(tmp_path / "h.db"), []
    for night, (absolute, mul) in enumerate(
        [("passed", "failed"), ("failed", "failed"), ("passed", "failed"), ("failed", "failed")]
    ):
        cases = {"abs-float32": absolute, "mul-float32": mul, "neg-int64": "passed"}
        folders.append(write_run(tmp_path / f"n{night}" / "conformance-2.13", cases,
                                 started=f"2026-11-0{night + 1}T02:00:00+00:00"))  # fmt: skip
    assert history(["--store", store, "add", *map(str, folders)]) == 0
    pictures = tmp_path / "trends"
    assert history(["--store", store, "pictures", "--output", str(pictures)]) == 0
    return store, folders, pictures


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.pictures: list[tuple[str, str]] = []
        self.badges: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        if tag == "img" and (attr.get("src") or "").startswith("data:image/svg+xml;base64,"):
            self.pictures.append((attr.get("alt") or "", attr["src"] or ""))
        if tag == "span" and "flaky" in (attr.get("class") or "").split():
            self.badges.append(attr.get("title") or "")


def test_the_report_draws_the_trends_and_marks_the_flaky_case(nights, tmp_path, capsys) -> None:
    _, folders, pictures = nights
    page = tmp_path / "report.html"
    card = tmp_path / "card"
    argv = [
        str(folders[-1]),
        "--html",
        str(page),
        "--scorecard",
        str(card),
        "--trends",
        str(pictures),
    ]
    assert report(argv) == 0
    parsed = _Page()
    parsed.feed(page.read_text())
    titles = [alt for alt, _ in parsed.pictures]
    assert titles == [f"conformance-2.13: {t}" for t in
                      ("pass rate", "failing cases by check", "findings opened and closed",
                       "run time and timeouts")]  # fmt: skip
    for _, src in parsed.pictures:
        svg = base64.b64decode(src.split(",", 1)[1]).decode()
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert parsed.badges == ["flaky: failed 2 and passed 2 of 4 runs on one configuration "
                             "(flake rate 100%)"]  # fmt: skip
    text = (card / "scorecard.md").read_text()
    assert "![conformance-2.13: pass rate](trends/conformance-2.13-pass-rate.svg)" in text
    assert (card / "trends" / "conformance-2.13-pass-rate.svg").is_file()
    assert "(**flaky**: 1 of its cases)" in text and "1 flaky case(s)" in text


def test_the_manifest_writer_says_which_entry_is_flaky(nights, tmp_path) -> None:
    store, folders, _ = nights
    manifest = tmp_path / "m.toml"
    assert baseline([str(folders[-1]), "-o", str(manifest), "--store", store]) == 0
    text = manifest.read_text()
    flaky = [line for line in text.splitlines() if "FLAKY" in line]
    assert len(flaky) == 1 and FLAKY in flaky[0], text  # abs's entry; mul's is not flaky


def test_a_trends_folder_without_its_index_is_one_line(tmp_path, capsys) -> None:
    run = write_run(tmp_path / "r" / "c", {"abs-float32": "passed"})
    assert report([str(run), "--html", str(tmp_path / "x.html"), "--trends", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "python -m conformance.history pictures --output" in err[0]


def _chromium() -> str | None:
    names = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
    return next((found for n in names if (found := shutil.which(n))), None)


def test_a_browser_renders_the_pictures_without_console_errors(nights, tmp_path) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("no headless Chromium here (apt install chromium): the page is parsed only")
    _, folders, pictures = nights
    page = tmp_path / "report.html"
    assert report([str(folders[-1]), "--html", str(page), "--trends", str(pictures)]) == 0
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
         "--v=0", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert any('"trends: 4 of 4 pictures rendered"' in line for line in console), done.stderr[
        -3000:
    ]
    assert [line for line in console if "rendered" not in line] == [], console

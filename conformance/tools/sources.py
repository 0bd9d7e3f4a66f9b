"""Copy the buildable sources into a fresh folder, so that every torch version (a nox cell, a
bisect probe) builds the backend on its own and never shares compiled objects with another."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD_SOURCES = ("setup.py", "pyproject.toml", "README.md", "MANIFEST.in", "backend", "conformance")
BUILD_IGNORE = shutil.ignore_patterns(
    "build", "dist", "*.egg-info", "__pycache__", "*.so", "*.o", "*.pyc", ".pytest_cache"
)


def copy_sources(dest: Path, root: Path = ROOT) -> Path:
    """Copy the buildable sources of ``root`` into a fresh ``dest``; return ``dest``."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for name in BUILD_SOURCES:
        path = root / name
        if path.is_dir():
            shutil.copytree(path, dest / name, ignore=BUILD_IGNORE, copy_function=shutil.copy)
        elif path.is_file():
            shutil.copy(path, dest / name)
    if not (dest / "README.md").exists():
        (dest / "README.md").write_text("torch-conformance\n", encoding="utf-8")
    return dest

"""Copy and fingerprint a backend's buildable sources.

Every torch version (a nox cell, a bisect probe) builds the backend in a fresh copy of its sources,
so two torch versions never share compiled objects. The fingerprint (a hash of the watched files'
paths and contents) is what decides whether a cached build is still current.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What echo_npu's build needs from this checkout (matrices/matrix.toml names the same list).
BUILD_SOURCES = ("setup.py", "pyproject.toml", "README.md", "backend", "conformance")
#: Never copied nor hashed: build products, caches, VCS and virtual environments, results.
DEFAULT_EXCLUDE = (
    ".git",
    ".nox",
    ".venv",
    "venv",
    "build",
    "dist",
    "results",
    "*.egg-info",
    "__pycache__",
    "*.so",
    "*.o",
    "*.pyc",
    ".pytest_cache",
    ".ruff_cache",
    ".conformance-cache",
)


def _excluded(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in patterns)


def iter_files(
    root: Path, include: Sequence[str] = (), exclude: Sequence[str] = ()
) -> Iterator[Path]:
    """Files under ``root`` (only ``include`` entries when given), relative, sorted; a file or
    folder whose name matches ``exclude`` or :data:`DEFAULT_EXCLUDE` is left out."""
    patterns = (*DEFAULT_EXCLUDE, *exclude)
    tops = sorted(include) if include else sorted(p.name for p in root.iterdir())
    for top in tops:
        path = root / top
        if _excluded(path.name, patterns):
            continue
        if path.is_file():
            yield Path(top)
        elif path.is_dir():
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames[:] = sorted(d for d in dirnames if not _excluded(d, patterns))
                for name in sorted(filenames):
                    if not _excluded(name, patterns):
                        yield (Path(dirpath) / name).relative_to(root)


def copy_sources(
    dest: Path,
    root: Path = ROOT,
    include: Sequence[str] = BUILD_SOURCES,
    exclude: Sequence[str] = (),
) -> Path:
    """Copy the buildable sources of ``root`` into a fresh ``dest``; return ``dest``."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for rel in iter_files(root, include, exclude):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / rel, target)
    return dest


def fingerprint(root: Path, paths: Sequence[str] = (), exclude: Sequence[str] = ()) -> str:
    """A sha256 over the relative paths and contents of the files :func:`iter_files` yields."""
    digest = hashlib.sha256()
    for rel in iter_files(root, paths, exclude):
        digest.update(rel.as_posix().encode() + b"\0")
        digest.update(hashlib.sha256((root / rel).read_bytes()).digest())
    return digest.hexdigest()


def hash_settings(items: Iterable[object]) -> str:
    """A sha256 over the ``repr`` of build settings (command, environment, requirements ...)."""
    digest = hashlib.sha256()
    for item in items:
        digest.update(repr(item).encode() + b"\0")
    return digest.hexdigest()

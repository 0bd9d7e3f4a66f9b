"""Build a described backend into a venv and run the suite there: shared by nox and bisect.

- :func:`build_key`: a hash of the torch release, the build settings (command, environment,
  requirements, copied/watched paths) and the watched source files. A venv whose stamp
  (:data:`STAMP`) holds the same key is current; editing a watched file changes the key, so the next
  nox run or bisect probe rebuilds.
- :func:`build_environment`: the build command runs in a fresh copy of the sources with the venv
  active (``VIRTUAL_ENV``, its ``bin`` first on ``PATH``, ``uv`` reachable) and
  ``CONFORMANCE_TORCH_VERSION`` set.
- :func:`stage_suite` / :func:`suite_argv` / :func:`suite_environment`: the suite is pure Python;
  it is copied next to the run (never compiled, never taken from the backend's build) and run with
  ``python -m pytest conformance`` from there, with the backend's module, expectations, allocator
  and sanitizer settings.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from importlib import metadata
from pathlib import Path

from conformance.ci.launch import environment as preload_environment
from conformance.ci.matrix import Cell
from conformance.ci.matrix_spec import Release
from conformance.ci.sources import fingerprint, hash_settings

__all__ = [
    "STAMP",
    "build_environment",
    "build_key",
    "clear_stamp",
    "find_links",
    "probe_release",
    "read_stamp",
    "stage_suite",
    "suite_argv",
    "suite_environment",
    "suite_requirements",
    "write_stamp",
]

STAMP = ".conformance-build.json"
SUITE_PACKAGE = Path(__file__).resolve().parents[1]
_DIST = "torch-conformance"
#: Used when neither this checkout's pyproject.toml nor installed metadata can be read.
_FALLBACK_REQUIREMENTS = (
    "pytest>=8",
    "pytest-xdist>=3.5",
    "pytest-timeout>=2.3",
    "expecttest>=0.2",
    "numpy",
    "packaging>=23",
    "jinja2>=3.1",
)


def probe_release(version: str) -> Release:
    """A :class:`Release` for any torch version (bisect probes versions the matrix lacks)."""
    parts = version.split("+")[0].split(".")
    return Release(minor=".".join(parts[:2]), version=version)


def build_key(cell: Cell) -> str:
    """The build's identity: torch release + build settings + watched source files (16 hex)."""
    backend = cell.backend
    if backend is None:
        raise ValueError("a cell without a backend description has nothing to build")
    build = backend.build
    files = fingerprint(build.source, build.watch or build.include, build.exclude)
    settings = hash_settings(
        [
            cell.release.version,
            cell.release.extra,
            backend.module,
            build.command,
            build.include,
            build.exclude,
            build.watch,
            sorted(cell.build_env().items()),
            backend.requires,
            files,
        ]
    )
    return settings[:16]


def read_stamp(venv: Path) -> dict[str, object]:
    """The stamp of the last successful build in ``venv`` (empty if none)."""
    try:
        data = json.loads((venv / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_stamp(venv: Path, key: str, cell: Cell) -> None:
    """Record a finished build (written only after the build command succeeded)."""
    info = {"key": key, "torch": cell.release.version, "sanitizer": cell.sanitizer}
    if cell.backend is not None:
        info["module"] = cell.backend.module
        info["source"] = str(cell.backend.build.source)
    (venv / STAMP).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")


def clear_stamp(venv: Path) -> None:
    """Forget the last build (before a rebuild starts, so a failed build leaves no stamp)."""
    (venv / STAMP).unlink(missing_ok=True)


def find_links() -> list[str]:
    """--find-links for local wheel folders (CONFORMANCE_FIND_LINKS, PIP_FIND_LINKS).

    uv ignores pip's configuration; with this, a machine that keeps the CPU build of a torch
    release on disk (as pip finds it) installs that instead of downloading the CUDA build.
    """
    raw = f"{os.environ.get('CONFORMANCE_FIND_LINKS', '')} {os.environ.get('PIP_FIND_LINKS', '')}"
    args: list[str] = []
    for entry in raw.split():
        if entry.startswith(("http://", "https://")) or Path(entry).is_dir():
            args += ["--find-links", entry]
    return args


def _uv_directory() -> str | None:
    """The folder of the uv executable nox and bisect use, if uv is not on PATH already."""
    if shutil.which("uv"):
        return None
    try:
        from uv import find_uv_bin  # the `uv` Python package ships the binary

        return str(Path(find_uv_bin()).parent)
    except (ImportError, FileNotFoundError):
        candidate = Path(sys.executable).parent / "uv"
        return str(candidate.parent) if candidate.exists() else None


def build_environment(cell: Cell, venv: Path | None = None) -> dict[str, str]:
    """Environment of the build command: the cell's build env, ``MAX_JOBS``, torch version, and
    with ``venv`` the venv activated (nox activates its own)."""
    env = {
        "MAX_JOBS": os.environ.get("MAX_JOBS", str(os.cpu_count() or 2)),
        "CONFORMANCE_TORCH_VERSION": cell.release.version,
        **cell.build_env(),
    }
    path = os.environ.get("PATH", "")
    uv_dir = _uv_directory()
    if uv_dir:
        path = os.pathsep.join(p for p in (uv_dir, path) if p)
    if venv is not None:
        env["VIRTUAL_ENV"] = str(venv)
        path = os.pathsep.join(p for p in (str(venv / "bin"), path) if p)
    env["PATH"] = path
    return env


def stage_suite(dest: Path, cache_dir: Path) -> Path:
    """Copy the suite (the ``conformance`` package this module belongs to) into a fresh ``dest``
    with a ``pytest.ini`` of its own (a backend repository's pytest settings do not apply)."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    shutil.copytree(
        SUITE_PACKAGE,
        dest / "conformance",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"),
    )
    cache_dir.mkdir(parents=True, exist_ok=True)
    (dest / "pytest.ini").write_text(
        f"[pytest]\naddopts = -ra\ncache_dir = {cache_dir}\n", encoding="utf-8"
    )
    return dest


def suite_argv(cell: Cell, results: Path, *, junit: bool = True) -> list[str]:
    """Arguments after ``python``, run from the staged suite's folder: ``-m pytest -c pytest.ini
    conformance --results=... --expectations=...`` (``=`` forms: a separate option value naming
    an existing folder would count as a path when pytest picks its rootdir)."""
    args = ["-m", "pytest", "-c", "pytest.ini", "--rootdir=.", *cell.targets]
    args.append(f"--results={results}")
    if junit:
        args.append(f"--junitxml={results / 'junit.xml'}")
    files = cell.backend.expectation_files(cell.release.minor) if cell.backend else []
    args.append("--expectations=" + (",".join(str(f) for f in files) if files else "none"))
    return args


def suite_environment(cell: Cell) -> dict[str, str]:
    """Environment of the suite run: backend module/device, allocator, sanitizer env and
    preloads. Raises :class:`conformance.engine.checkers.LaunchError` if a preload is missing."""
    env: dict[str, str] = {}
    if cell.backend is not None:
        env["CONFORMANCE_BACKEND"] = cell.backend.module
        if cell.backend.device:
            env["CONFORMANCE_DEVICE"] = cell.backend.device
    env.update(cell.run_env())
    preload = cell.preload
    if preload:
        base = {k: v for k, v in env.items() if k == "ASAN_OPTIONS"}
        env.update(
            preload_environment(
                asan="asan" in preload, malloc_check="malloc-check" in preload, base=base
            )
        )
    return env


def suite_requirements(scenarios: bool = True) -> list[str]:
    """The suite's own requirements (torch excluded: each cell installs its own), from this
    checkout's pyproject.toml or the installed distribution's metadata."""
    from packaging.requirements import InvalidRequirement, Requirement

    raw: list[str] = []
    pyproject = SUITE_PACKAGE.parent / "pyproject.toml"
    if pyproject.is_file():
        try:
            import tomllib
        except ModuleNotFoundError:  # pragma: no cover - Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        if project.get("name") == _DIST:
            raw = list(project.get("dependencies", []))
            if scenarios:
                raw += project.get("optional-dependencies", {}).get("scenarios", [])
    if not raw:
        try:
            for text in metadata.requires(_DIST) or []:
                req = Requirement(text)
                if req.marker is None:
                    raw.append(text)
                elif scenarios and req.marker.evaluate({"extra": "scenarios"}):
                    raw.append(text.split(";")[0].strip())
        except metadata.PackageNotFoundError:
            raw = list(_FALLBACK_REQUIREMENTS)
    out = []
    for text in raw:
        try:
            name = Requirement(text).name.lower()
        except InvalidRequirement:
            name = text
        if name != "torch":
            out.append(text)
    return out

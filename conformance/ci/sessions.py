"""Nox sessions for the backend a matrix file describes: echo_npu in-tree, or yours.

A noxfile calls :func:`register`; this checkout's ``noxfile.py`` does, and so does the thin
``noxfile.py`` that ``python -m conformance.ci.init`` writes into a backend's repository::

    from conformance.ci.sessions import register
    register("conformance-matrix.toml")   # $CONFORMANCE_MATRIX overrides the path

Sessions (``nox -l``):

- ``conformance-<minor>[-<allocator>][-<sanitizer>]`` per matrix cell: a venv (uv) with that
  torch, the suite's requirements and the backend's ``requires``; the backend built by its
  ``[backend.build] command`` in a fresh copy of its sources unless the venv's build stamp holds
  the same build key (torch + build settings + watched sources; ``CONFORMANCE_REBUILD=1`` forces);
  the suite staged next to the venv and run into ``results/<session>/`` (a shard, ``--shard K/N``
  after ``--`` or ``$CONFORMANCE_SHARD``, into ``results/<session>-shard-K-of-N/``: the report
  merges the shards).
- ``conformance -- <cell> [pytest args]``: any cell by name.
- ``report``: Markdown + HTML + torch-version report and the scorecard over ``results/``.
- ``bisect -- EXPR --good A --bad B``: ``python -m conformance.bisect`` on the same matrix.
- ``nightly -- <cell>... [--shards N]``: a local rehearsal of the nightly workflow
  (:mod:`conformance.ci.rehearse`): its own steps, with those cells (as N shards each).

Paths (``results/``, ``.nox/``) are relative to ``root``, the noxfile's folder.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import nox

from conformance.ci.build import (
    SUITE_PACKAGE,
    build_environment,
    build_key,
    clear_stamp,
    find_links,
    read_stamp,
    stage_suite,
    suite_argv,
    suite_environment,
    suite_requirements,
    write_stamp,
)
from conformance.ci.matrix import (
    SESSION_PREFIX,
    Cell,
    Matrix,
    requested_sessions,
    unknown_session_error,
)
from conformance.ci.matrix_file import load_matrix, matrix_path
from conformance.ci.matrix_spec import MatrixError
from conformance.ci.sources import copy_sources
from conformance.engine.checkers import LaunchError
from conformance.errors import ConformanceUsageError
from conformance.sharding import Shard

__all__ = ["find_links", "register"]

REPORT_DEPS = ("jinja2>=3.1", "packaging>=23", "matplotlib>=3.7", "sqlalchemy>=2")


def append_history(
    session: nox.Session, dirs: list[str], root_dir: Path, results: Path
) -> list[str]:
    """The results appended to $CONFORMANCE_STORE (shards tied by CI's run id), the store's
    summary written to results/history.md and its trend pictures to results/trends/; returns
    the report's arguments that draw them (none without a store, or where it gave none). A
    store that cannot take the results is a line of the log, never a failed report."""
    where = os.environ.get("CONFORMANCE_STORE", "")
    if not where:
        return []
    if "://" not in where:
        where = str((root_dir / where).resolve())
    group = os.environ.get("GITHUB_RUN_ID", "")
    cli = ["python", "-m", "conformance.history", "--store", where]
    codes = {"success_codes": [0, 1, 2], "external": True}
    session.run(*cli, "add", *dirs, *(["--run-group", group] if group else []), **codes)
    keep = os.environ.get("CONFORMANCE_STORE_KEEP_DAYS", "180")  # an artifact store stays small
    session.run(*cli, "prune", "--keep-days", keep, **codes)
    session.run(*cli, "summary", "--output", str(results / "history.md"), **codes)
    trends = results / "trends"
    shutil.rmtree(trends, ignore_errors=True)  # never an earlier night's pictures
    session.run(*cli, "pictures", "--output", str(trends), **codes)
    return ["--trends", str(trends)] if (trends / "trends.json").is_file() else []


def _suite_pythonpath() -> dict[str, str]:
    """PYTHONPATH for a host-python subprocess that must import this ``conformance`` package."""
    parts = [str(SUITE_PACKAGE.parent), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in parts if p)}


def install_and_build(session: nox.Session, cell: Cell) -> None:
    """Install the cell's torch, the suite's and the backend's requirements, then build the
    backend into the venv unless its build stamp is current."""
    backend = cell.backend
    assert backend is not None
    release = cell.release
    session.install(
        *find_links(),
        release.requirement,
        *release.extra,
        *suite_requirements(),
        *backend.requires,
    )
    venv = Path(session.virtualenv.location)
    key = build_key(cell)
    if read_stamp(venv).get("key") == key and not os.environ.get("CONFORMANCE_REBUILD"):
        session.log(
            f"{backend.module}: build {key} is current (torch {release.version}, watched sources "
            "unchanged): not rebuilding; CONFORMANCE_REBUILD=1 forces a rebuild"
        )
        return
    clear_stamp(venv)
    build = backend.build
    src = copy_sources(
        Path(session.create_tmp()) / "src", build.source, build.include, build.exclude
    )
    session.log(f"building {backend.module} (build {key}) from {build.source} in {src}")
    with session.chdir(src):
        done = session.run_install(*build.argv(), env=build_environment(cell), external=True)
    if done is None:  # --no-install on a reused venv: nothing was built
        session.log("--no-install: the backend was not rebuilt")
        return
    write_stamp(venv, key, cell)


def option_value(args: list[str], flag: str) -> str | None:
    """The value of ``flag`` in ``args`` (``--flag V`` or ``--flag=V``; the last one wins)."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def shard_of(pytest_args: list[str], environ: Mapping[str, str]) -> Shard | None:
    """The shard a cell run is (``--shard`` among its pytest arguments, else
    ``$CONFORMANCE_SHARD``, as the suite reads it), or None."""
    text = option_value(pytest_args, "--shard") or environ.get("CONFORMANCE_SHARD")
    return Shard.parse(text) if text else None


def nightly_args(args: list[str]) -> tuple[list[str], str | None]:
    """``nox -s nightly -- <cell>... [--shards N]``: the cells, and N if given."""
    cells = [
        a
        for i, a in enumerate(args)
        if not a.startswith("--shards") and args[i - 1 : i] != ["--shards"]
    ]
    return cells, option_value(args, "--shards")


def _run_cell(session: nox.Session, cell: Cell, pytest_args: list[str], root: Path) -> None:
    try:
        shard = shard_of(pytest_args, os.environ)
    except ConformanceUsageError as exc:
        session.error(str(exc))
    out = root / "results" / (cell.session + (shard.suffix if shard else ""))
    env, suite = _staged(session, cell, root)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with session.chdir(suite):
        session.run("python", *suite_argv(cell, out), *pytest_args, env=env)


def _staged(session: nox.Session, cell: Cell, root: Path) -> tuple[dict[str, str], Path]:
    """The cell's backend built into the session, the suite's environment for it and the
    suite staged in the session's temporary folder (the cells and the mutants run from it)."""
    install_and_build(session, cell)
    try:
        env = suite_environment(cell)
    except LaunchError as exc:
        session.error(str(exc))
    return env, stage_suite(Path(session.create_tmp()) / "suite", root / ".pytest_cache")


def _make_cell_session(cell: Cell, root: Path, python: str | None) -> None:
    def run(session: nox.Session) -> None:
        _run_cell(session, cell, list(session.posargs), root)

    run.__doc__ = cell.describe()
    tags = ["conformance", *cell.tags()]
    nox.session(name=cell.session, python=python, tags=tags, default=False)(run)


def _check_requested_sessions(matrix: Matrix, argv: list[str], others: list[Matrix]) -> None:
    """`nox -s conformance-2.99` gets a one-line error naming the valid versions; a session of
    a further matrix file (`others`: conformance-<label>-...) is checked against that file."""
    labelled = {f"{SESSION_PREFIX}{m.backend.label}-": m for m in others if m.backend.label}
    for name in requested_sessions(argv, os.environ):
        other = next((m for p, m in labelled.items() if name.startswith(p)), None)
        if other is not None and name not in other.sessions():
            try:
                cell = other.cell(name)
            except MatrixError as exc:
                sys.exit(f"nox: {exc}")
            sys.exit(f"nox: no session {name}; this cell's session is {cell.session}")
    known = [s for m in others for s in m.sessions()]
    message = unknown_session_error(matrix, argv, known=known)
    if message is None and "--" in argv and "conformance" in requested_sessions(argv, os.environ):
        posargs = argv[argv.index("--") + 1 :]
        if posargs and not posargs[0].startswith("-"):
            try:
                matrix.cell(posargs[0])
            except MatrixError as exc:
                message = f"nox: {exc}"
    if message:
        sys.exit(message)


def register(
    matrix: str | os.PathLike[str] | None = None,
    *,
    root: str | os.PathLike[str] | None = None,
    nightly_workflow: str = ".github/workflows/conformance-nightly.yml",
    also: Sequence[str] = (),
) -> Matrix:
    """Register the sessions of the matrix file (``$CONFORMANCE_MATRIX`` wins over ``matrix``);
    returns the loaded :class:`Matrix`. A bad file exits nox with one line. ``also``: further
    matrix files (of other backends) whose cells get sessions too, named apart by their
    backend's ``label`` (``conformance-xla-2.9``): tagged ``conformance``, the nightly runs them
    (not with ``$CONFORMANCE_MATRIX``: then that backend alone)."""
    root_dir = Path(root).resolve() if root is not None else Path.cwd()
    env_path = os.environ.get("CONFORMANCE_MATRIX")
    path = matrix_path(env_path or (root_dir / matrix if matrix is not None else None))
    try:
        loaded = load_matrix(path)
    except MatrixError as exc:
        sys.exit(f"nox: {exc}")
    nox.needs_version = ">=2024.4.15"
    nox.options.default_venv_backend = "uv"
    nox.options.reuse_venv = "yes"
    nox.options.error_on_missing_interpreters = True
    python = loaded.python
    others = []
    for extra in also if not env_path else ():  # pointed at another backend: that one alone
        try:
            others.append(load_matrix(matrix_path(root_dir / extra)))
        except MatrixError as exc:
            sys.exit(f"nox: {exc}")
    for m in (loaded, *others):
        for cell in m.cells():
            _make_cell_session(cell, root_dir, m.python)

    @nox.session(python=python, default=False)
    def conformance(session: nox.Session) -> None:
        """Any cell by name: nox -s conformance -- <minor>[-<allocator>][-<sanitizer>] [args]."""
        args = list(session.posargs)
        name = args.pop(0) if args and not args[0].startswith("-") else ""
        try:
            cell = loaded.cell(name)
        except MatrixError as exc:
            session.error(str(exc))
        _run_cell(session, cell, args, root_dir)

    @nox.session(python=python, default=False)
    def report(session: nox.Session) -> None:
        """Markdown + HTML report over results/* (or the folders given after --), plus the
        torch-version report and the scorecard (results/scorecard/);
        $CONFORMANCE_PREVIOUS_RESULTS (a previous nightly's results) adds
        new failures / new passes; $CONFORMANCE_STORE (the results store: a SQLite file or a
        database URL) gets the results appended, writes results/history.md and draws the
        trends (results/trends/) into the HTML report and beside the scorecard."""
        session.install(*REPORT_DEPS)
        results = root_dir / "results"
        dirs = [str((root_dir / d).resolve()) for d in session.posargs] or [str(results)]
        previous = os.environ.get("CONFORMANCE_PREVIOUS_RESULTS", "")
        prev_dir = (root_dir / previous).resolve() if previous else None
        extra = ["--previous", str(prev_dir)] if prev_dir and prev_dir.is_dir() else []
        suite = stage_suite(Path(session.create_tmp()) / "suite", root_dir / ".pytest_cache")
        with session.chdir(suite):
            extra += append_history(session, dirs, root_dir, results)
            session.run(
                "python",
                "-m",
                "conformance.report",
                *dirs,
                "--markdown",
                str(results / "report.md"),
                "--html",
                str(results / "report.html"),
                "--versions-md",
                str(results / "versions.md"),
                "--versions-html",
                str(results / "versions.html"),
                "--scorecard",
                str(results / "scorecard"),
                *extra,
            )

    @nox.session(python=python, default=False)
    def mutants(session: nox.Session) -> None:
        """The mutation campaign on the matrix's default cell (conformance/measure/mutants, docs/
        POWER.md): every kernel the backend registers crossed with every mutation operator,
        judged by the suite; fails on a miss the known gaps do not list (docs/POWER.md's block
        where the repository has one, or -- --known FILE). `-- --budget 3600 --jobs 4`; the
        seed is $CONFORMANCE_MUTANT_SEED (the nightly's run number)."""
        env, suite = _staged(session, loaded.cell(""), root_dir)
        known = root_dir / "docs" / "POWER.md"
        with session.chdir(suite):
            session.run(
                "python",
                "-m",
                "conformance.measure.mutants",
                "--check",
                "--out",
                str(root_dir / "results" / "mutants"),
                *(["--known", str(known)] if known.is_file() else []),
                *session.posargs,
                env=env,
            )

    @nox.session(venv_backend="none", default=False)
    def bisect(session: nox.Session) -> None:
        """First torch release where a case changes: nox -s bisect -- EXPR --good 2.7 --bad 2.12."""
        if not session.posargs:
            session.error("usage: nox -s bisect -- <case id or -k expr> --good A --bad B [options]")
        session.chdir(root_dir)
        session.run(
            sys.executable,
            "-m",
            "conformance.bisect",
            "--matrix",
            str(path),
            *session.posargs,  # venvs are cached under .nox/bisect-venvs/ (see --venv-dir)
            env=_suite_pythonpath(),
            external=True,
        )

    @nox.session(venv_backend="none", default=False)
    def nightly(session: nox.Session) -> None:
        """Rehearse the nightly workflow locally: nox -s nightly -- 2.12 2.13 (or 'all'),
        --shards N for N jobs per cell (default: the matrix file's [nightly].shards)."""
        cells, shards = nightly_args(list(session.posargs))
        if not cells:
            session.error(
                "name the cells to rehearse: nox -s nightly -- "
                f"{' '.join(loaded.minors[-2:])} (or 'all' for every cell) [--shards N]"
            )
        if cells != ["all"]:
            try:
                cells = [loaded.cell(name).session for name in cells]
            except MatrixError as exc:
                session.error(str(exc))
        session.chdir(root_dir)
        session.run(
            sys.executable,
            "-m",
            "conformance.ci.rehearse",
            str(root_dir / nightly_workflow),
            "--root",
            str(root_dir),
            *(["--sessions", ",".join(cells)] if cells != ["all"] else []),
            *(["--input", f"shards={shards}"] if shards else []),
            env=_suite_pythonpath(),
            external=True,
        )

    _check_requested_sessions(loaded, sys.argv[1:], others)
    return loaded

"""The real probe: a cached venv per (torch version, build key), the described backend built into
it, the case run with the staged suite.

The backend is the one the matrix file describes (:class:`conformance.ci.matrix_spec.Backend`):
its ``[backend.build] command`` runs in a fresh copy of its sources with the probe venv active,
exactly as the nox sessions do (:mod:`conformance.ci.build`). Venvs live under
``venv_dir/torch-<version>-<key>``, where the key hashes the torch version, the build settings and
the watched source files: editing the backend makes the next probe of that release rebuild
(older venvs of that release are removed then). A venv whose install and build finished holds a
``.bisect-ok`` marker and is reused as is.

A probe whose install or build fails is ``skip`` (the search goes on around it); one that ran but
selected no case is ``error``. Its outcome otherwise comes from the results JSONL.

``env_for(version)`` adds environment variables to the test run of one version. The bisect
self-test uses it to realise a *version-gated fault*: e.g. ``ECHO_NPU_FAULTS=leak`` only when the
probed torch is at least X, so the bisect must name X (``--fault leak --fault-from X``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from packaging.version import Version

from conformance.bisect.search import Probe
from conformance.ci.build import (
    build_environment,
    build_key,
    find_links,
    probe_release,
    stage_suite,
    suite_argv,
    suite_environment,
    suite_requirements,
)
from conformance.ci.matrix import Cell, Matrix
from conformance.ci.sources import copy_sources, hash_settings
from conformance.engine.checkers import LaunchError
from conformance.processes import launch
from conformance.record import FAILING

OK_MARKER = ".bisect-ok"

EnvFor = Callable[[Version], Mapping[str, str]]


class StepFailed(Exception):
    """An install or build step failed: the probe is ``skip``."""


def no_env(version: Version) -> Mapping[str, str]:
    """The default ``env_for``: nothing extra."""
    return {}


def gated_env(env: Mapping[str, str], since: Version) -> EnvFor:
    """``env_for`` that sets ``env`` for torch >= ``since`` only."""
    fixed = dict(env)

    def env_for(version: Version) -> Mapping[str, str]:
        return fixed if version >= since else {}

    return env_for


def gated_fault_env(fault: str, since: Version, variable: str = "ECHO_NPU_FAULTS") -> EnvFor:
    """``env_for`` that sets ``variable=fault`` (the backend's fault switch) for torch >= since."""
    return gated_env({variable: fault}, since)


def outcome_of(results: Path) -> tuple[str, str]:
    """``(outcome, detail)`` of a results folder: fail if any case failed, pass if any passed."""
    from conformance.report.load import load_run

    if not results.is_dir():
        return "error", "no results folder"
    cases = load_run(results).cases
    if not cases:
        return "error", "no case ran (does the expression match a case?)"
    bad = [c for c in cases if c.status in FAILING]
    if bad:
        first = bad[0]
        return "fail", f"{len(bad)}/{len(cases)} failing, e.g. {first.id}: {first.status}"
    if any(c.status in ("passed", "xfailed") for c in cases):
        return "pass", f"{len(cases)} cases, none failing"
    return "error", f"{len(cases)} cases, all skipped"


class VenvProbeRunner:
    """Install torch into a cached venv, build the described backend, run the selected cases."""

    def __init__(
        self,
        expression: str,
        *,
        matrix: Matrix,
        venv_dir: Path,
        work_dir: Path,
        index_url: str | None = None,
        pre: bool = False,
        python: str | None = None,
        allocator: str | None = None,
        sanitizer: str | None = None,
        modes: str = "",
        env_for: EnvFor = no_env,
        discard_venvs: bool = False,
        pytest_args: Sequence[str] = (),
        timeout: float = 3600.0,
    ) -> None:
        self.expression = expression
        self.matrix = matrix
        self.venv_dir = venv_dir
        self.work_dir = work_dir
        self.index_url = index_url
        self.pre = pre
        self.python = python or matrix.python or "3.11"
        self.allocator = allocator or matrix.default_allocator
        self.sanitizer = sanitizer or matrix.default_sanitizer
        self.modes = modes  # the compiled axis (--compile): the suite's --modes in each probe
        self.env_for = env_for
        self.discard_venvs = discard_venvs
        self.pytest_args = list(pytest_args)
        self.timeout = timeout

    def cell(self, version: Version) -> Cell:
        """The matrix cell a probe of ``version`` stands for (any release, this allocator,
        sanitizer and compiled axis, the matrix's backend)."""
        values = {"allocator": self.allocator, "sanitizer": self.sanitizer, "compile": self.modes}
        return Cell(probe_release(str(version)), values, backend=self.matrix.backend)

    def venv_for(self, version: Version) -> Path:
        """``venv_dir/torch-<version>-<key>``: the key covers sources, build settings, python."""
        cell = self.cell(version)
        key = hash_settings([build_key(cell), self.python, self.index_url, self.pre])[:12]
        return self.venv_dir / f"torch-{version}-{key}"

    def _cmd(
        self,
        args: Sequence[str],
        log: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        with log.open("a", encoding="utf-8") as fh:
            where = f" (in {cwd})" if cwd else ""
            fh.write(f"\n$ {' '.join(args)}{where}\n")
            fh.flush()
            full_env = {**os.environ, **(env or {})}
            launch.tool(
                args,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=full_env,
                cwd=cwd or self.work_dir,
                check=True,
                timeout=self.timeout,
            )

    def _step(self, what: str, args: Sequence[str], log: Path, **kw: object) -> None:
        try:
            self._cmd(args, log, **kw)  # type: ignore[arg-type]
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            raise StepFailed(f"{what} failed: {exc}") from None

    def _install(self, version: Version, venv: Path, log: Path) -> None:
        for stale in self.venv_dir.glob(f"torch-{version}*"):
            if stale != venv and stale.is_dir():  # an older build of this release
                shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(venv, ignore_errors=True)
        cell = self.cell(version)
        backend = self.matrix.backend
        self._step("venv", ["uv", "venv", "--python", self.python, str(venv)], log)
        py = str(venv / "bin" / "python")
        index = ["--index-url", self.index_url] if self.index_url else find_links()
        pre = ["--prerelease", "allow"] if self.pre else []
        requirements = [*suite_requirements(scenarios=False), *backend.requires]
        self._step(
            f"install of torch {version}",
            ["uv", "pip", "install", "--python", py, *index, *pre, f"torch=={version}"]
            + requirements,
            log,
        )
        build = backend.build
        src = copy_sources(
            self.work_dir / "src" / f"torch-{version}", build.source, build.include, build.exclude
        )
        try:
            self._step(
                f"build of {backend.module} against torch {version}",
                build.argv(),
                log,
                env=build_environment(cell, venv),
                cwd=src,
            )
        finally:
            shutil.rmtree(src, ignore_errors=True)
        (venv / OK_MARKER).write_text(f"{version}\n", encoding="utf-8")

    def probe(self, version: Version) -> Probe:
        """Install+build (unless cached), run; never raises for a failing step (skip/error)."""
        start = time.monotonic()
        probe_dir = self.work_dir / f"probe-{version}"
        shutil.rmtree(probe_dir, ignore_errors=True)
        probe_dir.mkdir(parents=True)
        log = probe_dir / "log.txt"
        log.write_text(f"probe torch {version}: -k {self.expression}\n", encoding="utf-8")
        venv = self.venv_for(version)
        installed = False
        try:
            if not (venv / OK_MARKER).is_file():
                installed = True
                self._install(version, venv, log)
            cell = self.cell(version)
            results = probe_dir / "results"
            env = {**suite_environment(cell), **self.env_for(version)}
            suite = stage_suite(probe_dir / "suite", self.work_dir / ".pytest_cache")
            cmd = [str(venv / "bin" / "python"), *suite_argv(cell, results, junit=False)]
            cmd += ["-k", self.expression, *self.pytest_args]
            try:
                self._cmd(cmd, log, env=env, cwd=suite)
            except subprocess.CalledProcessError:
                pass  # pytest exits 1 when a case fails: the results decide
            outcome, detail = outcome_of(results)
        except StepFailed as exc:
            outcome, detail = "skip", str(exc)
            shutil.rmtree(venv, ignore_errors=True)
        except (subprocess.TimeoutExpired, OSError, LaunchError) as exc:
            outcome, detail = "error", f"run failed: {exc}"
        finally:
            if self.discard_venvs:
                shutil.rmtree(venv, ignore_errors=True)
        return Probe(
            version=str(version),
            outcome=outcome,
            seconds=round(time.monotonic() - start, 1),
            log=str(log),
            installed=installed,
            detail=detail,
        )

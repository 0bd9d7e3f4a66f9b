"""The real probe: a cached venv per torch version, the backend built into it, the case run.

Venvs live under ``venv_dir/torch-<version>``; a venv whose install and build finished holds a
``.bisect-ok`` marker and is reused as is. The backend is built from a fresh copy of the sources,
as ``noxfile.py`` does (never in the shared tree, so two torch versions share no objects). The case
runs from the checkout root with the venv's python; its outcome comes from the results JSONL.

``env_for(version)`` adds environment variables to the test run of one version. The bisect
self-test uses it to realise a *version-gated fault*: ``ECHO_NPU_FAULTS=leak`` only when the
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
from conformance.tools.sources import ROOT, copy_sources  # noqa: F401 (copy_sources re-exported)

#: Installed next to torch in every probe venv.
PROBE_DEPS = (
    "numpy",
    "expecttest",
    "pytest",
    "pytest-xdist",
    "pytest-timeout",
    "packaging",
    "jinja2",
    "setuptools",
    "wheel",
    "ninja",
)
FAILING = frozenset({"failed", "crashed", "error", "xpassed"})
OK_MARKER = ".bisect-ok"

EnvFor = Callable[[Version], Mapping[str, str]]


def no_env(version: Version) -> Mapping[str, str]:
    """The default ``env_for``: nothing extra."""
    return {}


def gated_fault_env(fault: str, since: Version) -> EnvFor:
    """``env_for`` that sets ``ECHO_NPU_FAULTS=fault`` for torch >= ``since`` only."""

    def env_for(version: Version) -> Mapping[str, str]:
        return {"ECHO_NPU_FAULTS": fault} if version >= since else {}

    return env_for


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
    """Install torch into a cached venv, build the backend, run ``pytest conformance -k expr``."""

    def __init__(
        self,
        expression: str,
        *,
        venv_dir: Path,
        work_dir: Path,
        index_url: str | None = None,
        pre: bool = False,
        python: str = "3.11",
        env_for: EnvFor = no_env,
        discard_venvs: bool = False,
        pytest_args: Sequence[str] = (),
        timeout: float = 3600.0,
    ) -> None:
        self.expression = expression
        self.venv_dir = venv_dir
        self.work_dir = work_dir
        self.index_url = index_url
        self.pre = pre
        self.python = python
        self.env_for = env_for
        self.discard_venvs = discard_venvs
        self.pytest_args = list(pytest_args)
        self.timeout = timeout

    def _cmd(self, args: Sequence[str], log: Path, env: Mapping[str, str] | None = None) -> None:
        with log.open("a", encoding="utf-8") as fh:
            fh.write(f"\n$ {' '.join(args)}\n")
            fh.flush()
            full_env = {**os.environ, **(env or {})}
            subprocess.run(
                list(args),
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=full_env,
                cwd=ROOT,
                check=True,
                timeout=self.timeout,
            )

    def _install(self, version: Version, venv: Path, log: Path) -> None:
        shutil.rmtree(venv, ignore_errors=True)
        self._cmd(["uv", "venv", "--python", self.python, str(venv)], log)
        py = str(venv / "bin" / "python")
        index = ["--index-url", self.index_url] if self.index_url else []
        pre = ["--prerelease", "allow"] if self.pre else []
        self._cmd(
            [
                "uv",
                "pip",
                "install",
                "--python",
                py,
                *index,
                *pre,
                f"torch=={version}",
                *PROBE_DEPS,
            ],
            log,
        )
        src = copy_sources(self.work_dir / "src" / f"torch-{version}")
        jobs = os.environ.get("MAX_JOBS", str(os.cpu_count() or 2))
        # --no-cache: never reuse a wheel uv built earlier against another torch.
        self._cmd(
            ["uv", "pip", "install", "--python", py, "--no-build-isolation", "--no-deps"]
            + ["--reinstall", "--no-cache", str(src / "backend"), str(src)],
            log,
            env={"MAX_JOBS": jobs},
        )
        shutil.rmtree(src, ignore_errors=True)
        (venv / OK_MARKER).write_text(f"{version}\n", encoding="utf-8")

    def probe(self, version: Version) -> Probe:
        """Install (unless cached), build, run; never raises for a failing step (outcome error)."""
        start = time.monotonic()
        probe_dir = self.work_dir / f"probe-{version}"
        shutil.rmtree(probe_dir, ignore_errors=True)
        probe_dir.mkdir(parents=True)
        log = probe_dir / "log.txt"
        log.write_text(f"probe torch {version}: -k {self.expression}\n", encoding="utf-8")
        venv = self.venv_dir / f"torch-{version}"
        installed = False
        try:
            if not (venv / OK_MARKER).is_file():
                installed = True
                self._install(version, venv, log)
            results = probe_dir / "results"
            env = {"CONFORMANCE_BACKEND": os.environ.get("CONFORMANCE_BACKEND", "echo_npu")}
            env.update(self.env_for(version))
            cmd = [str(venv / "bin" / "python"), "-m", "pytest", "conformance", "-p"]
            cmd += ["no:cacheprovider", "-k", self.expression, "--results", str(results)]
            try:
                self._cmd(cmd + self.pytest_args, log, env=env)
            except subprocess.CalledProcessError:
                pass  # pytest exits 1 when a case fails: the results decide
            outcome, detail = outcome_of(results)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            outcome, detail = "error", f"install/build failed: {exc}"
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

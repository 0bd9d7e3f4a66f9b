"""The workflow a backend repository runs for PyTorch's Cross-Repository CI Relay (CRCR):
`python -m conformance.ci.init --crcr` writes it as .github/workflows/conformance-crcr.yml.

The relay dispatches PyTorch's pull requests and pushes (`repository_dispatch`, types
pull_request and push; its `client_payload` is the event's webhook); a schedule self-reports the
nightly build (the callback's delivery-id: the tested commit, event-type: nightly). The job tells
the relay it started, installs the PyTorch commit under test and builds the backend against it,
runs the cases that fit the budget (`python -m conformance.history select`: changed, recently
failed, a stable sample; the whole run where no store is there yet), writes what the relay is
told (`python -m conformance.report --crcr`), warns about the level-3 figures, and calls back
with the conclusion, the test-results and the failed tests. The results store travels between
runs as the `crcr-history` artifact. Rehearsed locally with `python -m conformance.ci.rehearse
.github/workflows/conformance-crcr.yml --event repository_dispatch --event-payload FILE`.
"""

from __future__ import annotations

from conformance.ci.templates import USER_ENV, USER_INSTALL, render

CALLBACK = "pytorch/test-infra/.github/actions/cross-repo-ci-relay-callback@main"

CRCR_YML = """\
# PyTorch's Cross-Repository CI Relay for @@BACKEND@@ (written by torch-conformance:
# python -m conformance.ci.init --crcr). The relay dispatches PyTorch's PRs and pushes here; the
# schedule self-reports PyTorch's nightly build. Rehearse: python -m conformance.ci.rehearse
# .github/workflows/conformance-crcr.yml --event repository_dispatch --event-payload payload.json
name: Conformance CRCR

on:
  repository_dispatch:
    types: [pull_request, push]
  schedule:
    - cron: "0 5 * * *"
  workflow_dispatch:
    inputs:
      budget:
        description: "time budget of the case selection (e.g. 20m, 1h)"
        default: "20m"
      args:
        description: "more arguments for the suite, split on spaces (e.g. --ops=add.*)"
        default: ""

permissions:
  contents: read
  actions: read  # the results store of earlier runs (an artifact)
  id-token: write  # the relay's callback authenticates with an OIDC token

concurrency:
  group: crcr-${{ github.event.client_payload.payload.pull_request.number || github.run_id }}
  cancel-in-progress: true

env:
@@ENV@@  UV_SYSTEM_PYTHON: "1"
  # the selection's budget: the relay's level 3 asks for under 3 hours end to end, build included
  BUDGET: ${{ inputs.budget || '20m' }}
  SUITE_ARGS: ${{ inputs.args || '' }}
  PR_NUMBER: ${{ github.event.client_payload.payload.pull_request.number || '' }}
  # the results store: this SQLite file travels from run to run as an artifact (concurrent
  # dispatches each upload theirs: the last one wins); set the secret CONFORMANCE_STORE_URL to
  # a database server's URL (postgresql://...) to keep every run
  STORE: ${{ secrets.CONFORMANCE_STORE_URL || 'history/history.db' }}
  PYTORCH_REF: >-
    ${{ github.event.client_payload.payload.pull_request.head.sha
    || github.event.client_payload.payload.after || 'nightly' }}

jobs:
  conformance:
    # a closed PR needs no run; every other dispatch and the schedule do
    if: ${{ github.event.client_payload.payload.action != 'closed' }}
    runs-on: ubuntu-latest
    timeout-minutes: 150
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - name: Tell the relay the job started
        if: ${{ github.event_name == 'repository_dispatch' }}
        uses: @@CALLBACK@@
        with:
          status: in_progress
      - name: Install the PyTorch commit under test
        if: ${{ !env.ACT }}
        run: |
          # PyTorch's nightly build; for a dispatched PR or push, replace this with your build of
          # $PYTORCH_REF (pytorch/pytorch at that commit, built from source or by your own CI)
          python -m pip install --pre torch --index-url https://download.pytorch.org/whl/nightly/cpu
      - name: Build the backend against it, install the suite
        if: ${{ !env.ACT }}
        run: |
          @@BUILD@@
          @@INSTALL@@
      - name: The PyTorch commit tested
        id: torch
        run: |
          sha=$(python -c 'import torch; print(torch.version.git_version)')
          echo "sha=$sha" >> "$GITHUB_OUTPUT"
      - name: The results store of earlier runs
        if: ${{ !env.ACT }}
        env:
          GH_TOKEN: ${{ github.token }}
        run: |
          for run in $(gh run list --repo "$GITHUB_REPOSITORY" --workflow conformance-crcr.yml \\
              --limit 10 --json databaseId --jq '.[].databaseId' || true); do
            gh run download "$run" --repo "$GITHUB_REPOSITORY" --name crcr-history \\
              --dir history 2>/dev/null && echo "results store of run $run" && break
          done
          if [ -n "$PR_NUMBER" ]; then
            gh api "repos/pytorch/pytorch/pulls/$PR_NUMBER/files" --paginate \\
              --jq '.[].filename' > changed.txt || true
          fi
      - name: Select the cases that fit the budget
        # the nightly self-report runs everything: it is also what later selections choose from
        if: ${{ github.event_name != 'schedule' }}
        run: |
          touch changed.txt
          if [ -f history/history.db ] || [ "$STORE" != history/history.db ]; then
            python -m conformance.history --store "$STORE" select --cell crcr \\
              --budget "$BUDGET" --changed changed.txt > selection.txt || : > selection.txt
          fi
          touch selection.txt
          echo "selection: $(cat selection.txt) $SUITE_ARGS"
      - name: Run the suite
        timeout-minutes: 120
        run: |
          set -f  # the arguments are words, never file patterns
          touch selection.txt
          # shellcheck disable=SC2046,SC2086
          python -m pytest --pyargs conformance --backend @@MODULE@@ -n auto \\
            $(cat selection.txt) $SUITE_ARGS --results results/crcr
      - name: Keep the run in the results store (also when it was stopped)
        if: ${{ always() }}
        run: python -m conformance.history --store "$STORE" add results/crcr || true
      - name: What the relay is told
        id: report
        if: ${{ always() }}
        run: |
          python -m conformance.report results/crcr --crcr results/crcr.json \\
            --markdown results/crcr.md --step-summary
          python -m conformance.history --store "$STORE" relay --cell crcr \\
            >> "$GITHUB_STEP_SUMMARY" || true
          {
            echo "test_results=$(cat results/crcr.json)"
            echo "failed_tests=$(cat results/crcr-failed.json)"
          } >> "$GITHUB_OUTPUT"
      - name: Tell the relay how it ended
        if: ${{ always() }}
        uses: @@CALLBACK@@
        with:
          status: completed
          conclusion: ${{ job.status }}
          delivery-id: >-
            ${{ github.event_name != 'repository_dispatch' && steps.torch.outputs.sha || '' }}
          event-type: ${{ github.event_name != 'repository_dispatch' && 'nightly' || '' }}
          test-results: ${{ steps.report.outputs.test_results }}
          failed-tests-detail: ${{ steps.report.outputs.failed_tests }}
          artifact-url: >-
            ${{ github.server_url }}/${{ github.repository }}/actions/runs/${{ github.run_id }}
      - uses: actions/upload-artifact@v4
        if: ${{ always() }}
        with:
          name: crcr-history
          path: history/history.db
          if-no-files-found: ignore
      - uses: actions/upload-artifact@v4
        if: ${{ always() }}
        with:
          name: crcr-results
          path: results/crcr
"""


def user_crcr(backend: str, build: str) -> str:
    """A backend repository's .github/workflows/conformance-crcr.yml (``build``: its build and
    install command, run in the repository's root against the installed torch)."""
    return render(
        CRCR_YML,
        {
            "BACKEND": backend,
            "MODULE": backend,
            "ENV": USER_ENV,
            "BUILD": build,
            "INSTALL": USER_INSTALL,
            "CALLBACK": CALLBACK,
        },
    )

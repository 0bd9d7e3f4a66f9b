"""Helpers to run the conformance suite in a subprocess, as a user would."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import run_pytest


@dataclass
class SuiteRun:
    returncode: int
    output: str
    results: list[dict]
    results_dir: Path

    @property
    def info(self) -> dict:
        """run.json: the header lines, coverage, counts."""
        return json.loads((self.results_dir / "run.json").read_text())

    def case(self, case_id: str) -> dict:
        matches = [r for r in self.results if r["id"] == f"test_matches_cpu[{case_id}]"]
        assert matches, f"no result for {case_id}; have {[r['id'] for r in self.results][:10]}"
        return matches[0]

    def failed(self) -> list[dict]:
        return [r for r in self.results if r["status"] == "failed"]


@pytest.fixture
def run_suite(tmp_path):
    """run_suite(*pytest_args, env={...}) -> SuiteRun (results read from the JSONL files)."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: int = 300) -> SuiteRun:
        results = tmp_path / f"results-{len(list(tmp_path.iterdir()))}"
        if not any(a.startswith("--modes") for a in args):
            # the forward cases only, unless a test asks for the -grad/-inference modes (they
            # have tests of their own): case lists and orders stay what each test states
            args = (*args, "--modes", "none")
        proc = run_pytest("conformance", "--results", str(results), *args, env=env, timeout=timeout)
        rows = []
        for f in sorted(results.glob("cases-*.jsonl")) if results.exists() else []:
            rows += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        return SuiteRun(proc.returncode, proc.stdout + proc.stderr, rows, results)

    return run

"""The README's commands are the ones CI runs: .ci/run installs as the README says and runs its
test command and its main job, so a README command that stops working fails CI."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _readme_block_after(heading: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split(f"## {heading}", 1)[1]
    return re.search(r"```bash\n(.+?)\n```", section, flags=re.S).group(1).strip()


def test_ci_runs_the_readme_commands() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    lines = ci.splitlines()  # whole lines: `pytest conformance` is not `pytest conformance -n 2`
    install = _readme_block_after("Set up")
    assert install.replace("pip install ", "pip install -q ") in lines
    tests = _readme_block_after("Run the project's own tests")
    assert tests in lines
    assert f"{tests} -m slow" in lines  # the slow self-tests the README's command leaves out
    assert _readme_block_after("Run the conformance suite") in lines


def test_the_suite_installs_without_building_echo_npu() -> None:
    """echo_npu is its own package; the suite's build needs neither torch nor a compiler."""
    import tomllib

    suite = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert suite["build-system"]["requires"] == ["setuptools>=68", "wheel"]
    assert not (ROOT / "setup.py").exists()
    backend = tomllib.loads((ROOT / "backend" / "pyproject.toml").read_text())
    assert (
        backend["project"]["name"] == "echo-npu" and "torch" in backend["build-system"]["requires"]
    )
    assert "./backend" in _readme_block_after("Set up")

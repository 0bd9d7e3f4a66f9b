"""processes/interpreter.py: children are this interpreter with the interpreter-selecting variables
the suite started with, whatever a backend's runtime set since (issue 31: PYTHONEXECUTABLE)."""

from __future__ import annotations

import os
import subprocess
import sys

from conformance.processes import interpreter


def test_children_get_the_start_values_back(monkeypatch):
    monkeypatch.setitem(os.environ, "PYTHONEXECUTABLE", "/usr/bin/python3")  # set by a backend
    monkeypatch.setitem(os.environ, "CONFORMANCE_SOMETHING", "kept")  # anything else stays
    env = interpreter.environment({"EXTRA": "1"})
    assert env.get("PYTHONEXECUTABLE") == interpreter.AT_START["PYTHONEXECUTABLE"]
    assert env["CONFORMANCE_SOMETHING"] == "kept" and env["EXTRA"] == "1"
    assert interpreter.python() == [sys.executable]


def _child_output(code: str) -> list[str]:
    """The lines `code` prints, run in a fresh interpreter without PYTHONEXECUTABLE."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONEXECUTABLE"}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return proc.stdout.strip().split("\n")


def test_a_child_is_this_interpreter_even_after_a_c_level_setenv():
    """A backend's native runtime sets PYTHONEXECUTABLE with libc's setenv: os.environ does not
    see it, a child that inherits the C environment would (and becomes that Python)."""
    code = (
        "import ctypes, subprocess, sys\n"
        "from conformance.processes import interpreter\n"
        "ctypes.CDLL(None).setenv(b'PYTHONEXECUTABLE', b'/nonexistent/python3', 1)\n"
        "cmd = [*interpreter.python(), '-c', 'import sys; print(sys.executable)']\n"
        "print(subprocess.run(cmd, env=interpreter.environment(), capture_output=True, "
        "text=True).stdout.strip())\n"
        "print(subprocess.run(cmd, capture_output=True, text=True).stdout.strip())\n"
    )
    out = _child_output(code)
    assert out[0] == sys.executable  # pinned
    assert out[1] == "/nonexistent/python3"  # what inheriting the C environment gives


def test_pin_restores_the_c_environment_that_other_libraries_children_inherit():
    code = (
        "import ctypes, subprocess, sys\n"
        "from conformance.processes import interpreter\n"
        "ctypes.CDLL(None).setenv(b'PYTHONEXECUTABLE', b'/nonexistent/python3', 1)\n"
        "interpreter.pin()\n"
        "cmd = [sys.executable, '-c', 'import sys; print(sys.executable)']\n"
        "print(subprocess.run(cmd, capture_output=True, text=True).stdout.strip())\n"
    )
    assert _child_output(code) == [sys.executable]

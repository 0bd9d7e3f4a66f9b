"""Switches that make echo_npu behave like backends unlike ours (all off by default): refusing
forked children, torch.backends autoload, no boxed fallback, no protocol hooks; and the import
never aborting when PrivateUse1 hooks are already taken."""

from __future__ import annotations

import os
import subprocess
import sys

FORK = r"""
import os, torch, echo_npu
print("IMPORTED", torch.npu.is_initialized())
x = torch.ones(2, device="npu")
print("USED", torch.npu.is_initialized())
pid = os.fork()
if pid == 0:
    out = [str(torch.npu._is_in_bad_fork()), str(torch.npu.is_initialized())]
    for use in (lambda: torch.ones(2, device="npu"), lambda: x.cpu(), lambda: x + 1):
        try:
            use()
            out.append("ok")
        except RuntimeError as e:
            out.append(str(e).splitlines()[0])
    print("CHILD", " | ".join(out), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("PARENT", torch.npu._is_in_bad_fork(), (x + 1).cpu().tolist())
"""

REFUSED = "echo_npu: cannot re-initialize npu in forked subprocess"


def test_refuse_fork(run_py):
    r = run_py(FORK, ECHO_NPU_REFUSE_FORK="1")
    assert r.returncode == 0, r.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in r.stdout.strip().splitlines())
    assert lines["IMPORTED"] == "False" and lines["USED"] == "True"  # lazy initialisation
    child = lines["CHILD"].split(" | ")
    assert child[:2] == ["True", "False"], child
    assert all(c.startswith(REFUSED) for c in child[2:]), child
    assert lines["PARENT"] == "False [2.0, 2.0]"


def test_fork_allowed_by_default(run_py):
    r = run_py(FORK)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "CHILD False | True | ok | ok | ok" in r.stdout, r.stdout


def test_refuse_fork_before_initialisation_is_fine(run_py):
    code = r"""
import os, torch, echo_npu
pid = os.fork()
if pid == 0:
    y = torch.ones(2, device="npu") + 1
    ok = torch.npu._is_in_bad_fork() is False and y.sum().item() == 4
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
print("CHILD_EXIT", os.waitstatus_to_exitcode(status))
"""
    r = run_py(code, ECHO_NPU_REFUSE_FORK="1")
    assert r.stdout.strip() == "CHILD_EXIT 0", (r.stdout, r.stderr[-2000:])


def test_no_fallback(run_py):
    code = r"""
import torch, echo_npu
x = torch.ones(3, device="npu")
print("NATIVE", (x + x).cpu().tolist())
try:
    print("SIN", x.sin().cpu().tolist())
except NotImplementedError as e:
    print("SIN NotImplementedError", "PrivateUse1" in str(e) or "npu" in str(e))
"""
    default = run_py(code)
    assert "SIN [0.84" in default.stdout, (default.stdout, default.stderr[-2000:])
    r = run_py(code, ECHO_NPU_NO_FALLBACK="1")
    assert "NATIVE [2.0, 2.0, 2.0]" in r.stdout, (r.stdout, r.stderr[-2000:])
    assert "SIN NotImplementedError True" in r.stdout, r.stdout


def test_no_hooks(run_py):
    code = (
        "import echo_npu\n"
        "print(sorted(h for h in echo_npu.PROTOCOL_HOOKS if hasattr(echo_npu, h)))\n"
        "print(echo_npu.get_faults())"
    )
    default = run_py(code)
    assert default.stdout.splitlines()[0] == str(sorted(__import__("echo_npu").PROTOCOL_HOOKS))
    r = run_py(code, ECHO_NPU_NO_HOOKS="1", ECHO_NPU_FAULTS="leak")
    assert r.stdout.splitlines() == ["[]", "['leak']"], (r.stdout, r.stderr[-2000:])


def _write_autoload(tmp_path) -> str:
    """The dist-info folder in tmp_path; returns the PYTHONPATH that puts it first."""
    out = subprocess.run(
        [sys.executable, "-m", "echo_npu.autoload", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert (tmp_path / "echo_npu_autoload-0.dist-info" / "entry_points.txt").exists(), out
    return os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)


AUTOLOAD = r"""
import sys, torch
print("AUTOLOADED", "echo_npu" in sys.modules, torch._C._get_privateuse1_backend_name())
import echo_npu                                     # a second import: a no-op
import importlib; importlib.reload(echo_npu)        # even a re-execution registers nothing twice
print("USE", (torch.ones(2, device="npu") * 3).cpu().tolist())
"""


def test_autoload_entry_point(run_py, tmp_path):
    path = _write_autoload(tmp_path)
    r = run_py(AUTOLOAD, PYTHONPATH=path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines() == ["AUTOLOADED True npu", "USE [3.0, 3.0]"], r.stdout
    off = run_py(AUTOLOAD, PYTHONPATH=path, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert off.returncode == 0, off.stderr[-3000:]
    assert off.stdout.splitlines()[0] == "AUTOLOADED False privateuseone", off.stdout


def test_hooks_already_registered_is_import_error(run_py, tmp_path):
    """Another library (here: a second copy of echo_npu's extension) registered PrivateUse1 hooks
    first: importing echo_npu raises a one-line ImportError instead of aborting the process."""
    import echo_npu._C as ext

    copy = tmp_path / os.path.basename(ext.__file__)
    copy.write_bytes(open(ext.__file__, "rb").read())
    code = rf"""
import importlib.util, torch
spec = importlib.util.spec_from_file_location("other_backend._C", {str(copy)!r})
other = importlib.util.module_from_spec(spec)
spec.loader.exec_module(other)
assert other.register_device() == ""
for attempt in range(2):
    try:
        import echo_npu
    except ImportError as e:
        print("ImportError", str(e))
print("ALIVE")
"""
    r = run_py(code)
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    lines = r.stdout.splitlines()
    assert lines[-1] == "ALIVE" and len(lines) == 3, r.stdout
    assert lines[0].startswith("ImportError echo_npu: PrivateUse1 hooks are already registered")
    assert lines[0] == lines[1]

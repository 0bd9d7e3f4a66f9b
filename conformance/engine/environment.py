"""What a run's verdicts may depend on beyond the code: the build and run environment.

Two runs that differ only here (another compiler, glibc, instruction set, an Inductor or backend
variable, another torch or backend build) must be told apart: run.json keeps this record
(`compile_environment`) and `python -m conformance.report A B --diff` lists what differs next
to the cases whose verdict changed. Standard APIs only (platform, importlib.metadata, torch's
own view of the CPU and of Inductor's compiler); nothing here touches the device.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata

import torch

from conformance.processes import launch

#: environment variables a compiled kernel depends on: Inductor's and its C++ compiler's
#: (prefixes and names; the repro line of a -compile case keeps them)
READ_BY_COMPILERS = (
    "TORCHINDUCTOR_",
    "INDUCTOR_",
    "CC",
    "CXX",
    "CFLAGS",
    "CXXFLAGS",
    "CPPFLAGS",
    "LDFLAGS",
)

#: environment variables torch, Inductor, compilers and runtimes read (prefixes and names)
READ_BY_TOOLS = READ_BY_COMPILERS + (
    "TORCH_",
    "ATEN_CPU_CAPABILITY",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "OMP_",
    "KMP_",
    "MKL_",
    "PJRT_",
    "XLA_",
    "PYTORCH_",
)


def compiler_variables() -> dict[str, str]:
    """The variables set in this process that Inductor and its C++ compiler read (not the
    cache folder: Inductor sets it in the process it runs in)."""
    return {
        k: v
        for k, v in sorted(os.environ.items())
        if _matches(k, READ_BY_COMPILERS) and k != "TORCHINDUCTOR_CACHE_DIR"
    }


def compile_environment(module: str, allocator: str = "") -> dict[str, str]:
    """The record of one run: versions, compiler, C library, instruction set and the variables
    read by torch, Inductor, compilers and the backend (`MODULE_*`), as flat strings."""
    env = {
        "torch": str(torch.__version__),
        "torch git": str(getattr(torch.version, "git_version", "") or ""),
        "python": platform.python_version(),
        "backend": f"{module} {_version_of(module)}".strip(),
        "compiler": _compiler(),
        "glibc": " ".join(platform.libc_ver()).strip() or "unknown",
        "machine": platform.machine(),
        "isa": _isa(),
    }
    if allocator:
        env["allocator"] = allocator
    own = module.split(".")[0].upper() + "_"
    for key, value in sorted(os.environ.items()):
        if key.startswith(own) or _read_by_tools(key):
            env[f"${key}"] = value
    return env


def _read_by_tools(key: str) -> bool:
    return _matches(key, READ_BY_TOOLS)


def _matches(key: str, names: tuple[str, ...]) -> bool:
    """`key` is one of `names`, or starts with one of those ending in `_` (a prefix)."""
    return any(key == p or (p.endswith("_") and key.startswith(p)) for p in names)


def _version_of(module: str) -> str:
    """The installed distribution's version of `module` (its top package), or its __version__."""
    top = module.split(".")[0]
    for dist in (top, top.replace("_", "-")):  # the usual names first: no scan of every package
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    for dist in metadata.packages_distributions().get(top, []):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    loaded = sys.modules.get(top)
    return str(getattr(loaded, "__version__", "")) if loaded is not None else ""


def _compiler() -> str:
    """The C++ compiler Inductor would use (`$CXX`, else the first of g++, clang++, c++ on PATH,
    as Inductor searches on Linux; importing Inductor to ask would cost 1.7 s at every start)
    and the first line of its `--version`."""
    cxx = os.environ.get("CXX", "") or next(
        (c for c in ("g++", "clang++", "c++") if shutil.which(c)), "c++"
    )
    path = shutil.which(cxx) or cxx
    try:
        out = launch.tool(
            [path, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return f"{cxx} (not runnable)"
    first = out.strip().splitlines()[0] if out.strip() else ""
    return f"{cxx}: {first}" if first else cxx


def _isa() -> str:
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # noqa: BLE001 - torch without the query
        return "unknown"

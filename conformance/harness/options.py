"""Command-line options of the suite; each also reads an environment variable."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import torch

from conformance.engine.layout_names import LAYOUT_HELP, parse_layouts
from conformance.errors import ConformanceUsageError

DEFAULT_BACKEND = "echo_npu"
DEFAULT_DTYPES = "float32,float64,float16,bfloat16,int32,int64,bool"
PATHS = ("native", "fallback")

# (option, env var, default, help)
OPTIONS = [
    (
        "--backend",
        "CONFORMANCE_BACKEND",
        DEFAULT_BACKEND,
        "Python module whose import registers the PrivateUse1 device under test",
    ),
    (
        "--device",
        "CONFORMANCE_DEVICE",
        None,
        "device type of the backend (default: the PrivateUse1 name after import)",
    ),
    (
        "--ops",
        "CONFORMANCE_OPS",
        None,
        "comma-separated overloads or globs to test, e.g. 'masked_fill_.*,add.Tensor' "
        "(default: every overload the backend registered)",
    ),
    (
        "--fallback-ops",
        "CONFORMANCE_FALLBACK_OPS",
        None,
        "also test overloads the backend did not register, reached only through its boxed "
        "cpu_fallback (path 'fallback'): comma-separated globs, or 'all' for every such overload "
        "with OpInfo samples (slow: for nightly runs)",
    ),
    (
        "--dtypes",
        "CONFORMANCE_DTYPES",
        DEFAULT_DTYPES,
        "comma-separated torch dtypes ('all' for every dtype OpInfo knows)",
    ),
    (
        "--layouts",
        "CONFORMANCE_LAYOUTS",
        "all",
        "comma-separated layouts: " + ", ".join(f"{k} ({v})" for k, v in LAYOUT_HELP.items()),
    ),
    (
        "--paths",
        "CONFORMANCE_PATHS",
        ",".join(PATHS),
        "native (the backend's kernel) and/or fallback (the same op routed through cpu_fallback, "
        "when the backend offers set_fallback_routes)",
    ),
    (
        "--expectations",
        "CONFORMANCE_EXPECTATIONS",
        None,
        "expected-failure manifest(s), comma-separated (default: "
        "matrices/expectations/<backend>/{common,torch-<minor>}.toml); 'none' for no manifest",
    ),
    (
        "--isolate",
        "CONFORMANCE_ISOLATE",
        "auto",
        "crash isolation: 'fork' runs cases in a forked child so a segfault/abort marks that case "
        "crashed and the run goes on; 'none' runs in-process; 'auto' = fork unless pytest-xdist "
        "runs the cases (xdist restarts crashed workers itself)",
    ),
    (
        "--repro-dir",
        "CONFORMANCE_REPRO_DIR",
        None,
        "write a standalone script plus the exact inputs (<case>.py, <case>.pt) for every "
        "failing case into this directory",
    ),
    (
        "--results",
        "CONFORMANCE_RESULTS",
        "results",
        "directory for per-case JSON lines and run.json ('none' to disable)",
    ),
]

ALL_DTYPES = [
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "complex64",
    "complex128",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
]


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "torch-conformance (op conformance vs CPU)")
    for flag, env, default, text in OPTIONS:
        shown = f" [env {env}; default: {default}]" if default else f" [env {env}]"
        group.addoption(flag, dest="conformance_" + flag[2:], default=None, help=text + shown)


@dataclass
class Options:
    backend: str
    device: str | None
    ops: list[str] | None
    fallback_ops: list[str] | None
    dtypes: list[torch.dtype]
    layouts: list[str]
    paths: list[str]
    expectations: list[str] | None  # None: defaults; []: none
    results: str | None
    isolate: str
    repro_dir: str | None


def _value(config: pytest.Config, flag: str, env: str, default: str | None) -> str | None:
    given = config.getoption("conformance_" + flag[2:])
    if given is not None:
        return given
    return os.environ.get(env) or default


def parse_dtypes(text: str) -> list[torch.dtype]:
    import torch

    names = ALL_DTYPES if text == "all" else [n.strip() for n in text.split(",") if n.strip()]
    out = []
    for name in names:
        dtype = getattr(torch, name.removeprefix("torch."), None)
        if not isinstance(dtype, torch.dtype):
            raise ConformanceUsageError(f"unknown dtype '{name}'; valid: {', '.join(ALL_DTYPES)}")
        out.append(dtype)
    return out


def parse_paths(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in PATHS]
    if bad or not names:
        raise ConformanceUsageError(
            f"unknown path(s) {', '.join(bad) or '(none)'}; valid: {', '.join(PATHS)}"
        )
    return names


def _choice(flag: str, value: str, valid: tuple[str, ...]) -> str:
    if value not in valid:
        raise ConformanceUsageError(f"{flag} {value!r}: valid values are {', '.join(valid)}")
    return value


def _list(text: str | None) -> list[str] | None:
    return [o.strip() for o in text.split(",") if o.strip()] if text else None


def read_options(config: pytest.Config) -> Options:
    v = {flag: _value(config, flag, env, default) for flag, env, default, _ in OPTIONS}
    ops = _list(v["--ops"])
    exp = v["--expectations"]
    results = v["--results"]
    return Options(
        backend=v["--backend"],
        device=v["--device"],
        ops=ops,
        fallback_ops=_list(v["--fallback-ops"]),
        dtypes=parse_dtypes(v["--dtypes"]),
        layouts=parse_layouts(v["--layouts"]),
        paths=parse_paths(v["--paths"]),
        expectations=None if exp is None else ([] if exp == "none" else exp.split(",")),
        results=None if results in (None, "", "none") else results,
        repro_dir=v["--repro-dir"],
        isolate=_choice("--isolate", v["--isolate"], ("auto", "fork", "none")),
    )

"""The [backend] table of a matrix file, read and checked into a :class:`Backend`.

The backend under test: the module whose import registers it, how to build it into a session's
venv (``[backend.build]``: source folder, command, what to copy, watch and set), its allocator
modes and the variable that selects one (``[backend.allocator]``), its sanitizer builds
(``[backend.sanitizers.<name>]``), extra requirements, environment, expectations folder, fault
variable and label. Relative paths start at the matrix file's folder; every problem raises
:class:`~conformance.ci.matrix_spec.MatrixError` with one line naming the key and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from conformance.ci.matrix_spec import (
    NO_SANITIZER,
    PRELOADS,
    AllocatorSpec,
    Backend,
    BuildSpec,
    MatrixError,
    Sanitizer,
)
from conformance.ci.matrix_values import (
    check_keys,
    env_name,
    env_table,
    nonempty_str,
    opt_list,
    str_list,
)

__all__ = ["parse_backend"]

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _build(data: Any, src: str, base: Path) -> BuildSpec:
    where = f"{src} [backend.build]"
    if not isinstance(data, Mapping):
        raise MatrixError(
            f'{where}: missing; add [backend.build] with command = "..." that builds and '
            "installs the backend into the active venv (see docs/MATRIX.md)"
        )
    check_keys(data, ["source", "command", "include", "exclude", "watch", "env"], where)
    raw = data.get("command")
    command: str | tuple[str, ...]
    if isinstance(raw, str) and raw.strip():
        command = raw.strip()
    elif isinstance(raw, list) and raw and all(isinstance(x, str) and x for x in raw):
        command = tuple(raw)
    else:
        raise MatrixError(
            f"{where}.command: expected a shell command string or an argv list, e.g. "
            'command = "pip install --no-build-isolation ." (it runs in a fresh copy of source)'
        )
    source = (base / nonempty_str(data.get("source", "."), f"{where}.source")).resolve()
    if not source.is_dir():
        raise MatrixError(
            f"{where}.source: folder {source} does not exist (relative paths start at the "
            "matrix file's folder)"
        )
    include = opt_list(data.get("include"), f"{where}.include")
    for name in include:
        if not (source / name).exists():
            raise MatrixError(f"{where}.include: '{name}' not found in {source}; remove it")
    watch = opt_list(data.get("watch"), f"{where}.watch")
    for name in watch:
        if not (source / name).exists():
            raise MatrixError(f"{where}.watch: '{name}' not found in {source}; remove it")
    return BuildSpec(
        source=source,
        command=command,
        include=include,
        exclude=opt_list(data.get("exclude"), f"{where}.exclude"),
        watch=watch,
        env=env_table(data.get("env"), f"{where}.env"),
    )


def _allocator(data: Any, src: str) -> AllocatorSpec:
    where = f"{src} [backend.allocator]"
    if data is None:
        return AllocatorSpec()
    if not isinstance(data, Mapping):
        raise MatrixError(f"{where}: expected a table with env, default, modes")
    check_keys(data, ["env", "default", "modes"], where)
    modes = str_list(data.get("modes"), f"{where}.modes")
    for mode in modes:
        if not _NAME_RE.match(mode):
            raise MatrixError(f"{where}.modes: '{mode}' must be lowercase [a-z0-9_]")
    if len(set(modes)) != len(modes):
        raise MatrixError(f"{where}.modes: duplicate entries in {list(modes)}")
    default = nonempty_str(data.get("default", modes[0]), f"{where}.default")
    if default not in modes:
        raise MatrixError(
            f"{where}.default: '{default}' is not one of the modes ({', '.join(modes)})"
        )
    env = env_name(data.get("env"), f"{where}.env")
    if env is None and len(modes) > 1:
        raise MatrixError(
            f"{where}.env: {len(modes)} modes need the environment variable that selects "
            'one, e.g. env = "MY_NPU_ALLOCATOR"'
        )
    return AllocatorSpec(modes=modes, default=default, env=env)


def _sanitizers(data: Any, src: str) -> tuple[Sanitizer, ...]:
    where = f"{src} [backend.sanitizers]"
    if data is None:
        return ()
    if not isinstance(data, Mapping):
        raise MatrixError(f"{where}: expected one table per build, e.g. [backend.sanitizers.asan]")
    out = []
    for name, spec in data.items():
        at = f"{src} [backend.sanitizers.{name}]"
        if not _NAME_RE.match(name) or name == NO_SANITIZER:
            raise MatrixError(f"{at}: the name must be lowercase [a-z0-9_] and not '{name}'")
        if not isinstance(spec, Mapping):
            raise MatrixError(f"{at}: expected a table with build_env, run_env, preload")
        check_keys(spec, ["build_env", "run_env", "preload"], at)
        preload = opt_list(spec.get("preload"), f"{at}.preload")
        for lib in preload:
            if lib not in PRELOADS:
                raise MatrixError(f"{at}.preload: '{lib}' is not one of {', '.join(PRELOADS)}")
        out.append(
            Sanitizer(
                name=name,
                build_env=env_table(spec.get("build_env"), f"{at}.build_env"),
                run_env=env_table(spec.get("run_env"), f"{at}.run_env"),
                preload=preload,
            )
        )
    return tuple(out)


def parse_backend(data: Mapping[str, Any], src: str, base: Path) -> Backend:
    """[backend]: the backend under test, its build, allocator modes and sanitizer builds."""
    where = f"{src} [backend]"
    table = data.get("backend")
    if not isinstance(table, Mapping):
        raise MatrixError(
            f'{src}: missing table [backend]; describe the backend under test (module = "...", '
            "[backend.build] command = ...), see docs/MATRIX.md"
        )
    allowed = ["module", "device", "requires", "env", "expectations", "fault_env", "label"]
    check_keys(table, [*allowed, "build", "allocator", "sanitizers"], where)
    module = nonempty_str(
        table.get("module"), f"{where}.module (the module whose import registers it)"
    )
    if not _MODULE_RE.match(module):
        raise MatrixError(f"{where}.module: '{module}' is not an importable module name")
    device = table.get("device")
    if device is not None:
        device = nonempty_str(device, f"{where}.device")
    expectations = None
    if table.get("expectations") is not None:
        raw = nonempty_str(table["expectations"], f"{where}.expectations")
        expectations = (base / raw).resolve()
        if not expectations.is_dir():
            raise MatrixError(
                f"{where}.expectations: folder {expectations} does not exist (it holds "
                "common.toml and torch-<minor>.toml; remove the key if you have none)"
            )
    return Backend(
        module=module,
        build=_build(table.get("build"), src, base),
        allocator=_allocator(table.get("allocator"), src),
        sanitizers=_sanitizers(table.get("sanitizers"), src),
        device=device,
        requires=opt_list(table.get("requires"), f"{where}.requires"),
        env=env_table(table.get("env"), f"{where}.env"),
        expectations=expectations,
        fault_env=env_name(table.get("fault_env"), f"{where}.fault_env"),
        label=_label(table.get("label"), f"{where}.label"),
    )


def _label(value: Any, where: str) -> str | None:
    if value is None:
        return None
    label = nonempty_str(value, where)
    if not re.fullmatch(r"[a-z][a-z0-9_]*", label):
        raise MatrixError(f"{where}: '{label}' must be lowercase letters, digits and '_' (xla)")
    return label

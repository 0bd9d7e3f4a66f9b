"""Set up the conformance matrix, nox sessions and workflows in a backend's own repository.

    python -m conformance.ci.init --module my_npu \\
        --build "uv pip install --no-build-isolation --no-deps --reinstall --no-cache ." \\
        --allocator-env MY_NPU_ALLOCATOR --allocator-modes default,guard \\
        --sanitizer asan:MY_NPU_ASAN=1 --torch 2.12,2.13

writes, into ``--dir`` (default: the current folder):

- ``conformance-matrix.toml``: torch releases (from this package's matrix, or ``--torch``) and the
  ``[backend]`` description; validated before anything is written;
- ``noxfile.py``: three lines calling :func:`conformance.ci.sessions.register`;
- ``.github/workflows/conformance-pr.yml`` and ``conformance-nightly.yml`` (the nightly from the
  same template as torch-conformance's own, rehearsed locally by ``nox -s nightly -- 2.12 2.13``);
- with ``--crcr``, ``conformance-crcr.yml``: PyTorch's cross-repository CI relay
  (ci/crcr_template.py).

Existing files are left alone unless ``--force``. Then: ``nox -l``, ``nox -s conformance-<minor>``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from conformance.ci.crcr_template import user_crcr
from conformance.ci.matrix_file import DEFAULT_MATRIX_PATH, load_matrix
from conformance.ci.matrix_spec import PRELOADS, MatrixError
from conformance.ci.templates import MATRIX_TOML, NOXFILE_PY, render, user_nightly, user_pr

__all__ = ["main", "matrix_text", "write_files"]

MATRIX_FILE = "conformance-matrix.toml"
DEFAULT_COMMAND = "uv pip install --no-build-isolation --no-deps --reinstall --no-cache ."
DEFAULT_REQUIRES = ("setuptools>=68", "wheel", "ninja")


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a TOML basic string is a JSON string for these characters


def _toml_list(values: Sequence[str]) -> str:
    return "[" + ", ".join(_toml_str(v) for v in values) + "]"


def _sanitizer(spec: str) -> tuple[str, dict[str, str], list[str]]:
    """``asan:NAME=VALUE[,NAME=VALUE]`` -> (name, build env, preload)."""
    name, _, rest = spec.partition(":")
    env = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise MatrixError(f"--sanitizer {spec!r}: expected name:NAME=VALUE[,NAME=VALUE]")
        env[key] = value
    preload = [name] if name in PRELOADS else []
    return name, env, preload


def matrix_text(args: argparse.Namespace) -> str:
    """The matrix file for the command-line ``args``."""
    bundled = load_matrix(DEFAULT_MATRIX_PATH)
    wanted = [m.strip() for m in args.torch.split(",") if m.strip()] if args.torch else None
    releases = [r for r in bundled.releases if wanted is None or r.minor in wanted]
    if wanted:
        missing = sorted(set(wanted) - {r.minor for r in releases})
        if missing:
            raise MatrixError(
                f"--torch {','.join(missing)}: not in this package's matrix "
                f"(known: {bundled.valid_versions()}); add [[torch.release]] entries by hand"
            )
    default = args.default or (
        bundled.default_minor
        if bundled.default_minor in {r.minor for r in releases}
        else releases[-1].minor
    )
    blocks = []
    for rel in releases:
        block = f'[[torch.release]]\nminor = "{rel.minor}"\nversion = "{rel.version}"\n'
        if rel.extra:
            block += f"extra = {_toml_list(rel.extra)}\n"
        blocks.append(block)
    allocator = ""
    if args.allocator_modes:
        modes = [m.strip() for m in args.allocator_modes.split(",") if m.strip()]
        allocator = (
            "\n# Allocator modes, selected at run time by an environment variable; the first is\n"
            "# the default (no suffix in session names).\n[backend.allocator]\n"
            + (f"env = {_toml_str(args.allocator_env)}\n" if args.allocator_env else "")
            + f"default = {_toml_str(modes[0])}\nmodes = {_toml_list(modes)}\n"
        )
    sanitizers = ""
    for spec in args.sanitizer:
        name, env, preload = _sanitizer(spec)
        env_text = ", ".join(f"{k} = {_toml_str(v)}" for k, v in env.items())
        sanitizers += (
            f"\n# A sanitizer build: cells conformance-<minor>-{name}.\n"
            f"[backend.sanitizers.{name}]\n"
            f"build_env = {{ {env_text} }}\n"
            + ('run_env = { ASAN_OPTIONS = "detect_leaks=0" }\n' if name == "asan" else "")
            + f"preload = {_toml_list(preload)}\n"
        )
    values = {
        "BACKEND": args.module,
        "MODULE": args.module,
        "DEFAULT": default,
        "RELEASES": "\n".join(blocks),
        "DEVICE": f"device = {_toml_str(args.device)}\n" if args.device else "",
        "REQUIRES": _toml_list(args.requires or DEFAULT_REQUIRES),
        "FAULT_ENV": (
            f"fault_env = {_toml_str(args.fault_env)}   # bisect --fault NAME --fault-from X\n"
            if args.fault_env
            else ""
        ),
        "SOURCE": args.source,
        "COMMAND": args.build.replace("\\", "\\\\").replace('"', '\\"'),
        "INCLUDE": f"include = {_toml_list(args.include)}\n" if args.include else "",
        "WATCH": f"watch = {_toml_list(args.watch)}\n" if args.watch else "",
        "ALLOCATOR": allocator,
        "SANITIZERS": sanitizers,
    }
    return render(MATRIX_TOML, values).rstrip("\n") + "\n"


def write_files(args: argparse.Namespace) -> list[Path]:
    """Validate, then write the four files; returns their paths. Raises :class:`MatrixError`."""
    target = Path(args.dir).resolve()
    text = matrix_text(args)
    target.mkdir(parents=True, exist_ok=True)
    probe = target / f".{MATRIX_FILE}.check"  # validated where its relative paths resolve
    try:
        probe.write_text(text, encoding="utf-8")
        matrix = load_matrix(probe)
    finally:
        probe.unlink(missing_ok=True)
    minors = matrix.minors
    sessions = [matrix.cell("").session]
    if args.pr_cells:
        sessions = [matrix.cell(c.strip()).session for c in args.pr_cells.split(",") if c.strip()]
    files = {
        target / MATRIX_FILE: text,
        target / "noxfile.py": render(
            NOXFILE_PY,
            {
                "BACKEND": args.module,
                "MATRIX": MATRIX_FILE,
                "DEFAULT": matrix.default_minor,
                "TWO": " ".join(minors[-2:]),
            },
        ),
        target / ".github" / "workflows" / "conformance-pr.yml": user_pr(
            args.module, MATRIX_FILE, sessions
        ),
        target / ".github" / "workflows" / "conformance-nightly.yml": user_nightly(
            args.module, MATRIX_FILE
        ),
    }
    if args.crcr:
        files[target / ".github" / "workflows" / "conformance-crcr.yml"] = user_crcr(
            args.module, args.build
        )
    existing = [p for p in files if p.exists()]
    if existing and not args.force:
        names = ", ".join(str(p.relative_to(target)) for p in existing)
        hint = ""
        if any(p.name == "noxfile.py" for p in existing):
            hint = (
                "; or add to your noxfile: from conformance.ci.sessions import register; "
                f'register("{MATRIX_FILE}")'
            )
        raise MatrixError(f"{names} exist already in {target}: pass --force to overwrite{hint}")
    for path, content in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    return list(files)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m conformance.ci.init",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--module", required=True, help="the module whose import registers the device")
    p.add_argument("--dir", default=".", help="the backend repository (default: .)")
    p.add_argument("--source", default=".", help="backend sources, relative to --dir (default .)")
    p.add_argument(
        "--build",
        default=DEFAULT_COMMAND,
        help=f"build+install command, run in a copy of --source (default: {DEFAULT_COMMAND})",
    )
    p.add_argument("--requires", action="append", help="requirement installed before the build")
    p.add_argument("--include", action="append", help="copy only these paths of --source")
    p.add_argument("--watch", action="append", help="hash only these paths for rebuilds")
    p.add_argument("--device", default=None, help="device type if not the PrivateUse1 name")
    p.add_argument("--torch", default=None, help="comma-separated minors (default: all known)")
    p.add_argument("--default", default=None, help="the default torch minor")
    p.add_argument("--allocator-env", default=None, help="variable selecting the allocator mode")
    p.add_argument("--allocator-modes", default=None, help="comma-separated modes, default first")
    p.add_argument(
        "--sanitizer",
        action="append",
        default=[],
        metavar="NAME:VAR=VALUE",
        help="a sanitizer build and its build environment, e.g. asan:MY_NPU_ASAN=1",
    )
    p.add_argument("--fault-env", default=None, help="variable switching injected faults")
    p.add_argument("--pr-cells", default=None, help="cells of the PR workflow (default: default)")
    p.add_argument(
        "--crcr",
        action="store_true",
        help="also .github/workflows/conformance-crcr.yml: PyTorch's cross-repository CI relay "
        "(its PRs and pushes dispatched here, a nightly self-report; ci/crcr_template.py)",
    )
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: 0 written, 2 on a bad description or existing files."""
    args = build_parser().parse_args(argv)
    try:
        written = write_files(args)
    except MatrixError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    root = Path(args.dir).resolve()
    for path in written:
        print(f"wrote {path.relative_to(root)}")
    print("next: nox -l; nox -s conformance-<minor>; nox -s nightly -- <minor> <minor>")
    return 0


if __name__ == "__main__":
    sys.exit(main())

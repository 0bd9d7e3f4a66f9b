"""A backend repository outside this checkout, for the self-tests: a user's project with its own
sources and conformance-matrix.toml, whose build command is cheap and leaves a trace."""

from __future__ import annotations

from pathlib import Path

MATRIX = """\
schema = 2

[torch]
default = "{default}"
python = "3.11"
{releases}
[backend]
module = "mynpu"
requires = ["ninja"]
fault_env = "MYNPU_FAULTS"
env = {{ MYNPU_LOG = "1" }}

[backend.build]
source = "."
include = ["mynpu", "csrc"]
watch = ["csrc", "mynpu"]
command = '{command}'

[backend.allocator]
env = "MYNPU_ALLOCATOR"
modes = ["plain", "guard"]

[backend.sanitizers.asan]
build_env = {{ MYNPU_ASAN = "1" }}
"""

VERSIONS = {"2.9": "2.9.1", "2.10": "2.10.0", "2.11": "2.11.0", "2.12": "2.12.1", "2.13": "2.13.0"}


def make_user_repo(
    root: Path, *, minors: tuple[str, ...] = ("2.12", "2.13"), command: str | None = None
) -> Path:
    """``root/mynpu-repo``: sources, a build product and docs that must not count, the matrix.

    The default build appends one line to ``root/builds.log`` per build (torch version, ASan flag,
    the folder it ran in)."""
    repo = root / "mynpu-repo"
    (repo / "mynpu").mkdir(parents=True)
    (repo / "mynpu" / "__init__.py").write_text('"""mynpu: a fake backend."""\n')
    (repo / "csrc").mkdir()
    (repo / "csrc" / "kernels.cpp").write_text("int kernel() { return 1; }\n")
    (repo / "docs").mkdir()
    (repo / "docs" / "notes.md").write_text("notes\n")
    (repo / "build").mkdir()
    (repo / "build" / "stale.o").write_text("object\n")
    log = root / "builds.log"
    command = command or (
        f'echo "$CONFORMANCE_TORCH_VERSION asan=${{MYNPU_ASAN:-0}} $(pwd)" >> {log}'
    )
    releases = "".join(
        f'\n[[torch.release]]\nminor = "{m}"\nversion = "{VERSIONS[m]}"\n' for m in minors
    )
    (repo / "conformance-matrix.toml").write_text(
        MATRIX.format(default=minors[-1], releases=releases, command=command), encoding="utf-8"
    )
    return repo


def builds(root: Path) -> list[str]:
    """Lines of ``root/builds.log``: one per build the fake command ran."""
    log = root / "builds.log"
    return log.read_text().splitlines() if log.is_file() else []

"""Turn on echo_npu's ``torch.backends`` autoload without installing another distribution.

``python -m echo_npu.autoload DIR`` writes ``DIR/echo_npu_autoload-0.dist-info`` (METADATA and an
``entry_points.txt`` with ``[torch.backends] echo_npu = echo_npu:_autoload``). With DIR on
``PYTHONPATH``, ``import torch`` then imports echo_npu (torch/__init__.py's
``_import_device_backends`` loads and calls every entry point of the group ``torch.backends``),
unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``.

``python -m`` imports the echo_npu package first (and so torch); ``write`` itself needs neither.
"""

from __future__ import annotations

import sys
from pathlib import Path

DIST_INFO = "echo_npu_autoload-0.dist-info"
ENTRY_POINT = "echo_npu = echo_npu:_autoload"


def write(directory: str | Path) -> Path:
    """Write the dist-info folder into ``directory``; return its path."""
    info = Path(directory) / DIST_INFO
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: echo_npu_autoload\nVersion: 0\n"
        "Summary: torch.backends entry point of echo_npu (written by echo_npu.autoload)\n"
    )
    (info / "entry_points.txt").write_text(f"[torch.backends]\n{ENTRY_POINT}\n")
    return info


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m echo_npu.autoload DIR", file=sys.stderr)
        return 2
    print(write(args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

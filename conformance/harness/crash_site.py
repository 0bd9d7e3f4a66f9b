"""Where a crash happened: the aten op the process was inside when it died.

A crash record names the case that died, and faulthandler's stack names a Python line; neither
names the op when the kernel that died was called by another op, or by the autograd engine on
a thread of its own (`<no Python frame>`): a module's backward that aborts in `neg`. Once a
case's crash is found to be its own (it died in a fresh runner, or crashes alone in one, or
only after one other case), the owner replays it once more in a fresh runner under an op trace
(`start_trace`: a `TorchDispatchMode`, torch's standard hook, no backend hook of ours): each
op's entry and exit are one write each to a file, so what the file ends with outlives the
process, and the op entered last and not left is the crash site (`site_of`, the record's
`crash_site`).

The replay is diagnostics, run apart from the case's verdict: a Python mode sees each op between
autograd and the backend, so the traced path may differ; a replay that does not die says
nothing. Where the site names the finding is finding_keys.py's rule: a heap damaged earlier
can make any later op die (tried: a write past a block in `neg` segfaulted inside `empty`,
`view` and `tanh_backward`), so only an abort, or a crash of an op whose own cases crash the
same way, is keyed by its site.
"""

from __future__ import annotations

import os
import threading
from typing import Any


def op_label(schema_name: str, overload: str) -> str:
    """A record's op name of a schema: ``neg`` of aten::neg, ``add.Tensor`` of aten::add.Tensor."""
    name = schema_name.split("::")[-1]
    return f"{name}.{overload}" if overload and overload != "default" else name


def site_of(trace: str) -> str | None:
    """The op entered last and not left, on any thread, in a trace file's text (None: every op
    it entered, it left)."""
    open_ops: dict[str, list[tuple[int, str]]] = {}
    for index, line in enumerate(trace.splitlines()):
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] == ">":
            open_ops.setdefault(parts[1], []).append((index, parts[2]))
        elif len(parts) == 2 and parts[0] == "<" and open_ops.get(parts[1]):
            open_ops[parts[1]].pop()
    unclosed = [entry for stack in open_ops.values() for entry in stack]
    return max(unclosed)[1] if unclosed else None


def start_trace(path: str) -> Any:
    """Enter an op trace writing to `path` for the rest of this process (a runner's replay)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpTrace(TorchDispatchMode):
        """Each op's entry (`> thread op`) and exit (`< thread`, also when it raises)."""

        def __init__(self, fd: int) -> None:
            super().__init__()
            self.fd = fd

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            thread = threading.get_ident()
            schema = func._schema
            label = op_label(schema.name, schema.overload_name)
            os.write(self.fd, f"> {thread} {label}\n".encode())
            try:
                return func(*args, **(kwargs or {}))
            finally:
                os.write(self.fd, f"< {thread}\n".encode())

    mode = OpTrace(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    mode.__enter__()
    return mode

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

On an eager device whose queued work torch can wait for (the device module's or
torch.accelerator's `synchronize`), the trace waits after each op, before writing its exit, so
a kernel that dies on a queue or a worker thread dies inside the op that queued it. Where it
cannot wait (and on a lazy device, never traced: culprit.py), a crash of deferred work shows in
the op that forced it: a copy to the CPU or a scalar read (`FORCING`), which then names no site
unless it is the case's own op (`trace_site`).

The replay is diagnostics, run apart from the case's verdict: a Python mode sees each op between
autograd and the backend, so the traced path may differ; a replay that does not die the way the
case did says nothing (culprit.py). Where the site names the finding is finding_keys.py's
rule: a heap damaged earlier can make any later op die (tried: a write past a block in `neg`
segfaulted inside `empty`, `view` and `tanh_backward`), so only an abort, or a crash of an op
whose own cases crash the same way, is keyed by its site.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

#: ops that run a deferred device's pending work to read its result: where work queued by an
#: earlier op dies when the trace could not wait after each op
FORCING = frozenset(
    {"_to_copy", "copy_", "_copy_from", "_copy_from_and_resize", "_local_scalar_dense", "equal"}
)
_WAITS = "= waits after each op"


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


def trace_site(trace: str, own_op: str) -> str | None:
    """The crash site a trace file's text names for a case of `own_op`: `site_of`, except an
    op that forces deferred work (`FORCING`) other than the case's own where the trace did not
    wait after each op (the work that died may be any earlier op's)."""
    site = site_of(trace)
    waited = trace.startswith(_WAITS + "\n")
    if site in FORCING and site != own_op and not waited:
        return None
    return site


def start_trace(path: str, wait: Callable[[], None] | None = None) -> Any:
    """Enter an op trace writing to `path` for the rest of this process (a runner's replay);
    `wait`: what waits for the device's queued work, called after each op (None: not waited)."""
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
                out = func(*args, **(kwargs or {}))
                if wait is not None:
                    wait()
                return out
            finally:
                os.write(self.fd, f"< {thread}\n".encode())

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    if wait is not None:
        os.write(fd, f"{_WAITS}\n".encode())
    mode = OpTrace(fd)
    mode.__enter__()
    return mode

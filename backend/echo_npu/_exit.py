"""At exit: torch's autograd device threads let go of earlier backward passes before the
interpreter finalises.

A backward pass through npu tensors runs on torch's autograd device threads (``pt_autograd_<i>``,
one per device index, as CUDA's). On torch 2.13 each backward's GraphTask holds a Python object:
``torch/autograd/graph.py`` stashes a ``contextvars.Context`` in the thread-local state, which
the GraphTask copies, and whichever thread drops the GraphTask last releases it and must take
the GIL. That is sometimes the device thread, after the caller's ``backward()`` has returned
(the race left open by pytorch #182083, described in the closed pytorch #180700/#180701). If
the interpreter is finalising by then, taking the GIL calls ``pthread_exit``, whose unwinding
meets a ``noexcept`` destructor (``~ThreadLocalState``): ``std::terminate``, "terminate called
without an active exception", SIGABRT at the exit of a script that had finished (a third of the
scripts that end right after a backward, on a 2-core machine; docs/BACKEND.md, "Exit").

Python's atexit handlers run before finalisation. This one runs a tiny backward on each autograd
device thread of the process, and the engine releases the GIL while it waits: a device thread
takes its next task only after it has dropped the previous one, so once it has run the probe,
nothing of earlier backward passes is left for it to release. The probe leaves the thread nothing
to release that takes the GIL either: it calls the engine without the stash, accumulates into its
leaf instead of returning a result (the GraphTask would hold the result tensors, and dropping a
C++ reference to a tensor that has a Python object takes the GIL too), and its tensors are kept
for good (``_C.keep_forever``).
"""

from __future__ import annotations

import atexit
import os

import torch

from . import _C, _env

_registered = False
_THREAD_PREFIX = "pt_autograd_"  # torch's name for the device thread of index i
_THREADED = 1 << _env.RUNTIME_PERSONALITIES.index("threaded")  # its runtime personality bit


def register() -> None:
    """Register the exit handler (once)."""
    global _registered
    if not _registered:
        _registered = True
        atexit.register(quiesce_autograd)


def _device_threads() -> list[int] | None:
    """Indices of the autograd device threads this process has (``None``: cannot tell)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    found = set()
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        if name.startswith(_THREAD_PREFIX) and name[len(_THREAD_PREFIX) :].isdigit():
            found.add(int(name[len(_THREAD_PREFIX) :]))
    return sorted(found)


def quiesce_autograd() -> None:
    """Run one probe backward on each autograd device thread of an initialised device."""
    if not _C.is_initialized():
        return  # no backward ran on the device in this process
    if _C.is_forked_child() and (_C.in_bad_fork() or _C.runtime_personality() & _THREADED):
        return  # a child that may not touch its parent's device (refuse-fork; "threaded" hangs)
    indices = _device_threads()
    count = _C.device_count()
    indices = range(count) if indices is None else [i for i in indices if i < count]
    if not indices:
        return
    engine = torch.autograd.Variable._execution_engine
    device_type = torch._C._get_privateuse1_backend_name()
    for index in indices:
        try:
            with torch.enable_grad():
                x = torch.empty(0, device=torch.device(device_type, index), requires_grad=True)
                y = x.sum()  # SumBackward0 runs on the device thread of `index`
                grad = torch.ones_like(y)
                _C.keep_forever((x, y, grad))
                # (tensors, grad_tensors, keep_graph, create_graph, inputs, allow_unreachable,
                # accumulate_grad): y.backward(grad, inputs=[x]), without the context stash.
                # Accumulated, not captured: the GraphTask's result holds no tensor with a
                # Python object (releasing one takes the GIL)
                engine.run_backward((y,), (grad,), False, False, (x,), True, True)
        except Exception:  # noqa: BLE001 - best effort at exit: never fail the exit itself
            pass

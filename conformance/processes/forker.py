"""How a process of the suite forks a child that runs a task (a module-level function):
directly where its row of processes/kinds.py may fork and processes/forking.py allows it now,
else through a task zygote (processes/zygote.py). `FORKER` is this process's.
"""

from __future__ import annotations

from typing import Any

from conformance.processes import forking, launch
from conformance.processes.this import THIS, ThisProcess
from conformance.processes.zygote import ZygoteGone, ZygoteLink, start_task_zygote


class Forker:
    """How a process forks a child that runs `fn(payload, progress_fd)` (a module-level
    function, named "module:name"): directly where its row may fork (processes/this.py: a
    runner never does) and `refusal()` allows it, else through a task zygote: the one its
    runner zygote keeps for a forked runner (`ThisProcess.tasks_from`, asked for on the first
    task; never the runner zygote itself, which must keep the device untouched and visible),
    or one it starts. A zygote that a warm-up left with threads (a runtime that starts them
    where this suite did not expect one) is replaced by a task zygote of this process that
    warms nothing up."""

    def __init__(self, this: ThisProcess = THIS) -> None:
        self.this = this
        self.link: ZygoteLink | None = None
        self.cold = False  # warm-ups started threads in a zygote: children load what they need

    def use(self, link: ZygoteLink | None) -> None:
        """Fork through `link` from now on."""
        old, self.link = self.link, link
        if old is not None and old is not link:
            old.close()

    def direct(self) -> bool:
        return self.link is None and self.this.kind.may_fork and forking.refusal() is None

    def start(
        self, fn: str, payload: Any, progress_fd: int, site: str, warm: tuple[str, ...] = ()
    ) -> forking.Child:
        """A child running `fn(payload, progress_fd)`; `progress_fd` stays open here. `warm`
        names functions ("module:name") the forking process calls once before it forks (what
        every such child would otherwise load again: OpInfo's op_db, 5-10 s)."""
        if self.direct():
            for ref in warm:
                forking.warm_up(ref)
            pid = launch.fork("task", site)
            if pid == 0:  # the child: never returns
                forking.run_task(fn, payload, progress_fd)
            return forking.Child(pid)
        if self.link is None:
            given = self.this.tasks_from
            self.link = given.task_link() if given is not None else start_task_zygote()
        try:
            return self.link.fork_task(fn, payload, progress_fd, () if self.cold else warm)
        except ZygoteGone as exc:
            if self.cold or "may not fork" not in str(exc):
                raise
        self.cold = True
        self.use(start_task_zygote())
        return self.link.fork_task(fn, payload, progress_fd, ())


FORKER = Forker()

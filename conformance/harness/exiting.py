"""How a pytest process of the suite ends: with `os._exit(exit status)` once pytest has printed
its summary, every plugin has unconfigured and the results are written, instead of the
interpreter's teardown. A device runtime's teardown at exit can block forever (a static
destructor joining a driver thread) or abort ("terminate called without an active exception"),
and other libraries' exit handlers wait for their children (multiprocessing) and threads: none
of that may change the exit code, a record or the time the run takes. `--exit-teardown` keeps
the normal teardown (a coverage tool that saves at exit needs it).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
from typing import Any

import pytest


def is_command_line(config: pytest.Config) -> bool:
    """This process is the one `pytest ...` started (not pytest.main() called in-process, not
    an xdist worker)."""
    return sys.argv[1:] == list(config.invocation_params.args)


def end_at_exit(session: pytest.Session) -> None:
    """At interpreter exit (before any other exit handler: registered last, run first), flush
    and end the process with the session's exit status."""

    def end() -> None:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(int(session.exitstatus))

    atexit.register(end)


def interrupt_on_sigterm(accounting: Any) -> Any:
    """A CI timeout's SIGTERM ends the run as Ctrl-C does: pytest finishes the session, so
    every case that did not run gets its not-run record (the default action would end the
    process with nothing written). Returns the handler it replaced (None: not the main
    thread, left alone)."""

    def interrupt(signum: int, frame: Any) -> None:
        accounting.interrupted_by = signal.Signals(signum).name
        raise KeyboardInterrupt(accounting.interrupted_by)

    try:
        return signal.signal(signal.SIGTERM, interrupt)
    except ValueError:
        return None

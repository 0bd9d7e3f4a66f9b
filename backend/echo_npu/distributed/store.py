"""The ``echo`` backend's transport: the c10d Store its creator received."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from .work import DistError

# Set at exit (base.py): waits give up, so that the backend's threads end before the interpreter
# finalises (a thread inside a Store call then would abort the process: base.py, "Exit").
EXITING = threading.Event()


def check_exiting() -> None:
    if EXITING.is_set():
        raise DistError("echo: the process is exiting: the collective was abandoned")


def opt(opts, name, default):
    value = getattr(opts, name, None) if opts is not None else None
    return default if value is None else value


def wait_keys(store, keys: list[str], timeout: timedelta) -> bool:
    """Whether every key appeared within timeout. Polls ``check``: a TCPStore client holds its
    one connection for the whole of a ``wait``, which would stall the other threads' sends."""
    if not keys:
        return True
    deadline = time.monotonic() + timeout.total_seconds()
    delay = 0.0002
    while not store.check(keys):
        check_exiting()
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.005)
    return True


def has(store, key) -> bool:
    try:
        return bool(store.check([key]))
    except Exception:  # noqa: BLE001
        return False


def delete(store, key) -> None:
    try:
        store.delete_key(key)
    except Exception:  # noqa: BLE001 (a store without delete_key keeps the key)
        pass


def exchange(store, seq: int, size: int, timeout: timedelta, put, get, every):
    """Publish ``put`` ({suffix: bytes}) under ``<seq>/<suffix>``, wait (up to timeout) for the
    ``get`` suffixes and read them; then count this rank in ``<seq>/done``: the last of the
    ``size`` ranks deletes ``every`` key of the sequence. Returns ({suffix: bytes}, missing
    keys) -- the keys still missing at the timeout, when it passed, else []."""
    prefix = f"{seq}/"
    for suffix, data in put.items():
        store.set(prefix + suffix, data)
    keys = [prefix + s for s in get]
    if not wait_keys(store, keys, timeout):
        return {}, [k for k in keys if not has(store, k)]
    got = {s: store.get(prefix + s) for s in get}
    if store.add(prefix + "done", 1) == size:
        for s in every:
            delete(store, prefix + s)
        delete(store, prefix + "done")
    return got, []

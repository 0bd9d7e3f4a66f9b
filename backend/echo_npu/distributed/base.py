"""The ``echo`` process group's machinery: the worker thread that runs collectives in order,
the Store exchange, point-to-point messages, coalescing and shutdown (the collectives are in
group.py).

Exit: the backend's threads are daemon threads that spend their waits inside C++ calls that
release the GIL (the Store's ``check``/``set``/``get``, echo_npu's ``synchronize``). One still
inside such a call when the interpreter finalises takes the GIL on the way out, which calls
``pthread_exit``, and the unwinding meets pybind11's ``~gil_scoped_release`` (``noexcept``):
"terminate called without an active exception", SIGABRT (scripts that ended with ``async_op``
collectives in flight: 12 of 15 runs with 20 of them; docs/BACKEND.md, "Exit").
An atexit handler (it runs before finalisation) stops them: waits for keys give up
(``store.EXITING``), each group's worker finishes what was queued and ends, and every thread is
joined, for up to ``EXIT_JOIN_S`` in all.
"""

from __future__ import annotations

import atexit
import itertools
import queue
import threading
import time
import weakref
from datetime import timedelta

import torch.distributed as dist

from .. import _streams
from .. import device as _device
from .hostdata import active_faults, host, pack, unpack, write
from .store import EXITING, check_exiting, delete, exchange, has, wait_keys
from .work import DistError, EchoWork

BACKEND_NAME = "echo"
# ccl_work_wait_early: how long after an async Work reports completion its data lands
EARLY_WAIT_DELAY_S = 0.3
# at exit, how long in all the backend's threads may take to end (base.py's docstring)
EXIT_JOIN_S = 5.0
_GROUPS: weakref.WeakSet = weakref.WeakSet()  # every live group, for the exit handler


class GroupBase(dist.ProcessGroup):
    """What every ``echo`` group has besides its collectives (group.py): identity, the
    worker thread, the Store exchange, point-to-point, coalescing, shutdown."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta):
        super().__init__(rank, size)
        self._store = store
        self._rank = rank
        self._size = size
        self._timeout = timeout if isinstance(timeout, timedelta) else timedelta(seconds=1800)
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._worker: threading.Thread | None = None
        self._p2p_counts: dict[tuple[int, int, int], int] = {}
        self._coalescing: list[EchoWork] | None = None
        self._closed = False
        self._threads: weakref.WeakSet = weakref.WeakSet()  # receives and coalescing waits
        _GROUPS.add(self)

    # identity ---------------------------------------------------------------------------
    def getBackendName(self) -> str:  # noqa: N802 (c10d's name)
        return BACKEND_NAME

    def name(self) -> str:
        return BACKEND_NAME

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def getRank(self) -> int:  # noqa: N802
        return self._rank

    def getSize(self) -> int:  # noqa: N802
        return self._size

    def __repr__(self) -> str:
        return f"EchoProcessGroup(rank={self._rank}, size={self._size})"

    # the worker -------------------------------------------------------------------------
    def _submit(self, name: str, outputs, run, opts=None) -> EchoWork:
        """Queue ``run(seq)`` (it returns the callable that lands the results) on the worker."""
        if self._closed:
            raise RuntimeError("echo: the process group was shut down")
        work = EchoWork(name, outputs)
        faults = active_faults()
        async_op = bool(getattr(opts, "asyncOp", True))
        early = async_op and "ccl_work_wait_early" in faults
        with self._lock:
            seq = next(self._seq)
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._work_loop, name=f"echo-c10d-rank{self._rank}", daemon=True
                )
                self._worker.start()
            self._queue.put((seq, name, work, run, faults, early))
        if self._coalescing is not None:
            self._coalescing.append(work)
        return work

    def _work_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            seq, name, work, run, faults, early = item
            try:
                _fence()
                land = run(seq, faults)
                if early:  # the fault: report completion, land the data later
                    work._complete()
                    time.sleep(EARLY_WAIT_DELAY_S)
                if land is not None:
                    land()
                work._complete()
            except BaseException as exc:  # noqa: BLE001 (handed to wait())
                if not isinstance(exc, RuntimeError):
                    exc = RuntimeError(f"echo: {name} failed: {type(exc).__name__}: {exc}")
                work._fail(exc)
            del item, work, run

    # the Store exchange -----------------------------------------------------------------
    def _exchange(self, seq: int, name: str, put: dict[str, bytes], get: list[str], every):
        """store.exchange, its timeout raised as the backend's error."""
        got, missing = exchange(self._store, seq, self._size, self._timeout, put, get, every)
        if missing:
            raise DistError(
                f"echo: {name} (sequence {seq}, rank {self._rank}) timed out after "
                f"{self._timeout.total_seconds():g} s waiting for {missing}: a peer never arrived"
            )
        return got

    def _all_keys(self) -> list[str]:
        return [str(r) for r in range(self._size)]

    def _pair_keys(self) -> list[str]:
        return [f"{s}>{d}" for s in range(self._size) for d in range(self._size)]

    # validation helpers -----------------------------------------------------------------
    def _check_root(self, root: int, what: str) -> None:
        if not 0 <= root < self._size:
            raise ValueError(f"echo: {what}: invalid root rank {root} for a group of {self._size}")

    # point to point ----------------------------------------------------------------------
    def _p2p_key(self, src: int, dst: int, tag: int) -> str:
        with self._lock:
            n = self._p2p_counts.get((src, dst, tag), 0)
            self._p2p_counts[(src, dst, tag)] = n + 1
        return f"p2p/{src}>{dst}/{tag}/{n}"

    def send(self, tensors, dst: int, tag: int = 0):
        """Posted at once (as gloo's): the data is read and published before send returns."""
        tensors = list(tensors)
        self._check_root(dst, "send")
        key = self._p2p_key(self._rank, dst, tag)
        work = EchoWork("send", tensors)
        self._store.set(key, pack([host(t) for t in tensors]))
        work._complete()
        return work

    def recv(self, tensors, src: int, tag: int = 0):
        """Posted at once; its own thread waits for the message and writes it in place."""
        tensors = list(tensors)
        self._check_root(src, "recv")
        key = self._p2p_key(src, self._rank, tag)
        work = EchoWork("recv", tensors)
        work._source_rank_value = src

        def run():
            try:
                if not wait_keys(self._store, [key], self._timeout):
                    raise DistError(
                        f"echo: recv from rank {src} (tag {tag}) timed out after "
                        f"{self._timeout.total_seconds():g} s: the peer never sent"
                    )
                values = unpack(self._store.get(key), tensors)
                delete(self._store, key)
                for t, v in zip(tensors, values, strict=True):
                    write(t, v)
                work._complete()
            except BaseException as exc:  # noqa: BLE001
                work._fail(exc if isinstance(exc, RuntimeError) else RuntimeError(str(exc)))

        self._start_thread(run, f"echo-recv-{src}>{self._rank}")
        if self._coalescing is not None:
            self._coalescing.append(work)
        return work

    def recv_anysource(self, tensors, tag: int = 0):
        """The next message of this tag from any peer (the first found); the Work's
        ``source_rank()`` names the sender. A receive from a named peer posted earlier keeps
        its own message."""
        tensors = list(tensors)
        work = EchoWork("recv_anysource", tensors)
        peers = [r for r in range(self._size) if r != self._rank]

        def claim():
            with self._lock:
                for src in peers:
                    n = self._p2p_counts.get((src, self._rank, tag), 0)
                    key = f"p2p/{src}>{self._rank}/{tag}/{n}"
                    if has(self._store, key):
                        self._p2p_counts[(src, self._rank, tag)] = n + 1
                        return src, key
            return None

        def run():
            try:
                deadline = time.monotonic() + self._timeout.total_seconds()
                found = claim()
                while found is None:
                    if time.monotonic() >= deadline:
                        raise DistError(
                            f"echo: recv from any rank (tag {tag}) timed out after "
                            f"{self._timeout.total_seconds():g} s: no peer sent"
                        )
                    time.sleep(0.002)
                    check_exiting()
                    found = claim()
                src, key = found
                values = unpack(self._store.get(key), tensors)
                delete(self._store, key)
                for t, v in zip(tensors, values, strict=True):
                    write(t, v)
                work._source_rank_value = src
                work._complete()
            except BaseException as exc:  # noqa: BLE001
                work._fail(exc if isinstance(exc, RuntimeError) else RuntimeError(str(exc)))

        self._start_thread(run, f"echo-recv-any>{self._rank}")
        return work

    # coalescing (torch's _coalescing_manager(group, device)) -------------------------------
    def _start_coalescing(self, device=None) -> None:
        self._coalescing = []

    def _end_coalescing(self, device=None):
        works, self._coalescing = self._coalescing or [], None
        work = EchoWork("coalesced", [])

        def run():
            try:
                for w in works:
                    w.wait()
                work._complete()
            except BaseException as exc:  # noqa: BLE001
                work._fail(exc)

        self._start_thread(run, f"echo-coalesced>{self._rank}")
        return work

    # lifetime ---------------------------------------------------------------------------
    def _start_thread(self, run, name: str) -> None:
        thread = threading.Thread(target=run, name=name, daemon=True)
        self._threads.add(thread)
        thread.start()

    def shutdown(self) -> None:
        self._closed = True
        worker, self._worker = self._worker, None
        if worker is not None:
            self._queue.put(None)
            worker.join(timeout=min(5.0, self._timeout.total_seconds()))  # daemon: never hangs exit

    def abort(self) -> None:
        self.shutdown()

    def _end_threads(self, deadline: float) -> None:
        """At exit: the worker ends after what was queued; every thread joined by deadline."""
        with self._lock:
            self._closed = True
            worker, self._worker = self._worker, None
        if worker is not None:
            self._queue.put(None)
        for thread in [worker, *list(self._threads)]:
            if thread is not None and thread.is_alive():
                thread.join(timeout=max(0.0, deadline - time.monotonic()))


@atexit.register
def _end_threads_at_exit() -> None:
    EXITING.set()
    deadline = time.monotonic() + EXIT_JOIN_S
    for group in list(_GROUPS):
        group._end_threads(deadline)


def _fence() -> None:
    """Asynchronous mode: a collective reads its inputs after the work queued on every stream
    of every device (as NCCL's waits for the caller's stream; the worker's own current stream,
    which its copies wait for, is only the default one)."""
    if _streams.is_async():
        for index in range(_device.device_count()):
            _device.synchronize(index)

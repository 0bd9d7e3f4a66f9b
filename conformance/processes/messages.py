"""The one message format between the suite's processes: a JSON object whose `kind` names it.

On a byte stream (a pipe, a child's stdout) a message is one line; on a zygote link (a Unix
SOCK_SEQPACKET socket) it is one packet, and file descriptors may ride with it. The receiving
side hands each message to `dispatch`, which calls the handler's `on_<kind>(**fields)`, as
pytest-xdist's controller calls `worker_<event>` for its workers' events; a kind the handler does
not know is a `ProtocolError` naming both. A line on a stream that is no message (what a backend
prints on a probe's stdout) is skipped by the reader and kept in `MessageReader.other`.

Which channel carries what is processes/kinds.py's `channel` column; the only other format is the
collectives ranks' pickled tensors (engine/collectives/world.py).
"""

from __future__ import annotations

import json
import os
import select
import socket
import time
from typing import Any

Message = dict[str, Any]

MAX_PACKET = 1 << 20  # bytes of one packet on a zygote link
MAX_FDS = 16  # descriptors that ride with one packet
_KEPT = 200  # lines of `other` a reader keeps (the last ones)


class ProtocolError(RuntimeError):
    """A message its receiver has no handler for."""


def encode(kind: str, **fields: Any) -> bytes:
    """One message as a line of UTF-8 JSON."""
    return (json.dumps({"kind": kind, **fields}) + "\n").encode()


def decode(line: bytes | str) -> Message | None:
    """The message on `line`, or None where the line is none (not a JSON object with a kind)."""
    text = line.strip()
    if not text.startswith(b"{" if isinstance(text, bytes) else "{"):
        return None
    try:
        message = json.loads(text)
    except ValueError:
        return None
    return message if isinstance(message, dict) and "kind" in message else None


def dispatch(handler: object, message: Message, **context: Any) -> Any:
    """`handler.on_<kind>(**fields, **context)`: what it returns."""
    kind = str(message["kind"])
    method = getattr(handler, "on_" + kind.replace("-", "_"), None)
    if method is None:
        raise ProtocolError(f"{type(handler).__name__} has no on_{kind} (message {message})")
    fields = {k: v for k, v in message.items() if k != "kind"}
    return method(**fields, **context)


def send(fd: int, *messages: bytes) -> None:
    """Write encoded messages to `fd` in one write where the pipe takes it (one wake-up of the
    reader); raises OSError (BrokenPipeError) when the reader is gone."""
    data = b"".join(messages)
    while data:
        written = os.write(fd, data)
        data = data[written:]


def say(fd: int, kind: str, **fields: Any) -> None:
    """Write one message to `fd` (`send` of its encoding)."""
    send(fd, encode(kind, **fields))


class MessageReader:
    """The messages arriving on a byte stream (a pipe's read end, a child's stdout), in order."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pending = b""
        self.queue: list[Message] = []
        self.other: list[str] = []  # the lines that were no message (the last `_KEPT`)
        self.ended = False  # the writer closed its end

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next message; None once the stream ended. Raises TimeoutError past `timeout`
        seconds (None: wait as long as it takes)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.queue:
            if self.ended:
                return None
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.fd], [], [], left)[0]:
                raise TimeoutError
            self._read()
        return self.queue.pop(0)

    def ready(self) -> bool:
        """Whether a message (or the end) can be had without waiting."""
        return bool(self.queue) or self.ended or bool(select.select([self.fd], [], [], 0)[0])

    def all(self) -> list[Message]:
        """Every message until the stream ends."""
        found = []
        while (message := self.receive()) is not None:
            found.append(message)
        return found

    def _read(self) -> None:
        chunk = os.read(self.fd, 65536)
        if not chunk:
            self.ended = True
            chunk, self.pending = self.pending + b"\n", b""
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        for line in lines:
            message = decode(line)
            if message is not None:
                self.queue.append(message)
            elif line.strip():
                self.other = [*self.other[-_KEPT + 1 :], line.decode(errors="replace")]


def send_packet(sock: socket.socket, kind: str, fds: list[int] | tuple = (), **fields: Any) -> None:
    """One message as one packet on a zygote link, with `fds` (raises OSError when the link is
    gone)."""
    data = json.dumps({"kind": kind, **fields}).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def receive_packet(sock: socket.socket) -> tuple[Message | None, list[int]]:
    """The next packet's message and the descriptors that came with it; (None, []) once the
    link closed."""
    try:
        data, fds, _, _ = socket.recv_fds(sock, MAX_PACKET, MAX_FDS)
    except OSError:
        return None, []
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(data), list(fds)

"""One message format between the suite's processes (issue 82, item 3): processes/messages.py
frames, reads and dispatches every channel's messages, and no other module reads a pipe by hand."""

from __future__ import annotations

import ast
import os
import socket
import time
from pathlib import Path

import pytest

from conformance.processes import messages
from conformance.processes.messages import MessageReader, ProtocolError, encode

PACKAGE = Path(__file__).resolve().parents[2] / "conformance"


class Handler:
    def __init__(self) -> None:
        self.seen: list[tuple] = []

    def on_start(self, nodeid: str) -> str:
        self.seen.append(("start", nodeid))
        return nodeid

    def on_heap_exercise(self, where: str = "") -> None:
        self.seen.append(("heap-exercise", where))


def test_a_message_is_one_line_named_by_its_kind_and_dispatched_to_on_kind():
    line = encode("start", nodeid="a::b[c]")
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    message = messages.decode(line)
    handler = Handler()
    assert messages.dispatch(handler, message) == "a::b[c]"
    messages.dispatch(handler, messages.decode(encode("heap-exercise")), where="ctx")
    assert handler.seen == [("start", "a::b[c]"), ("heap-exercise", "ctx")]
    with pytest.raises(ProtocolError, match="Handler has no on_finish"):
        messages.dispatch(handler, {"kind": "finish", "nodeid": "x"})


def test_the_reader_skips_what_is_no_message_and_joins_lines_split_across_reads():
    """A backend printing on a probe's stdout does not break the channel: its lines are kept
    aside; a message written in pieces arrives whole; the end of the stream is None."""
    read, write = os.pipe()
    reader = MessageReader(read)
    whole = encode("start", nodeid="n1")
    os.write(write, b"a backend says hello\n{not json\n" + whole[:7])
    with pytest.raises(TimeoutError):
        reader.receive(0.05)  # half a message: nothing yet
    os.write(write, whole[7:] + encode("start", nodeid="n2"))
    assert reader.receive(1) == {"kind": "start", "nodeid": "n1"}
    assert reader.receive(1) == {"kind": "start", "nodeid": "n2"}
    os.write(write, b'{"kind": "done"}')  # the last line without its newline
    os.close(write)
    assert reader.all() == [{"kind": "done"}]
    assert reader.receive(0) is None
    assert reader.other == ["a backend says hello", "{not json"]
    os.close(read)


def test_the_timeout_is_a_deadline_for_the_whole_receive():
    read, write = os.pipe()
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        MessageReader(read).receive(0.2)
    assert 0.15 < time.monotonic() - started < 2
    os.close(read)
    os.close(write)


def test_a_packet_carries_its_message_and_descriptors():
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    read, write = os.pipe()
    messages.send_packet(ours, "adopt", [write], why="test")
    os.close(write)
    message, fds = messages.receive_packet(theirs)
    assert message == {"kind": "adopt", "why": "test"} and len(fds) == 1
    os.write(fds[0], b"through the passed descriptor")
    os.close(fds[0])
    assert os.read(read, 100) == b"through the passed descriptor"
    ours.close()
    assert messages.receive_packet(theirs) == (None, [])
    theirs.close()
    os.close(read)


#: the modules that still wait on a descriptor themselves, and why: none reads messages
RAW_DESCRIPTORS = {
    "processes/messages.py": "the codec",
    "processes/zygote.py": "the zygote's wake-up pipe (signals) and its links' readiness",
    "processes/forking.py": "waits for a zygote child's status pipe, then reads it as messages",
    "engine/probe.py": "the forked probe's release: one byte, a signal",
}


def test_no_other_module_reads_a_pipe_by_hand():
    """Every channel goes through processes/messages.py: a module that selects on or reads a
    descriptor itself is a second message format in the making (issue 82 counted five)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and (
                (node.attr == "select" and getattr(node.value, "id", "") == "select")
                or (node.attr == "read" and getattr(node.value, "id", "") == "os")
            ):
                found[str(path.relative_to(PACKAGE))] = node.lineno
    assert set(found) == set(RAW_DESCRIPTORS), found

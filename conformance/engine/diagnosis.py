"""What a dead process left behind: its exit status in words, and the glibc or sanitizer message
and the Python stack (faulthandler) in its output. Pure Python: used by the case runners'
owners (harness/isolation.py) and by the isolated foundation probes (engine/probing.py)."""

from __future__ import annotations

import os
import re
import signal

CRASH_TAIL_LINES = 40
STACK_LINES = 25  # of a faulthandler dump: the innermost frames


def describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by {name}"
    return f"exited with code {os.WEXITSTATUS(status)}"


SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")
GLIBC_MARKERS = (
    "free(): ",
    "malloc(): ",
    "double free",
    "corrupted ",
    "realloc(): ",
    "munmap_chunk(): ",
    "malloc_consolidate(): ",
    "_int_malloc(): ",
    "_int_free(): ",
    "_int_realloc(): ",
    "tcache_thread_shutdown(): ",
)

# a FATAL line of glog or absl logging, which aborts next (a failed C++ CHECK among them):
# "F1101 12:00:00.000000  1234 client.cc:567] Check failed: ..." (absl: "F0000 00:00:<secs> ...")
FATAL_LOG = re.compile(r"^F\d{4,8} [\d:.]+\s+\d+ (?P<where>[^\s\]]+:\d+)\] (?P<what>.+)$")


def diagnose(text: str) -> tuple[str | None, str]:
    """(headline, detail) from a crashed child's output: the sanitizer, glibc or glog/absl FATAL
    (failed CHECK) message if any, the sanitizer report (or the output's tail) as detail."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if any(m in line for m in SANITIZER_MARKERS):
            end = next(
                (j for j in range(i, len(lines)) if lines[j].startswith("SUMMARY:")),
                min(len(lines) - 1, i + 60),
            )
            headline = _clean(line.split("ERROR: ", 1)[-1])
            return headline, "\n".join(lines[i : end + 1])
    detail = _python_stack(lines) or "\n".join(lines[-CRASH_TAIL_LINES:])
    for line in lines:
        if any(line.startswith(m) or m in line[:40] for m in GLIBC_MARKERS):
            return _clean(line), detail
    for line in reversed(lines):
        fatal = FATAL_LOG.match(line)
        if fatal:
            return f"{_clean(fatal['what'])} ({fatal['where']})", detail
    return None, detail


def crash_text(status: int, log: str) -> str:
    """What a crash's class is read from (finding_keys.crash_class): how the process ended and
    its log's headline."""
    return f"{describe_status(status)}: {diagnose(log)[0] or ''}"


def _python_stack(lines: list[str]) -> str:
    """faulthandler's dump (innermost frame first), cut to the frames near the fault: the tail
    of a dump is only pytest and runpy."""
    starts = [
        i for i, ln in enumerate(lines) if ln.startswith(("Fatal Python error", "Current thread"))
    ]
    if not starts:
        return ""
    first = starts[0]
    before = lines[max(0, first - 10) : first]  # what the process printed last
    stack = [ln for ln in lines[first:] if not ln.startswith("Extension modules:")]
    return "\n".join([*before, *stack[:STACK_LINES]])


def _clean(line: str) -> str:
    """glibc prints no newline before faulthandler's 'Fatal Python error'."""
    return line.split("Fatal Python error")[0].strip()

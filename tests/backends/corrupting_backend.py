"""echo_npu whose `neg` returns correct values but leaves the process broken, so that the next
`relu` call of the process aborts: the crash lands in another op's case, only when that case
runs after `neg` in the same process (the seed report's shape). Two kinds of damage, chosen by
CORRUPTING_BACKEND_DAMAGE:

- `state` (default): `neg` sets a flag and `relu` aborts with glibc's words when it is set. No
  memory is corrupted: `neg` leaves state (as a workspace or a pool would) that `relu` trips on;
  the culprit search must not call `neg` a corrupter.
- `heap`: `neg` really corrupts glibc's heap (it writes over the free-list link of a block it
  freed: a use-after-free write), and `relu` allocates a workspace of that size class: glibc
  aborts there ("malloc(): unaligned tcache chunk detected"), as it would in any allocation of
  that size, the culprit search's heap exercise included.
- `once`: `relu` aborts the first time it runs in the whole run (a marker file at
  CORRUPTING_BACKEND_MARKER says it did), never again: a crash that does not reproduce, alone or
  after the same cases; it is not the case's to carry.
"""

import ctypes
import os
import sys
import warnings

import echo_npu  # noqa: F401  (registers the device)
import torch

_LIB = torch.library.Library("aten", "IMPL")
_STATE = {"corrupted": False}
DAMAGE = os.environ.get("CORRUPTING_BACKEND_DAMAGE", "state")
_SIZE = 904  # a tcache size class the suite's own code in neg's case does not allocate
_libc = ctypes.CDLL(None)
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]


_TCACHE_COUNT = 7  # glibc's tcache holds at most 7 blocks of a size class per thread


def _corrupt_heap() -> None:
    # the bin is made the same in every process: emptied (7 blocks taken), then refilled with 6
    # of them and the freed block on top. glibc follows a bin's link only while its count says
    # blocks remain, so the bad link must sit above others: how many the bin held before (a
    # runner forked from a zygote starts with another heap than a fresh one) must not matter
    drained = [_libc.malloc(_SIZE) for _ in range(_TCACHE_COUNT)]
    keep = _libc.malloc(_SIZE)  # keeps the freed block off the top chunk
    freed = _libc.malloc(_SIZE)
    for block in drained[1:]:
        _libc.free(block)
    _libc.free(freed)  # the bin's head; its first 8 bytes are now the bin's link
    # the write after free: a link that glibc (safe-linking, >= 2.32) decodes to address 0x1,
    # whatever the addresses of this run: the second allocation of that class aborts
    ctypes.c_uint64.from_address(freed).value = (freed >> 12) ^ 0x1
    del keep


def _neg(x: torch.Tensor) -> torch.Tensor:
    if DAMAGE == "heap" and not _STATE["corrupted"]:  # once: a second time would trip on it
        _corrupt_heap()
    _STATE["corrupted"] = True
    return torch.ops.aten.neg.default(x.cpu()).to(x.device)


def _checked(op):
    def kernel(x: torch.Tensor) -> torch.Tensor:
        if DAMAGE == "heap":  # workspaces of the corrupted size class: glibc aborts
            # the second reaches the bad link; more in case blocks of the class were taken
            # and given back since
            for _ in range(8):
                _libc.malloc(_SIZE)
        elif DAMAGE == "once":
            marker = os.environ["CORRUPTING_BACKEND_MARKER"]
            if not os.path.exists(marker):
                open(marker, "w").close()
                os.abort()
        elif _STATE["corrupted"]:
            sys.stderr.write("free(): invalid pointer\n")
            sys.stderr.flush()
            os.abort()
        return op(x.cpu()).to(x.device)

    return kernel


with warnings.catch_warnings():  # "overriding a previously registered kernel": on purpose
    warnings.simplefilter("ignore")
    _LIB.impl("neg", _neg, "PrivateUse1")
    _LIB.impl("relu", _checked(torch.ops.aten.relu.default), "PrivateUse1")

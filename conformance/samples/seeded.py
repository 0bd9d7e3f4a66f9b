"""Every generator an OpInfo draws from, seeded, so a capture is the same in every process.

torch's sample functions draw from torch's generator and also from Python's `random` (the
scalars of the foreach ops, nll_loss's targets, the margin and eps of some losses, linalg's UPLO)
and, in places, from numpy's. torch's own test suite seeds all three before each test
(`set_rng_seed`); `torch.manual_seed` alone left `_foreach_mul_.Scalar`'s scalar 5 in one
checkout's cache and 4 in another's, so a repro on another machine ran other samples.
"""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def seeded(seed: int = 0) -> Iterator[None]:
    """torch's, Python's and (where imported) numpy's global generators seeded with `seed`;
    Python's and numpy's states are put back afterwards (they are the process's, not ours)."""
    py_state = random.getstate()
    numpy = sys.modules.get("numpy")
    np_state = numpy.random.get_state() if numpy is not None else None
    seed_all(seed)
    try:
        yield
    finally:
        random.setstate(py_state)
        if numpy is not None and np_state is not None:
            numpy.random.set_state(np_state)


def seed_all(seed: int) -> None:
    """torch's, Python's and (where imported) numpy's global generators seeded with `seed`."""
    torch.manual_seed(seed)
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed)

"""Values the suite draws from torch's testing databases (OpInfo, ModuleInfo) kept in the sample
cache (`kept-<torch version>/`), so that a warm run need not import the database (op_db or
module_db: 2-3 s in each process that would) to draw them again. A value is written with
cloudpickle, which keeps by value what plain pickle refuses (an OpInfo's lambda, a closure), and
torch's serialisation for the tensors; `None` is kept as a value too (nothing found).
"""

from __future__ import annotations

import functools
import hashlib
import os
from typing import Any

import torch

from conformance.engine.calls import load_saved, save_atomically

#: what `load` returns when nothing (or nothing readable) is kept at the path
MISSING: Any = object()


def path_of(
    cache_dir: str | None, folder: str, name: str, sources: tuple[str, ...] = ()
) -> str | None:
    """Where `name` is kept in `folder` of this torch version's sample cache (None: no cache).
    `sources`: the files of the suite whose code decides the value (how it is searched or
    drawn, the suite's own specs): the folder is named by their contents too, so a change to
    any of them draws every value again instead of reading one drawn by older code."""
    if cache_dir is None:
        return None
    where = f"{folder}-{_digest(sources)}" if sources else folder
    return os.path.join(cache_dir, f"kept-{torch.__version__}", where, f"{name}.pt")


@functools.cache
def _digest(sources: tuple[str, ...]) -> str:
    digest = hashlib.sha1()
    for source in sources:
        with open(source, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:12]


def load(path: str | None) -> Any:
    """The value kept at `path`, MISSING where none is (or a torn or older file is)."""
    if path is None or not os.path.exists(path):
        return MISSING
    try:
        return load_saved(path)
    except Exception:  # noqa: BLE001 - drawn again
        return MISSING


def keep(path: str | None, value: Any) -> None:
    """Keep `value` at `path` (atomically); nothing is kept where it does not pickle."""
    if path is None:
        return
    import cloudpickle

    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        save_atomically(value, path, cloudpickle)
    except Exception:  # noqa: BLE001 - a cache: drawn again next time
        pass

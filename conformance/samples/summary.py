"""What the sample sources hold, remembered on disk so that start-up does not build samples.

The coverage account asks every selected overload x dtype whether it has samples, and the mode
account asks CPU whether an overload's float32 samples are differentiable: answering by building
the samples cost a process about 40 ms and 0.6 MiB per overload (55 s and 0.8 GiB for a backend
of 1,400 overloads, in the pytest process, every xdist worker and every spawned runner). The
answers are small JSON values kept in one file beside the captures (the folder already names the
torch version); its name holds a digest of the sources that produce the answers (sample sources,
op specs, placing and its poison, exactness and its measurement, gradients and the autograd
steps), so editing any of them starts a new file. Answers for op specs with samples of their
own (Python code, maybe random) are keyed by the samples' contents too
(harness/sampling.py `RunSamples.remember`).

Several processes of one run may write the file: each merges what is on disk with what it
learned and replaces the file atomically; an answer lost in a race is computed again next time.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from collections.abc import Callable
from typing import Any

from conformance.samples import opinfo

_MISSING = object()


@functools.cache
def sources_digest() -> str:
    """Digest of the code whose output the summary remembers."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    engine = os.path.join(package, "engine")
    produce = ("calls.py", "exactness.py", "exactness_measure.py", "gradients.py", "grad_steps.py")
    files = [os.path.join(engine, n) for n in (*produce, "placing.py", "poison.py")]
    for folder in (os.path.join(package, "samples"), os.path.join(package, "ops")):
        for root, dirs, names in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            files += [os.path.join(root, n) for n in sorted(names) if n.endswith(".py")]
    digest = hashlib.sha1()
    for path in files:
        digest.update(os.path.relpath(path, package).encode())
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:12]


class SampleSummary:
    """Remembered answers by key (`remember`), loaded once and saved with `save`."""

    def __init__(self, cache_dir: str | None) -> None:
        root = opinfo.cache_root(cache_dir)
        self.path = os.path.join(root, f"summary-{sources_digest()}.json") if root else None
        self._known: dict[str, Any] = self._load()
        self._learned: dict[str, Any] = {}

    def _load(self) -> dict[str, Any]:
        if self.path is None or not os.path.exists(self.path):
            return {}
        try:
            with open(self.path) as f:
                data = json.load(f)
        except (OSError, ValueError):  # a torn file: start again
            return {}
        return data if isinstance(data, dict) else {}

    def remember(self, key: str, compute: Callable[[], Any], save: bool = False) -> Any:
        """The answer for `key` (a JSON value): remembered, or computed now and kept (`save`:
        written at once, for answers found while cases run, in processes that may not live to
        the end of the session)."""
        value = self._known.get(key, _MISSING)
        if value is _MISSING:
            value = compute()
            self._known[key] = self._learned[key] = value
            if save:
                self.save()
        return value

    def save(self) -> None:
        """Write what this process learned (merged with what others wrote meanwhile)."""
        if self.path is None or not self._learned:
            return
        merged = {**self._load(), **self._learned}
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(merged, f, separators=(",", ":"), sort_keys=True)
        os.replace(tmp, self.path)
        self._learned = {}
        self._remove_stale()

    def _remove_stale(self) -> None:
        """Summaries of code that changed since (other digests) are never read again."""
        assert self.path is not None
        folder, mine = os.path.split(self.path)
        for name in os.listdir(folder):
            if name.startswith("summary-") and name.endswith(".json") and name != mine:
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(folder, name))

"""One run split over N machines (`--shard K/N`), and the names that put the shards back together.

Every shard computes the same full case list (names only, as harness/keyword.py does for -k) and
the same partition of it, then builds pytest items for its own part alone: collection at scale
never pays for another shard's cases, and "N collected = N recorded" holds per shard.

The partition is greedy longest-first: ids sorted by weight (longest first; equal weights in the
order of a stable hash of the id), each given to the least-loaded shard (the lowest index on a
tie). Weights are the durations of an earlier run (`--shard-durations`; an id it does not know
weighs the median of those it does); without durations every id weighs 1, which gives shard sizes
that differ by at most one, in an order no pattern of the ids survives (all `-fallback` cases on
even shards, say). The same ids, count and durations give the same partition in every process.

A shard's results folder is named `<session>-shard-K-of-N` by the nox sessions and the nightly;
its run.json says which shard it is (`shard`), and the report merges the shards of one run
(conformance/report/load.py). Pure Python: no torch, no pytest.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from conformance.errors import ConformanceUsageError

__all__ = ["Partition", "Shard", "session_name", "stable_hash"]

_SUFFIX = re.compile(r"-shard-(\d+)-of-(\d+)$")


@dataclass(frozen=True)
class Shard:
    """Shard `index` (1-based) of `count`."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str, flag: str = "--shard") -> Shard:
        """`K/N` (or `K-of-N`, as folder names and CI job names have it) with 1 <= K <= N; a
        one-line usage error otherwise."""
        match = re.fullmatch(r"\s*(\d+)\s*(?:/|-of-)\s*(\d+)\s*", str(text))
        index, count = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
        if not 1 <= index <= count:
            raise ConformanceUsageError(
                f"{flag} {text!r}: give K/N, shard K of N with 1 <= K <= N (e.g. 2/4)"
            )
        return cls(index, count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def name(self) -> str:
        """`K-of-N`: this shard in a name (results folder, CI job and artifact)."""
        return f"{self.index}-of-{self.count}"

    @property
    def suffix(self) -> str:
        """What a results folder of this shard appends to its session's name."""
        return f"-shard-{self.name}"


def session_name(folder: str) -> str:
    """The session a results folder belongs to: its name without `-shard-K-of-N`."""
    return _SUFFIX.sub("", folder)


def stable_hash(text: str) -> int:
    """The same number for the same text in every process and on every machine."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def digest(value: Any) -> str:
    """A short fingerprint of a JSON-able value (run.json: shards of one run agree on it)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


class Partition:
    """Assigns ids to `count` shards; loads carry over between calls (the cases, then the
    scenarios), so every process must make the same calls in the same order."""

    def __init__(
        self, count: int, durations: Mapping[str, float] | None = None, source: str = ""
    ) -> None:
        self.count = count
        self.durations = dict(durations or {})
        self.source = source  # where the durations came from (the run header says it)
        self.loads = [0.0] * count
        self.known = 0  # ids of the last call with a recorded duration
        self.last_digest = ""  # of the last call's ids and weights: equal shards agree on it

    def weights(self, ids: Sequence[str]) -> list[float]:
        """Each id's recorded duration, the median of the known ones for the rest; 1 each
        without durations."""
        known = [self.durations[i] for i in ids if i in self.durations]
        self.known = len(known)
        if not known:
            return [1.0] * len(ids)
        median = statistics.median(known)
        return [self.durations.get(i, median) for i in ids]

    def assign(self, ids: Sequence[str]) -> list[int]:
        """The shard (0-based) of each id, greedy longest-first onto the least-loaded shard."""
        weights = self.weights(ids)
        order = sorted(range(len(ids)), key=lambda i: (-weights[i], stable_hash(ids[i]), ids[i]))
        heap = [(load, shard) for shard, load in enumerate(self.loads)]
        heapq.heapify(heap)
        out = [0] * len(ids)
        for i in order:
            load, shard = heapq.heappop(heap)
            out[i] = shard
            heapq.heappush(heap, (load + weights[i], shard))
        for load, shard in heap:
            self.loads[shard] = load
        self.last_digest = digest([self.count, list(ids), weights])
        return out

    def describe(self) -> str:
        """How the shards are balanced (after the cases were assigned)."""
        if not self.durations:
            return "equal weights in case-id hash order (no --shard-durations)"
        return f"durations of {self.source} ({self.known} cases known, the others weigh the median)"

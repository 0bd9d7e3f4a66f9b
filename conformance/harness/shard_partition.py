"""--shard's partition of a run's cases: even, or weighted by an earlier run's durations
(--shard-durations); the cases' list (cases.py) assigns by it."""

from __future__ import annotations

import os

from conformance.errors import ConformanceUsageError
from conformance.harness.options import Options
from conformance.sharding import Partition


def shard_partition(options: Options) -> Partition | None:
    """--shard's partition, weighted by --shard-durations when given."""
    if options.shard is None:
        if options.shard_durations:
            raise ConformanceUsageError("--shard-durations balances shards: give --shard K/N too")
        return None
    if not options.shard_durations:
        return Partition(options.shard.count)
    same = options.results and os.path.realpath(options.results) == os.path.realpath(
        options.shard_durations
    )
    if same:
        raise ConformanceUsageError(
            f"--shard-durations {options.shard_durations}: that is this run's --results "
            "folder, which the run clears at its start; give an earlier run's folder (a copy)"
        )
    from conformance.report.load import load_durations

    try:
        durations = load_durations(options.shard_durations)
    except ConformanceUsageError as exc:
        raise ConformanceUsageError(f"--shard-durations: {exc}") from None
    return Partition(options.shard.count, durations, options.shard_durations)

"""conformance/sharding.py: the partition of --shard K/N is deterministic (also across processes
and list orders), disjoint, complete and balanced, over many case lists."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from conformance.errors import ConformanceUsageError
from conformance.sharding import Partition, Shard, session_name
from tests.helpers import REPO

LAYOUTS = ("contiguous", "transposed", "offset", "expanded", "zero_dim")


def case_lists(n: int = 150, seed: int = 22) -> list[list[str]]:
    """Random case-id lists shaped like the suite's (shared prefixes, -fallback twins)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        ops = [f"op{rng.randrange(400)}.{rng.choice(['Tensor', 'out', 'Scalar'])}" for _ in "xyz"]
        ids = {
            f"test_matches_cpu[{op}-{dtype}-{layout}-{path}]"
            for op in ops
            for dtype in rng.sample(["float32", "int64", "bool", "float16"], rng.randrange(1, 4))
            for layout in rng.sample(LAYOUTS, rng.randrange(1, len(LAYOUTS)))
            for path in ("native", "fallback")
        }
        out.append(sorted(ids)[: rng.randrange(0, len(ids) + 1)])
    return out


def shards_of(ids: list[str], count: int, durations: dict[str, float] | None = None) -> list:
    """Each shard's ids, every shard computing the partition on its own (as shards do)."""
    out = []
    for index in range(count):
        assigned = Partition(count, durations).assign(ids)
        out.append([i for i, s in zip(ids, assigned, strict=True) if s == index])
    return out


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7])
def test_partition_is_disjoint_complete_and_even_without_durations(count: int) -> None:
    for ids in case_lists():
        shards = shards_of(ids, count)
        flat = [i for shard in shards for i in shard]
        assert sorted(flat) == sorted(ids)  # complete, and nothing twice
        sizes = [len(s) for s in shards]
        assert max(sizes) - min(sizes) <= 1, sizes


def test_partition_does_not_follow_the_order_or_pattern_of_the_ids() -> None:
    """A shard's cases are the same whatever order its process lists them in, and the -fallback
    twins of the -native cases do not all land together (the list order is not the split)."""
    for ids in case_lists(40):
        shuffled = random.Random(len(ids)).sample(ids, len(ids))
        by_id = dict(zip(ids, Partition(4).assign(ids), strict=True))
        assert dict(zip(shuffled, Partition(4).assign(shuffled), strict=True)) == by_id
    ids = max(case_lists(), key=len)
    shards = shards_of(ids, 2)
    assert all(any(i.endswith("-fallback]") for i in s) for s in shards)
    assert all(any(i.endswith("-native]") for i in s) for s in shards)


def test_partition_is_the_same_in_another_interpreter() -> None:
    """No per-process randomness (Python's hash() of str is salted per process)."""
    ids = max(case_lists(), key=len)
    durations = {i: (k % 7) / 3 for k, i in enumerate(ids[::2])}
    code = (
        "import json, sys\nfrom conformance.sharding import Partition\n"
        "ids, durations = json.load(sys.stdin)\n"
        "print(json.dumps([Partition(3).assign(ids), Partition(3, durations).assign(ids)]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps([ids, durations]),
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert json.loads(proc.stdout) == [
        Partition(3).assign(ids),
        Partition(3, durations).assign(ids),
    ]


def test_durations_balance_the_shards_within_one_case() -> None:
    """Greedy longest-first: the busiest shard exceeds the idlest by at most the longest case,
    where a split by count can be off by far more."""
    rng = random.Random(7)
    worse = splits = 0
    for ids in case_lists():
        if len(ids) < 8:
            continue
        durations = {i: rng.lognormvariate(-3, 1.5) for i in ids}
        for count in (2, 4):
            part = Partition(count, durations)
            part.assign(ids)
            assert max(part.loads) - min(part.loads) <= max(durations.values()) + 1e-9
            by_count = [
                sum(durations[i] for i in shard) for shard in shards_of(ids, count)
            ]  # the same ids without durations
            worse += max(by_count) - min(by_count) > max(part.loads) - min(part.loads)
            splits += 1
    assert worse >= 0.9 * splits  # durations matter: without them most splits are less even


def test_unknown_cases_weigh_the_median_and_loads_carry_over() -> None:
    part = Partition(2, {"a": 1.0, "b": 3.0, "c": 10.0}, source="old/")
    assert part.weights(["a", "b", "c", "new"]) == [1.0, 3.0, 10.0, 3.0]
    assert part.assign(["c", "a", "b"]) == [0, 1, 1]  # loads 10 and 4
    assert part.assign(["s1", "s2"]) == [1, 1]  # the scenarios fill the lighter shard
    assert "durations of old/ (0 cases known" in part.describe()
    assert Partition(2).weights(["x", "y"]) == [1.0, 1.0]
    assert "no --shard-durations" in Partition(2).describe()


@pytest.mark.parametrize("text", ["0/4", "5/4", "2", "a/b", "1/0", "-1/2", ""])
def test_bad_shard_is_one_line_naming_the_form(text: str) -> None:
    with pytest.raises(ConformanceUsageError, match=r"give K/N, shard K of N with 1 <= K <= N"):
        Shard.parse(text)


def test_shard_names() -> None:
    shard = Shard.parse(" 2 / 4 ")
    assert (shard.index, shard.count, str(shard)) == (2, 4, "2/4")
    assert session_name("conformance-2.13-asan" + shard.suffix) == "conformance-2.13-asan"
    assert session_name("conformance-2.13-guard") == "conformance-2.13-guard"

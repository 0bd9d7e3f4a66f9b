"""Sample sources: OpInfo (torch's op database, captured at the aten level), per-op specs, calls
derived from a sibling overload (twins.py) and the values axis (values.py)."""

from __future__ import annotations

import functools
import os
import shutil
import time
from dataclasses import dataclass

import torch

from conformance.engine.calls import Call, content_digest, dedupe, load_calls, save_calls
from conformance.ops import spec_for, specs_with_samples
from conformance.samples import opinfo, sizes, twins, valuesets
from conformance.samples.summary import sources_digest

MAX_OPINFO_SAMPLES = 8
# an overload reached only through the boxed fallback runs CPU's own kernel: its cases test how
# the backend hands arguments over and back (copies, views, write-back), which fewer samples
# per dtype and layout show as well
MAX_FALLBACK_SAMPLES = 4


def calls_for(
    overload: str,
    dtype: torch.dtype,
    cache_dir: str | None,
    value_set: str = "",
    limit: int = MAX_OPINFO_SAMPLES,
    choice: str = sizes.SIZE_SETS[0],
    ordinary: Ordinary | None = None,
) -> list[Call]:
    """Every sample call of `overload` for `dtype`: the spec's own, then up to `limit` of
    OpInfo's (or, when OpInfo reaches no call of it, a sibling's re-typed by twins.py).
    `value_set` (valuesets.py: special, promotion, arguments, sizes, models) gives the calls of
    that value set instead; `choice`: the option of the set (--sizes). `ordinary`: the ordinary
    calls (of this `limit`) and their digest where the caller keeps them already (a run's
    samples, harness/sampling.py): a value set is built from them, not from a second copy."""
    if ordinary is None:
        ordinary = Ordinary(_ordinary(overload, dtype, cache_dir, limit))
    if not value_set:
        return ordinary.calls
    spec, kind = spec_for(overload), valuesets.value_set(value_set)
    from_opinfo = (
        opinfo.captured_calls(overload, dtype, spec.opinfo_names, cache_dir, kind=value_set)
        if spec.use_opinfo and kind.from_opinfo
        else []
    )
    generated = _generated(overload, dtype, ordinary, kind, choice, cache_dir)
    return dedupe(from_opinfo)[: opinfo.VALUE_SET_FROM_OPINFO] + dedupe(generated)[: kind.limit]


@dataclass
class Ordinary:
    """An overload's ordinary calls for one dtype, and their contents' digest (worked out on
    first use: it names the value sets' files on disk)."""

    calls: list[Call]

    @functools.cached_property
    def digest(self) -> str:
        return content_digest(self.calls)


def _generated(
    overload: str,
    dtype: torch.dtype,
    ordinary: Ordinary,
    kind: valuesets.ValueSet,
    choice: str,
    cache_dir: str | None,
) -> list[Call]:
    """The value set's calls built from the ordinary ones, cached on disk beside the captures:
    building them runs the candidates on CPU (in a forked child first, cpu_survivors.py), which
    costs a fork of the whole process per (overload, dtype, value set). The file is named by the
    ordinary calls' contents: an op spec's own samples hit it when they are the same each run,
    and random ones (or edited ones) build again; its folder by the digest of the code that
    builds them (summary.sources_digest), so an edit of a generator builds again too."""
    root = opinfo.cache_root(cache_dir)
    if root is None or not kind.cached:
        return kind.build(overload, dtype, ordinary.calls, choice)
    dname = str(dtype).removeprefix("torch.")
    suffix = f"-{choice}" if kind.name == "sizes" else ""
    name = f"{overload}-{dname}-{kind.name}{suffix}-{ordinary.digest}"
    folder = os.path.join(root, f"values-{sources_digest()}")
    path = os.path.join(folder, f"{name}.pt")
    if os.path.exists(path):
        try:
            return load_calls(path)[kind.name][overload]
        except Exception:  # noqa: BLE001 - a torn or stale file: build again
            pass
    generated = kind.build(overload, dtype, ordinary.calls, choice)
    if not os.path.isdir(folder):
        os.makedirs(folder, exist_ok=True)
        _remove_stale(root, folder)
    try:
        os.makedirs(folder, exist_ok=True)  # another version's run may have pruned it
        save_calls({kind.name: {overload: generated}}, path)
    except (OSError, RuntimeError):
        if os.path.isdir(folder):
            raise
        # pruned by another version meanwhile: the next run builds them again
    return generated


#: a folder of generated calls of other code is pruned once unused this long: two versions of
#: the suite sharing one cache (two checkouts, a campaign beside an edit) keep their own
STALE_AFTER_S = 24 * 3600


def _remove_stale(root: str, keep: str) -> None:
    """Generated calls of code that changed since (other digests) and unused for a day."""
    now = time.time()
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if name.startswith("values-") and path != keep and os.path.isdir(path):
            try:
                if now - os.path.getmtime(path) < STALE_AFTER_S:
                    continue
            except OSError:
                continue
            shutil.rmtree(path, ignore_errors=True)


def _ordinary(overload: str, dtype: torch.dtype, cache_dir: str | None, limit: int) -> list[Call]:
    spec = spec_for(overload)
    own = spec.samples(dtype) if spec.samples is not None else []
    captured: list[Call] = []
    if spec.use_opinfo:
        captured = opinfo.captured_calls(overload, dtype, spec.opinfo_names, cache_dir)
        if not captured:
            captured = derived_calls(overload, dtype, cache_dir)
    small_first = limit < MAX_OPINFO_SAMPLES  # a cut-down selection: keep the cheap ones
    return dedupe(own) + widest_first(dedupe(captured), small_first)[:limit]


def known_bases(cache_dir: str | None) -> set[str]:
    """Base names with samples: OpInfo's and those of op specs that give their own (the fused
    optimizers), so that an overload reached only through a fallback can be selected."""
    return set(opinfo.opinfo_index(cache_dir)) | {opinfo.base_name(o) for o in specs_with_samples()}


def derived_calls(overload: str, dtype: torch.dtype, cache_dir: str | None) -> list[Call]:
    """Calls of the first sibling overload that has samples, re-typed for `overload`."""
    functional = twins.functional_of(overload)
    for source in twins.ranked_sources(overload):
        spec = spec_for(source)
        calls = spec.samples(dtype) if spec.samples is not None else []
        if spec.use_opinfo:
            calls = calls + opinfo.captured_calls(source, dtype, spec.opinfo_names, cache_dir)
        derived = [c for c in (twins.derive(call, overload, functional) for call in calls) if c]
        if derived:
            return derived
    return []


def widest_first(calls: list[Call], small_first: bool = False) -> list[Call]:
    """Higher-rank samples first, so layouts that need 2-D or 4-D inputs find some; with
    `small_first`, of one rank the smaller first (a large sample costs time in every check)."""

    def key(c: Call) -> tuple[int, int]:
        tensors = c.tensors()
        rank = -max((t.dim() for t in tensors), default=0)
        return rank, sum(t.numel() for t in tensors) if small_first else 0

    return sorted(calls, key=key)

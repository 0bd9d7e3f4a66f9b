"""The on-disk sample cache and repro data hold every argument a captured call can have.

`torch.memory_format` does not pickle (torch.save raises "cannot pickle 'module' object"): before
the portable encoding, `to`'s captures never reached the cache, so every pytest process, xdist
worker and spawned runner imported OpInfo's op_db again (5-17 s each) and left a `.tmp` file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conformance.engine.calls import Call, load_calls, save_calls
from conformance.engine.compare import equal_values
from conformance.engine.discovery import resolve
from conformance.engine.placing import place
from conformance.engine.repro import write_repro
from conformance.samples import opinfo

REPO = Path(__file__).resolve().parents[2]


def _to_copy_call() -> Call:
    x = torch.arange(6.0).reshape(2, 3)
    kwargs = {"dtype": torch.float64, "memory_format": torch.channels_last}
    return Call("_to_copy.default", (x.unsqueeze(0).unsqueeze(0),), kwargs)


def test_calls_with_a_memory_format_round_trip_through_the_cache(tmp_path):
    call = _to_copy_call()
    path = str(tmp_path / "to-float32.pt")
    save_calls({"samples": {"_to_copy.default": [call]}}, path)
    loaded = load_calls(path)["samples"]["_to_copy.default"][0]
    assert loaded.kwargs["memory_format"] is torch.channels_last
    assert torch.equal(loaded.args[0], call.args[0])
    assert os.listdir(tmp_path) == ["to-float32.pt"]  # no temporary file left behind


def test_a_storage_argument_round_trips_through_the_cache(tmp_path):
    # torch.load gives a saved UntypedStorage back as a TypedStorage: set_'s value-set calls
    # read from the cache handed the device run a CPU storage ("set the storage of a tensor on
    # device npu to a storage on different device cpu"), 12 failing cases on a second run
    source = torch.arange(6.0)
    call = Call("set_.source_Storage", (torch.zeros(0), source.untyped_storage()))
    path = str(tmp_path / "set.pt")
    save_calls({"special": {call.overload: [call]}}, path)
    loaded = load_calls(path)["special"][call.overload][0]
    assert type(loaded.args[1]) is torch.UntypedStorage
    placed = place(loaded, "contiguous", resolve(call.overload)._schema)
    assert placed is not None
    assert any(isinstance(leaf, torch.UntypedStorage) for leaf in placed.leaves)


def test_a_captured_opinfo_is_read_from_disk_by_the_next_process(tmp_path, monkeypatch):
    cache = str(tmp_path)
    opinfo._cached_capture.cache_clear()
    first = opinfo.captured_calls("_to_copy", torch.float32, ("to",), cache)
    assert any("memory_format" in c.kwargs for c in first)
    opinfo._cached_capture.cache_clear()  # as in a fresh process

    def no_capture(*args, **kwargs):
        raise AssertionError("captured again: the cache file was not written or not read")

    monkeypatch.setattr(opinfo, "capture", no_capture)
    again = opinfo.captured_calls("_to_copy", torch.float32, ("to",), cache)
    assert [c.signature() for c in again] == [c.signature() for c in first]
    opinfo._cached_capture.cache_clear()


@pytest.mark.timeout(180)
def test_a_repro_of_a_call_with_a_memory_format_runs(tmp_path):
    import echo_npu  # noqa: F401  (the repro runs on the bundled device)

    call = _to_copy_call()
    op = resolve(call.overload)
    placed = place(call, "contiguous", op._schema)
    assert placed is not None
    script = write_repro(
        str(tmp_path),
        "_to_copy.default-float32-contiguous-native",
        placed,
        backend="echo_npu",
        headline="example",
        routed=False,
        env_prefix="",
    )
    proc = subprocess.run(
        [sys.executable, script], capture_output=True, text=True, timeout=170, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_value_set_calls_are_built_once_then_read_from_disk(tmp_path, monkeypatch):
    """Special-value calls run on CPU in a forked child before use (cpu_survivors): a fork of
    the whole process per (overload, dtype, value set), once per torch version, not per run."""
    from conformance.samples import calls_for, cpu_survivors

    cache = str(tmp_path)
    first = calls_for("add.Tensor", torch.float32, cache, "special")
    assert first

    def no_fork(*args, **kwargs):
        raise AssertionError("built again: the value-set cache was not written or not read")

    monkeypatch.setattr(cpu_survivors, "_run_batch", no_fork)
    again = calls_for("add.Tensor", torch.float32, cache, "special")
    assert [c.signature() for c in again] == [c.signature() for c in first]
    for a, b in zip(first, again, strict=True):
        for x, y in zip(a.tensors(), b.tensors(), strict=True):
            torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)
    # without a cache folder nothing is cached: the calls are built (and run on CPU) each time
    with pytest.raises(AssertionError, match="built again"):
        calls_for("add.Tensor", torch.float32, None, "special")


def test_two_versions_sharing_a_cache_keep_their_value_sets(tmp_path, monkeypatch):
    """Another version of the suite (a campaign in a worktree beside an edited checkout) prunes
    value-set folders of other code: only those unused for a day, and a folder pruned under a
    run costs a rebuild, never a harness error ("Parent directory ... does not exist" failed
    four mutants of a campaign while the checkout beside it ran the suite)."""
    import shutil

    from conformance import samples

    root = opinfo.cache_root(str(tmp_path))
    other, old = os.path.join(root, "values-other"), os.path.join(root, "values-old")
    for folder in (other, old):
        os.makedirs(folder)
    os.utime(old, (0, 0))
    first = samples.calls_for("add.Tensor", torch.float32, str(tmp_path), "special")
    assert first and os.path.isdir(other) and not os.path.exists(old)
    ours = [f for f in os.listdir(root) if f.startswith("values-") and f != "values-other"]
    real_save = samples.save_calls

    def pruned_meanwhile(found, path):
        shutil.rmtree(os.path.join(root, ours[0]), ignore_errors=True)
        real_save(found, path)

    monkeypatch.setattr(samples, "save_calls", pruned_meanwhile)
    again = samples.calls_for("mul.Tensor", torch.float32, str(tmp_path), "special")
    assert again


def test_value_set_calls_of_an_op_spec_are_cached_by_their_contents(tmp_path, monkeypatch):
    """masked_fill_'s op spec gives its own (seeded) samples: their value-set calls are read
    from disk when the samples are the same, built again when they change."""
    from conformance import samples
    from conformance.samples import calls_for, cpu_survivors

    cache = str(tmp_path)
    first = calls_for("masked_fill_.Scalar", torch.float32, cache, "special")
    assert first
    forks = []
    real = cpu_survivors._run_batch
    monkeypatch.setattr(
        cpu_survivors, "_run_batch", lambda *a, **k: forks.append(1) or real(*a, **k)
    )
    again = calls_for("masked_fill_.Scalar", torch.float32, cache, "special")
    assert forks == [] and [c.signature() for c in again] == [c.signature() for c in first]
    ordinary = samples._ordinary  # the op spec now gives other values
    monkeypatch.setattr(
        samples,
        "_ordinary",
        lambda *a, **k: [c for c in ordinary(*a, **k) if c.args[1].dim() != 4],
    )
    calls_for("masked_fill_.Scalar", torch.float32, cache, "special")
    assert forks


def test_a_capture_does_not_walk_the_stack(monkeypatch):
    # OpInfo's sample iterators call inspect.stack() to find the running unittest method; under
    # pytest that was most of every cold capture's time (a first run, a new torch version, CI)
    import inspect

    walks = []
    real = inspect.stack
    monkeypatch.setattr(inspect, "stack", lambda *a, **k: walks.append(1) or real(*a, **k))
    captured = opinfo.capture("add", torch.float32)
    special = opinfo.capture("add", torch.float32, kind="special")
    assert captured["samples"]["add.Tensor"] and special
    assert walks == []
    from torch.testing._internal import common_utils

    assert common_utils.extract_test_fn is not opinfo._no_test_fn  # restored afterwards


def _scalars(captured: dict) -> list:
    return [
        a
        for calls in captured["samples"].values()
        for call in calls
        for a in (*call.args, *call.kwargs.values())
        if isinstance(a, bool | int | float)
    ]


def test_a_capture_is_the_same_whatever_pythons_random_state_was(monkeypatch):
    # OpInfo draws the foreach ops' scalars (and nll_loss's targets, some losses' margin and eps)
    # from Python's random: seeded by torch.manual_seed alone, _foreach_mul_.Scalar's scalar was
    # 5 in one checkout's cache and 4 in another's, and a repro elsewhere ran other samples
    import random

    monkeypatch.setattr(opinfo, "SAMPLES_PER_OPINFO", 4)
    random.seed(1)
    first = opinfo.capture("_foreach_mul", torch.float32)
    random.seed(2)
    before = random.getstate()
    second = opinfo.capture("_foreach_mul", torch.float32)
    assert _scalars(first) and _scalars(first) == _scalars(second)
    assert random.getstate() == before  # the process's own state is put back


def test_every_op_specs_samples_round_trip_through_the_cache(tmp_path):
    """What an op spec builds comes back from the disk cache with the same types and values
    (their value-set calls are cached, named by content): a type torch.save changes on the way
    (a storage, a memory format) would feed the device run something the placing does not
    know."""
    from torch.utils._pytree import tree_flatten

    from conformance.ops import spec_for, specs_with_samples

    checked = 0
    for overload in specs_with_samples():
        spec = spec_for(overload)
        dtype = torch.float32 if spec.dtypes is None or torch.float32 in spec.dtypes else None
        dtype = dtype or sorted(spec.dtypes, key=str)[0]
        calls = spec.samples(dtype)
        path = str(tmp_path / f"{overload}.pt")
        save_calls({"samples": {overload: calls}}, path)
        loaded = load_calls(path)["samples"].get(overload, [])
        assert len(loaded) == len(calls), overload
        for before, after in zip(calls, loaded, strict=True):
            a, a_spec = tree_flatten((before.args, before.kwargs))
            b, b_spec = tree_flatten((after.args, after.kwargs))
            assert a_spec == b_spec, overload
            assert [type(x) for x in a] == [type(x) for x in b], overload
            for x, y in zip(a, b, strict=True):
                if isinstance(x, torch.Tensor):
                    torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)
        checked += bool(calls)
    assert checked >= 10


@pytest.mark.timeout(180)
def test_a_repro_on_a_lazy_device_registered_by_a_function_runs(tmp_path):
    """A repro script sets the device the suite found (not the PrivateUse1 name: on torch_xla
    that is "privateuseone"), calls the backend's register function (`--backend M:F`) and reads
    a storage-less device's results by value."""
    call = Call("add.Tensor", (torch.ones(3, 2), torch.full((3, 2), 2.0)), {})
    placed = place(call, "contiguous", resolve(call.overload)._schema)
    assert placed is not None
    script = write_repro(
        str(tmp_path),
        "add.Tensor-float32-contiguous-native",
        placed,
        backend="lazy_backend",
        headline="example",
        routed=False,
        env_prefix="",
        device_type="lazy",
        register="register",
    )
    text = open(script).read()
    assert "device = 'lazy'" in text and "lazy_backend.register()" in text
    backends = str(Path(__file__).resolve().parents[1] / "backends")
    proc = subprocess.run(
        [sys.executable, script], capture_output=True, text=True, timeout=170, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": backends},
    )  # fmt: skip
    assert proc.returncode == 0 and "device: returned" in proc.stdout, proc.stdout + proc.stderr


def test_loading_complex32_samples_warns_into_the_tally_not_the_terminal(tmp_path):
    """torch warns "ComplexHalf support is experimental" (once a process) at the first load of
    a complex32 tensor: a warm default run printed it in pytest's warnings summary (issue 85:
    the terminal stays quiet; the suite's own work's warnings are tallied with the capture's).
    A fresh process loads the file: the first warning is the load's."""
    call = Call("neg.default", (torch.ones(3, dtype=torch.complex32),), {})
    path = str(tmp_path / "neg-complex32.pt")
    save_calls({"samples": {"neg.default": [call]}}, path)
    code = (
        "import warnings, sys\n"
        "warnings.simplefilter('always')\n"
        "from conformance.engine.calls import load_calls\n"
        "from conformance.engine.held_stderr import HELD\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    loaded = load_calls(sys.argv[1])['samples']['neg.default'][0]\n"
        "print(loaded.args[0].dtype, len(caught), sum(HELD.tally.values()))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, path], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert done.stdout.split() == ["torch.complex32", "0", "1"], done.stdout + done.stderr


def _value_set_calls(overloads: list[str], monkeypatch, kept: int) -> tuple[dict, int]:
    """Each overload's special, promotion and reference calls (signature and tensors) with
    reference captures keeping `kept` distinct calls per (kind, overload), and the most calls
    one capture kept for one (kind, overload)."""
    from conformance.samples import calls_for

    monkeypatch.setattr(opinfo, "KEPT_DISTINCT", kept)
    opinfo._cached_capture.cache_clear()
    out = {}
    for overload in overloads:
        for value_set in ("special", "promotion", "reference"):
            calls = calls_for(overload, torch.float32, None, value_set)
            out[overload, value_set] = [(c.signature(), c.tensors()) for c in calls]
    names = {n for o in overloads for n in opinfo.opinfos_for(o, None)}
    captures = [opinfo._cached_capture(n, torch.float32, None, "reference") for n in names]
    most = max(len(calls) for c in captures for kind in c.values() for calls in kind.values())
    opinfo._cached_capture.cache_clear()
    return out, most


def _same(a: list, b: list) -> bool:
    def equal(x: torch.Tensor, y: torch.Tensor) -> bool:
        return x.dtype == y.dtype and x.shape == y.shape and equal_values(x, y)

    return len(a) == len(b) and all(
        sa == sb and len(ta) == len(tb) and all(map(equal, ta, tb))
        for (sa, ta), (sb, tb) in zip(a, b, strict=True)
    )


def test_trimmed_reference_captures_give_the_value_set_cases_every_call_they_took(monkeypatch):
    # a reference capture keeps KEPT_DISTINCT distinct calls per (kind, overload), not every
    # call its samples made (pow float16's file was 30 MB for the 3 its -special case takes).
    # div.Tensor_mode's calls come from three OpInfos in turn, clamp.Tensor's promotion from
    # one that records many: the trimmed calls must be the untrimmed ones, call for call
    overloads, default = (
        ["div.Tensor_mode", "div_.Tensor_mode", "clamp.Tensor"],
        opinfo.KEPT_DISTINCT,
    )
    full, most = _value_set_calls(overloads, monkeypatch, kept=10**9)
    trimmed, kept = _value_set_calls(overloads, monkeypatch, kept=default)
    assert kept <= default < most  # the trim dropped calls
    for key, calls in full.items():
        assert _same(calls, trimmed[key]), key
    # the comparison can fail: keeping one distinct call changes what the cases take
    one, _ = _value_set_calls(overloads, monkeypatch, kept=1)
    assert any(not _same(calls, one[key]) for key, calls in full.items())


def test_values_two_calls_hold_are_saved_once_and_loaded_apart(tmp_path):
    # the functional, in-place and out= forms of a sample hold the same values: a file writes
    # them once, and each loaded call gets its own copy (an in-place op must not write another
    # call's input), while two equal tensors of one call stay two tensors (add_(x, y) with
    # x equal to y is not add_(x, x))
    x = torch.randn(256, 256)
    calls = {
        "add.Tensor": [Call("add.Tensor", (x.clone(), x.clone()))],
        "add_.Tensor": [Call("add_.Tensor", (x.clone(), x.clone()))],
        "add.out": [Call("add.out", (x.clone(), x.clone()), {"out": x.clone()})],
    }
    path = str(tmp_path / "shared.pt")
    save_calls({"samples": calls}, path)
    for overload, c in calls.items():
        save_calls({"samples": {overload: c}}, str(tmp_path / f"{overload}.pt"))
    separate = sum(os.path.getsize(tmp_path / f"{o}.pt") for o in calls)
    assert os.path.getsize(path) < separate / 2  # 7 tensors of equal values, 3 written
    loaded = load_calls(path)["samples"]
    tensors = [t for o in calls for t in loaded[o][0].tensors()]
    assert len({t.untyped_storage().data_ptr() for t in tensors}) == len(tensors) == 7
    assert all(torch.equal(t, x) for t in tensors)
    inplace = loaded["add_.Tensor"][0]
    torch.ops.aten.add_.Tensor(*inplace.args)
    assert torch.equal(loaded["add.Tensor"][0].args[0], x)
    assert torch.equal(inplace.args[0], 2 * x) and torch.equal(inplace.args[1], x)


def test_a_run_builds_value_sets_from_the_ordinary_calls_it_keeps(tmp_path, monkeypatch):
    """A run's value sets (-special, -promotion, ...) of an (overload, dtype) start from the
    ordinary calls its ordinary cases already hold: not a second build of them (loading,
    deduplicating, an op spec's own samples drawn again) nor a digest of them per value set
    (issue 85: about 1.3 ms of a runner's CPU per value set)."""
    from conformance import samples
    from conformance.harness.sampling import RunSamples

    cache = str(tmp_path)
    for value_set in ("special", "promotion"):  # built and written to disk once
        samples.calls_for("add.Tensor", torch.float32, cache, value_set)
    built, digests = [], []
    ordinary, digest = samples._ordinary, samples.content_digest
    monkeypatch.setattr(samples, "_ordinary", lambda *a: built.append(a) or ordinary(*a))
    monkeypatch.setattr(samples, "content_digest", lambda c: digests.append(1) or digest(c))
    run = RunSamples(cache)
    kept = run.calls("add.Tensor", torch.float32)
    special = run.calls("add.Tensor", torch.float32, "special")
    promotion = run.calls("add.Tensor", torch.float32, "promotion")
    assert len(built) == 1 and len(digests) == 1, (len(built), len(digests))
    assert special and promotion and run.calls("add.Tensor", torch.float32) is kept
    # the same calls as a value set built on its own (the file named by the same digest)
    alone = samples.calls_for("add.Tensor", torch.float32, cache, "special")
    assert [c.signature() for c in alone] == [c.signature() for c in special]

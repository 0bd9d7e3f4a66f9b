"""The verdict of one autocast case: an op with an autocast kernel on a reference device (CUDA,
CPU, XPU), its policy observed on CUDA, CPU and the device under test (engine/autocast/policy.py)
from one sample of its OpInfo, and the device's class against CUDA's (an op only CPU or XPU
registers is observed for the policy table, not judged). Where the device's region gives the
dtype CPU's region gives (CPU run with the device's lower precision), the values are compared
too, by evidence (engine/measured.py: CPU's own error against the op in float64 on the same
rounded inputs).

The op's samples come from torch's OpInfo database, matched by name or aten name; an op with
none is not judged (the run header lists it). The sample found for an op is kept in the sample
cache with the OpInfo's function (engine/kept.py), so a warm run never imports `op_db` (2-3 s
in each process that judged an autocast case)."""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from conformance.engine import kept
from conformance.engine.autocast import policy
from conformance.engine.compare import Mismatch
from conformance.engine.errorclass import first_line
from conformance.engine.measured import compare_value
from conformance.engine.transfer import read_back

CHECK = "autocast"


@dataclass
class AutocastVerdict:
    """What one case found: the class per device (`policies`), whether it was judged against
    CUDA's (`judged`), and the failure (`message`; "" when it passed: the first line is one per
    class, the evidence on the next)."""

    op: str
    policies: dict[str, str] = field(default_factory=dict)  # device -> class
    details: dict[str, str] = field(default_factory=dict)  # device -> evidence
    message: str = ""
    values: str = ""  # how the values compared ("" when they were not)


@functools.cache
def _opinfos() -> dict[str, list[Any]]:
    from torch.testing._internal.common_methods_invocations import op_db

    found: dict[str, list[Any]] = {}
    for info in op_db:
        for name in {info.name, info.aten_name}:
            if name:
                found.setdefault(name, []).append(info)
    return found


#: the folder, in a torch version's sample cache, of the samples found for autocast cases
STORE = "autocast"


def sample_of(op: str, cache_dir: str | None = None) -> tuple[Any, Any] | None:
    """(OpInfo, its first float32 sample that runs on CPU without autocast), None if none;
    kept in (and read from) the sample cache `cache_dir`, where the OpInfo is reduced to what
    the judge uses of it (`op`).

    Searched in a thread of its own: torch's `sample_inputs` walks its caller's stack with
    `inspect.stack()` for a unittest test (`extract_test_fn`, which reads the source of every
    frame): 20-40 ms under pytest's stack, about 1 ms from a fresh thread. Neither stack holds a
    TestCase, so the samples and their seed are the same."""
    found: list[Any] = [None, None]  # the sample, or what the search raised

    def search() -> None:
        try:
            found[0] = _first_sample(op)
        except BaseException as error:  # noqa: BLE001 - raised again in the caller's thread
            found[1] = error

    path = kept.path_of(cache_dir, STORE, op, (__file__, policy.__file__))
    stored = kept.load(path)
    if stored is not kept.MISSING:
        try:
            return _restored(stored)
        except Exception:  # noqa: BLE001 - an operator this torch lacks: searched again
            pass
    thread = threading.Thread(target=search, name="conformance-opinfo-samples")
    thread.start()
    thread.join()
    if found[1] is not None:
        raise found[1]
    kept.keep(path, _keepable(found[0]))
    return found[0]


def _keepable(found: tuple[Any, Any] | None) -> tuple | None:
    """What `sample_of` found, as kept: the OpInfo reduced to its function (an operator of
    torch.ops by its name: its pybind11 internals do not pickle), the sample to its inputs."""
    if found is None:
        return None
    info, sample = found
    function = info.op
    if isinstance(function, torch._ops.OpOverloadPacket):
        function = ("torch.ops", function._qualified_op_name)
    elif isinstance(function, torch._ops.OpOverload):
        function = ("torch.ops", function.name())
    return function, (sample.input, tuple(sample.args), dict(sample.kwargs))


def _restored(stored: tuple | None) -> tuple[Any, Any] | None:
    if stored is None:
        return None
    function, (inputs, args, kwargs) = stored
    if isinstance(function, tuple):  # ("torch.ops", "aten::name.overload")
        namespace, _, name = function[1].partition("::")
        name, _, overload = name.partition(".")
        function = getattr(getattr(torch.ops, namespace), name)
        function = getattr(function, overload) if overload else function
    sample = SimpleNamespace(input=inputs, args=args, kwargs=kwargs)
    return SimpleNamespace(op=function), sample


def _first_sample(op: str) -> tuple[Any, Any] | None:
    for info in _opinfos().get(op, []):
        torch.manual_seed(0)
        try:
            for sample in info.sample_inputs("cpu", torch.float32):
                try:
                    policy.run(info.op, sample, policy.cpu_regime(torch.bfloat16), [], False)
                except Exception:  # noqa: BLE001 - CPU refuses this sample: the next one
                    continue
                return info, sample
        except Exception:  # noqa: BLE001 - the OpInfo's sample function fails here
            continue
    return None


def judge(
    op: str,
    device: torch.device,
    lower: torch.dtype,
    device_key: str | None,
    device_kernels: int,
    cuda_registers: bool = True,
    cache_dir: str | None = None,
) -> AutocastVerdict:
    """The case of `op` on `device`, whose autocast dtype is `lower` and whose autocast key
    (`device_key`) has `device_kernels` kernels: its class against CUDA's, CPU's shown beside
    it. An op CUDA does not register (`cuda_registers` off: CPU's or XPU's own) is observed,
    not judged (`judged` off): CUDA has no policy for it, and what fake CUDA tensors show of
    its decomposition is not what a GPU runs (the fake mode decomposes it below autocast).
    `cache_dir`: the sample cache that keeps the op's sample (`sample_of`)."""
    found = sample_of(op, cache_dir)
    verdict = AutocastVerdict(op)
    if found is None:
        return verdict
    info, sample = found
    regimes = {
        "cuda": policy.cuda_regime(),
        "cpu": policy.cpu_regime(lower),
        device.type: policy.device_regime(device, lower),
    }
    refused = region_refusal(device.type, lower, device_key, device_kernels)
    for name, regime in regimes.items():
        if refused and name == device.type:  # the table still shows CUDA's and CPU's
            verdict.policies[name], verdict.details[name] = "refused", refused
            verdict.message = refused
            return verdict
        seen = policy.observe(info.op, sample, regime)
        verdict.policies[name], verdict.details[name] = seen.policy, seen.detail
    verdict.judged = cuda_registers
    want, got = verdict.policies["cuda"], verdict.policies[device.type]
    if not cuda_registers:
        return verdict
    if got != want:
        evidence = (
            f"\n  on the device: {verdict.details[device.type]}; on cuda: "
            f"{verdict.details['cuda']}; on cpu: {verdict.details['cpu']}"
        )
        if not device_kernels:
            verdict.message = (
                f"[autocast] the device registers no autocast kernel ({device_key} has none): "
                f"{op} runs in a torch.autocast region as without it, where CUDA's policy casts"
                + evidence
            )
            return verdict
        like_cpu = " (CPU's policy)" if got == verdict.policies["cpu"] else ""
        verdict.message = (
            f"[autocast {want}] {op}: CUDA's policy is {policy.DESCRIBED[want]}, the device's "
            f"{policy.DESCRIBED[got]}{like_cpu}" + evidence
        )
        return verdict
    _compare_values(verdict, info, sample, regimes["cpu"], regimes[device.type])
    if not verdict.message:
        _compare_cast_inputs(verdict, info, sample, regimes[device.type])
    return verdict


def region_refusal(device_type: str, lower: torch.dtype, key: str | None, kernels: int) -> str:
    """The first line every autocast case of a device fails with when entering its region
    raises ("" when it does not): torch.autocast refuses the device (a PrivateUse1 module
    without get_amp_supported_dtype, a dtype it does not list); the same line for every case,
    so it is one finding."""
    try:
        with torch.autocast(device_type, dtype=lower):
            pass
    except Exception as exc:  # noqa: BLE001 - the refusal is the verdict
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        none = "" if kernels else f"the device registers no autocast kernel ({key} has none), and "
        return (
            f"[autocast] {none}torch.autocast(device_type='{device_type}') raises "
            f"{type(exc).__name__}: {first}"
        )
    return ""


def _compare_values(verdict: AutocastVerdict, info: Any, sample: Any, cpu: Any, dev: Any) -> None:
    """The device's region against CPU's with float32 inputs, where both give the same dtype."""
    n = policy.floating_inputs(sample)
    try:
        expected = policy.run(info.op, sample, cpu, [torch.float32] * n, True)
    except Exception:  # noqa: BLE001 - CPU's region refuses: nothing to compare against
        return
    got = policy.run(info.op, sample, dev, [torch.float32] * n, True)
    want_leaves, got_leaves = tree_flatten(expected)[0], tree_flatten(got)[0]
    kinds = [(t.dtype if isinstance(t, torch.Tensor) else type(t)) for t in want_leaves]
    if kinds != [(t.dtype if isinstance(t, torch.Tensor) else type(t)) for t in got_leaves]:
        verdict.values = "not compared: the device's region gives other dtypes than CPU's"
        return
    truth = _truth(info, sample, n, want_leaves)
    problem = _first_difference(got_leaves, want_leaves, truth)
    lower = str(dev.lower).removeprefix("torch.")
    if problem is None:
        verdict.values = f"compared with CPU's region in {lower}"
        return
    outside = _outside(info, sample, n, cpu, dev, want_leaves, truth)
    if outside is not None:  # the op's own bug, not its region's: its op cases name it
        verdict.values = (
            f"not judged: {verdict.op} differs from CPU outside autocast too ({outside}): the "
            "op cases judge it"
        )
        return
    verdict.message = (
        f"[autocast values] {verdict.op}: in the device's autocast region {problem} (CPU's "
        f"region in {lower}; outside autocast, on the same inputs, the device agrees with CPU)"
    )


def input_mixes(n: int, lower: torch.dtype) -> list[tuple[str, list[torch.dtype]]]:
    """The inputs a policy exists for, past float32 ones: all in the lower precision, and mixed
    (the first lower, the rest float32) where the op takes two or more floating inputs."""
    low = str(lower).removeprefix("torch.")
    mixes = [(f"{low} inputs", [lower] * n)] if n else []
    if n > 1:
        mixes.append((f"mixed inputs ({low}, then float32)", [lower] + [torch.float32] * (n - 1)))
    return mixes


def _compare_cast_inputs(verdict: AutocastVerdict, info: Any, sample: Any, dev: Any) -> None:
    """The device's region on lower-precision and mixed inputs: its output dtype against CUDA's
    region on the same inputs, its values against CPU outside autocast on those inputs cast as
    CUDA's policy casts them (to its output dtype). So a cast that is dropped, done after the
    op, or done to zeros fails, where float32 inputs (never cast by an fp32 policy) cannot
    show it. The record says which inputs were compared."""
    n = policy.floating_inputs(sample)
    cuda = policy.cuda_regime(dev.lower)
    compared = []
    for what, dtypes in input_mixes(n, dev.lower):
        try:
            want = policy.first_float(policy.run(info.op, sample, cuda, dtypes, True))
        except Exception:  # noqa: BLE001 - CUDA's region refuses these inputs: not judged
            continue
        if want is None:
            continue
        try:
            got = tree_flatten(policy.run(info.op, sample, dev, dtypes, True))[0]
        except Exception as exc:  # noqa: BLE001 - the device's region refuses what CUDA's runs
            if _refuses_outside(info, sample, dev, dtypes, want.dtype):
                continue  # the op's own dtype support, not its region's: the op cases judge it
            verdict.message = (
                f"[autocast values] {verdict.op}: on {what} the device's autocast region raises "
                f"{type(exc).__name__}: {first_line(exc)} (CUDA's region computes these)"
            )
            return
        first = next((t for t in got if policy.floating(t)), None)
        if first is None or first.dtype != want.dtype:
            shown = str(first.dtype) if first is not None else "no floating output"
            verdict.message = (
                f"[autocast values] {verdict.op}: on {what} the device's autocast region "
                f"returns {shown.removeprefix('torch.')}, CUDA's "
                f"{str(want.dtype).removeprefix('torch.')}"
            )
            return
        problem = _against_cast_reference(info, sample, dev, dtypes, want.dtype, got)
        if problem:
            to = str(want.dtype).removeprefix("torch.")
            verdict.message = (
                f"[autocast values] {verdict.op}: on {what} the device's autocast region "
                f"{problem} (CPU outside autocast on the inputs cast to {to}, as CUDA's "
                "policy casts them; outside autocast, on those inputs, the device agrees)"
            )
            return
        compared.append(what)
    if compared:
        verdict.values += f"; on {' and '.join(compared)} against CPU on the inputs cast as CUDA's"


def _cast(sample: Any, dtypes: list) -> SimpleNamespace:
    """The sample with its floating inputs rounded to `dtypes` (in order)."""
    rounded = policy.cast_floats(policy.inputs_of(sample), dtypes)
    return SimpleNamespace(input=rounded[0], args=rounded[1], kwargs=rounded[2])


def _refuses_outside(info: Any, sample: Any, dev: Any, dtypes: list, to: torch.dtype) -> bool:
    """Whether the device, outside autocast, refuses the inputs as CUDA's policy casts them."""
    try:
        policy.run(info.op, _cast(sample, dtypes), dev, [to] * len(dtypes), False)
    except Exception:  # noqa: BLE001 - a refusal is the answer
        return True
    return False


def _against_cast_reference(
    info: Any, sample: Any, dev: Any, dtypes: list, to: torch.dtype, got: list
) -> str | None:
    """What differs between the device region's result `got` and CPU's op on the sample's
    inputs rounded to `dtypes` then cast to `to` (None: nothing, or the device differs outside
    autocast too: the op cases judge that)."""
    cast, n = _cast(sample, dtypes), len(dtypes)
    try:
        want = tree_flatten(policy.run(info.op, cast, policy.cpu_regime(to), [to] * n, False))[0]
        wide = policy.run(info.op, cast, policy.cpu_regime(to), [torch.float64] * n, False)
    except Exception:  # noqa: BLE001 - CPU refuses the cast inputs: nothing to compare with
        return None
    truth = tree_flatten(wide)[0]
    if len(want) != len(got):
        return None
    problem = _first_difference(got, want, truth if len(truth) == len(want) else None)
    if problem is None:
        return None
    try:
        outside = tree_flatten(policy.run(info.op, cast, dev, [to] * n, False))[0]
    except Exception:  # noqa: BLE001 - the op outside autocast refuses: the region's failure
        return problem
    if len(outside) == len(want) and _first_difference(outside, want, None) is not None:
        return None  # the op's own bug, not its region's: its op cases name it
    return problem


def _first_difference(got: list, want: list, truth: list | None) -> str | None:
    """What the first compared value that differs says, None if none does."""
    for i, (d, c) in enumerate(zip(got, want, strict=True)):
        if not isinstance(c, torch.Tensor) or c.is_complex() or not isinstance(d, torch.Tensor):
            continue
        name = f"output {i}" if len(want) > 1 else "output"
        t = truth[i] if truth is not None else None
        try:
            compare_value(CHECK, name, read_back(d.detach()), c.detach(), t)
        except Mismatch as exc:
            return exc.message
    return None


def _outside(info: Any, sample: Any, n: int, cpu: Any, dev: Any, want: list, truth: Any):
    """Whether the op, outside autocast, on the inputs as the region cast them, differs from
    CPU's too (what differs; None where it agrees or cannot run)."""
    first = next((t for t in want if policy.floating(t)), None)
    cast = first.dtype if first is not None and first.dtype == dev.lower else torch.float32
    try:
        on_cpu = tree_flatten(policy.run(info.op, sample, cpu, [cast] * n, False))[0]
        on_dev = tree_flatten(policy.run(info.op, sample, dev, [cast] * n, False))[0]
    except Exception:  # noqa: BLE001 - the op outside autocast refuses: the region's failure
        return None
    if len(on_cpu) != len(on_dev):
        return None
    return _first_difference(on_dev, on_cpu, truth)


def _truth(info: Any, sample: Any, n: int, leaves: list) -> list | None:
    """The op in float64 on the inputs as CPU's region rounded them (to the lower precision
    where its result is in it), per output leaf; None where that fails."""
    first = next((t for t in leaves if policy.floating(t)), None)
    if first is None:
        return None
    cpu = policy.cpu_regime(torch.float64)
    rounded = sample
    if first.dtype != torch.float32:
        rounded = _cast(sample, [first.dtype] * n)
    try:
        wide = tree_flatten(policy.run(info.op, rounded, cpu, [torch.float64] * n, False))[0]
    except Exception:  # noqa: BLE001 - no float64 run: the base tolerance judges
        return None
    return wide if len(wide) == len(leaves) else None

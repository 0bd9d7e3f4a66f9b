"""Tolerances per dtype: engine/compare.py `tolerance` and the measured multipliers of
conformance/ops/ (the tool that measures them: tests/measure/test_tolerance_tool.py).

A multiplier holds only for the dtype it was measured on: a bfloat16 kernel 20 % off must fail
although float32 batch norm needs x12, and a kernel as accurate as CPU's (or more) must pass.
CPU plays the device with a planted kernel (tests/engine/fake_kernels.py), on the suite's own
samples."""

from __future__ import annotations

import pytest
import torch
from torch.utils._pytree import tree_map

from conformance.engine.compare import TOLERANCES, tolerance
from conformance.engine.discovery import resolve
from conformance.ops import OpSpec, spec_for
from conformance.samples import calls_for
from tests.engine.fake_kernels import run_with_kernel

BN = "_native_batch_norm_legit"
BF16, F16, F32, F64 = torch.bfloat16, torch.float16, torch.float32, torch.float64


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("samples"))


def _run(monkeypatch, overload, kernel, dtype, cache, layout="contiguous", spec=None):
    calls = calls_for(overload, dtype, cache)
    assert calls, f"no samples of {overload} for {dtype}"
    spec = spec if spec is not None else spec_for(overload)
    try:
        return run_with_kernel(monkeypatch, overload, kernel, calls, layout, spec=spec)
    finally:
        monkeypatch.undo()  # the next run's CPU reference must be the real op again


def _off(overload: str, factor: float):
    """The real kernel with its first output scaled by `factor` (written arguments as CPU's)."""
    real = resolve(overload)

    def kernel(*args, **kwargs):
        out = real(*args, **kwargs)
        if isinstance(out, tuple):
            return (out[0] * factor, *out[1:])
        return out * factor

    return kernel


def _computed_in(overload: str, wide: torch.dtype | None):
    """A correct kernel of another implementation: every floating input converted to `wide`
    (None: a contiguous copy), the real op, the results rounded back (written arguments too), as
    a device computing in a wider type does."""
    real = resolve(overload)
    written = [a.alias_info is not None and a.alias_info.is_write for a in real._schema.arguments]

    def widen(x):
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            return x
        return x.contiguous().clone() if wide is None else x.to(wide)

    def kernel(*args, **kwargs):
        wargs, wkwargs = tree_map(widen, (args, kwargs))
        out = real(*wargs, **wkwargs)
        for a, w, write in zip(args, wargs, written, strict=False):  # running stats, self
            if write and isinstance(a, torch.Tensor) and a is not w:
                a.copy_(w)
        if isinstance(out, tuple):
            return tuple(o.to(args[0].dtype) for o in out)
        return out.to(args[0].dtype)

    return kernel


def _on_contiguous_copies(overload: str):
    """The real kernel on contiguous copies of the inputs, written arguments copied back."""
    return _computed_in(overload, None)


# ---- the tolerance of one dtype ------------------------------------------------------------
def test_a_bare_multiplier_applies_to_single_precision_only():
    assert tolerance(F32, 10.0) == pytest.approx((1.3e-5, 1e-4))
    assert tolerance(torch.complex64, 10.0) == pytest.approx((1.3e-5, 1e-4))
    # float16/bfloat16 keep their rtol (float32's error x10 is far below their rounding); their
    # atol is float32's accumulated absolute error, which they inherit
    assert tolerance(BF16, 16.0)[0] == TOLERANCES[BF16][0]
    assert tolerance(F16, 16.0) == pytest.approx((1e-3, 1.6e-4))
    assert tolerance(F64, 16.0) == TOLERANCES[F64]  # 1e-7 is ~1e9 float64 ULPs
    assert tolerance(torch.int64, 16.0) == (0.0, 0.0)


def test_a_mapping_names_its_dtypes_and_pairs_widen_rtol_and_atol_apart():
    scale = {F32: 12.0, BF16: (2.0, 2000.0)}
    assert tolerance(BF16, scale) == pytest.approx((3.2e-2, 2e-2))
    assert tolerance(F32, scale) == pytest.approx((1.56e-5, 1.2e-4))
    assert tolerance(F64, scale) == TOLERANCES[F64]
    # unnamed: derived from the float32 entry by precision (float16 computes in float32)
    assert tolerance(F16, scale) == pytest.approx((1e-3, 1.2e-4))
    assert tolerance(F16, {F32: 1e4})[0] == pytest.approx(1.3e-2)


def test_op_specs_give_half_precision_no_unmeasured_multiplier():
    """Every spec either names float16/bfloat16 (a measurement) or leaves their rtol at base."""
    from conformance.ops import SPECS, _load_all

    _load_all()
    for name, spec in SPECS.items():
        named = spec.tol_scale if isinstance(spec.tol_scale, dict) else {}
        for dtype in (F16, BF16):
            if dtype not in named:
                assert tolerance(dtype, spec.tol_scale)[0] == TOLERANCES[dtype][0], name


# ---- wrong half-precision kernels fail, whatever float32 needs --------------------------------
def test_bfloat16_batch_norm_20_percent_off_fails_values(monkeypatch, cache):
    out = _run(monkeypatch, BN, _off(BN, 1.2), BF16, cache)
    assert out.failure is not None and out.failure.check == "values", out.failure
    assert "output 0" in out.failure.message


def test_bfloat16_baddbmm_15_percent_off_fails_values(monkeypatch, cache):
    out = _run(monkeypatch, "baddbmm", _off("baddbmm", 1.15), BF16, cache)
    assert out.failure is not None and out.failure.check == "values", out.failure


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_addbmm_in_half_precision_15_percent_off_fails_values(monkeypatch, cache, dtype):
    out = _run(monkeypatch, "addbmm", _off("addbmm", 1.15), dtype, cache)
    assert out.failure is not None and out.failure.check == "values", out.failure


# ---- correct kernels pass -------------------------------------------------------------------
@pytest.mark.parametrize(
    "overload, dtype, layout",
    [
        (BN, BF16, "contiguous"),
        (BN, BF16, "noncontiguous"),
        (BN, F16, "contiguous"),
        ("baddbmm", BF16, "contiguous"),
        ("baddbmm", BF16, "transposed"),
        ("addbmm", BF16, "contiguous"),
        ("addbmm", F16, "contiguous"),
    ],
)
def test_correct_kernels_pass(monkeypatch, cache, overload, dtype, layout):
    """CPU's own kernel, and one computing in float32 and rounding once (more accurate than
    CPU's half-precision batch norm and addbmm, which round on the way)."""
    assert _run(monkeypatch, overload, None, dtype, cache, layout).failure is None
    accurate = _run(monkeypatch, overload, _computed_in(overload, F32), dtype, cache, layout)
    assert accurate.failure is None, accurate.failure and accurate.failure.message


@pytest.mark.parametrize(
    "overload, dtype", [(BN, BF16), (BN, F16), ("addbmm", BF16), ("addbmm", F16)]
)
def test_an_accurate_kernel_beyond_the_base_tolerance_passes_by_the_float64_truth(
    monkeypatch, cache, overload, dtype
):
    """Under the base tolerance a kernel computing in float32 is beyond CPU's half-precision
    kernel, which rounds on the way; it is as close to the float64 result as CPU's on every
    element, so it passes, and a note says why (engine/precision.py `_as_accurate_as_cpu`)."""
    accurate = _computed_in(overload, F32)
    base = _run(monkeypatch, overload, accurate, dtype, cache, spec=OpSpec(overload))
    assert base.failure is None, base.failure.message
    assert any("as close to the float64 result as cpu's" in n for n in base.notes), base.notes


@pytest.mark.parametrize("overload, layout", [(BN, "expanded"), ("addbmm", "transposed")])
def test_float32_within_the_measured_multiplier_passes(monkeypatch, cache, overload, layout):
    """A float32 kernel that stages strided inputs into contiguous buffers first (as echo_npu
    does) differs from CPU on the strided layout by CPU's own layout dependence (batch norm of
    an expanded input, whose rows are alike: variance 0): beyond the base tolerance, within the
    measured multiplier (and not closer to the float64 result than CPU's on every element)."""
    staged = _on_contiguous_copies(overload)
    assert _run(monkeypatch, overload, staged, F32, cache, layout).failure is None
    base = _run(monkeypatch, overload, staged, F32, cache, layout, spec=OpSpec(overload))
    assert base.failure is not None and base.failure.check == "values"


def test_an_infinity_of_the_other_sign_is_not_as_close_as_cpus(monkeypatch):
    """Issue 79, hole 2: a float16 product that overflows, CPU's +inf against a device's -inf
    where the float64 result is finite (90,000): every infinity was "as close to the float64
    result as cpu's" (inf <= inf), so the device's -inf passed with that note."""
    from conformance.engine.calls import Call

    a = torch.tensor([300.0, 2.0, 0.5], dtype=F16)
    b = torch.tensor([300.0, 3.0, 0.25], dtype=F16)
    real = resolve("mul.Tensor")

    def wrong_sign(x, y):
        out = real(x, y)
        return torch.where(out.isinf(), -out, out)

    outcome = run_with_kernel(monkeypatch, "mul.Tensor", wrong_sign, [Call("mul.Tensor", (a, b))])
    assert outcome.failure is not None and outcome.failure.check == "values", outcome.notes
    monkeypatch.undo()
    same = run_with_kernel(monkeypatch, "mul.Tensor", real, [Call("mul.Tensor", (a, b))])
    assert same.failure is None, same.failure and same.failure.message


def test_a_foreach_op_declared_in_dtype_is_scaled_per_tensor(monkeypatch):
    """Issue 79, hole 3: under computes_in_dtype a `_foreach_*` result was allowed 4 roundings
    at the largest value of all the lists' tensors, so a bfloat16 `_foreach_add.List` flipping
    the sign of every small result passed (the same fault in add.Tensor failed). Each tensor of
    the list is now held to its own operands' scale; a correct kernel still passes."""
    from conformance.engine.calls import Call
    from conformance.engine.precision import DtypePolicy

    xs = [torch.full((4,), 200.0, dtype=BF16), torch.tensor([0.01, -0.02, 0.03, 0.04], dtype=BF16)]
    ys = [torch.full((4,), 100.0, dtype=BF16), torch.tensor([0.005, 0.01, -0.02, 0.02], dtype=BF16)]
    call = Call("_foreach_add.List", (xs, ys))
    real = resolve("_foreach_add.List")

    def flips_small(xs, ys):
        out = real(xs, ys)
        return [torch.where(o.abs() < 1, -o, o) for o in out]

    declared = DtypePolicy(computes_in_dtype=True)
    wrong = run_with_kernel(monkeypatch, "_foreach_add.List", flips_small, [call], policy=declared)
    assert wrong.failure is not None and wrong.failure.check == "values", wrong.notes
    monkeypatch.undo()
    right = run_with_kernel(monkeypatch, "_foreach_add.List", real, [call], policy=declared)
    assert right.failure is None, right.failure and right.failure.message


def _half_bits(t: torch.Tensor, change) -> torch.Tensor:
    bits = t.view(torch.int16)
    return torch.where(t.isfinite() & (t != 0), change(bits), bits).view(t.dtype)


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_declared_half_precision_still_rounds_to_nearest(monkeypatch, cache, dtype):
    """Issue 79, hole 7: declared computes_in_dtype, an addcmul with the lowest bit of every
    result flipped, or its last two bits dropped (truncation, up to 3 ulps), passed every case:
    no element was beyond 4 roundings. Judged as a distribution they fail; a kernel that rounds
    each step to nearest in the dtype passes."""
    from conformance.engine.precision import DtypePolicy

    real = resolve("addcmul")

    def in_dtype(x, t1, t2, value=1):
        step = (t1.float() * t2.float()).to(dtype)
        step = (step.float() * value).to(dtype)
        return (x.float() + step.float()).to(dtype)

    wrongs = {
        "lowest bit flipped": lambda *a, **k: _half_bits(real(*a, **k), lambda b: b ^ 1),
        "two bits dropped": lambda *a, **k: _half_bits(real(*a, **k), lambda b: b & ~3),
    }
    declared = DtypePolicy(computes_in_dtype=True)
    calls = calls_for("addcmul", dtype, cache)
    right = run_with_kernel(monkeypatch, "addcmul", in_dtype, calls, policy=declared)
    assert right.failure is None, right.failure and right.failure.message
    monkeypatch.undo()
    for what, kernel in wrongs.items():
        wrong = run_with_kernel(monkeypatch, "addcmul", kernel, calls, policy=declared)
        monkeypatch.undo()
        assert wrong.failure is not None and wrong.failure.check == "rounding", what
        assert "round-to-nearest" in wrong.failure.message, wrong.failure.message


def test_a_value_beyond_cpus_own_error_is_not_excused_by_a_looser_tolerance(monkeypatch, cache):
    """Issue 79, hole 6: the batch-norm `-sizes` sample of a batch of one (x = 0.21875): a saved
    mean of 0 failed the evidence tolerance (CPU's own error), then the "as close as CPU"
    excuse re-judged it with the op's scaled tolerance, found "0 element(s) beyond", and let it
    pass. The excuse now asks the rule the values check used."""
    from conformance.engine import runner

    calls = calls_for(BN, BF16, cache, "sizes")
    real = resolve(BN)

    def zero_mean_for_one(x, *args, **kwargs):
        out = real(x, *args, **kwargs)
        return (out[0], torch.zeros_like(out[1]), out[2]) if x.shape[0] == 1 else out

    original = runner.run_case
    monkeypatch.setattr(runner, "run_case", lambda *a, **k: original(*a, **{**k, "evidence": True}))
    wrong = run_with_kernel(monkeypatch, BN, zero_mean_for_one, calls, spec=spec_for(BN))
    assert wrong.failure is not None and wrong.failure.check == "values", wrong.notes
    assert "output 1" in wrong.failure.message


def _evidence_run(monkeypatch, overload, kernel, calls):
    from conformance.engine import runner

    original = runner.run_case
    monkeypatch.setattr(runner, "run_case", lambda *a, **k: original(*a, **{**k, "evidence": True}))
    try:
        return run_with_kernel(monkeypatch, overload, kernel, calls, spec=spec_for(overload))
    finally:
        monkeypatch.undo()


def test_any_order_of_float32_accumulation_passes_a_wrong_element_fails(monkeypatch, cache):
    """Issue 79, hole 8: a float32 cumsum with one sequential float32 accumulator (numpy's)
    failed the 65,537-element -sizes case, judged by CPU's own error (CPU accumulates wider).
    Any order of accumulation at the dtype's precision passes (engine/evidence.py
    `accumulation_bound`); one element wrong by 0.1 % past 1,024 still fails."""
    calls = calls_for("cumsum", F32, cache, "sizes")
    assert max(c.args[0].numel() for c in calls) > 60_000

    def sequential(x, dim, dtype=None):
        out = torch.from_numpy(x.detach().numpy().cumsum(axis=dim, dtype="float32"))
        return out.to(dtype) if dtype is not None else out

    def one_wrong(x, dim, dtype=None):
        out = torch.cumsum(x, dim, dtype=dtype)
        if out.numel() > 1025:
            out.view(-1)[1025] *= 1.001
        return out

    passed = _evidence_run(monkeypatch, "cumsum", sequential, calls)
    assert passed.failure is None, passed.failure and passed.failure.message
    wrong = _evidence_run(monkeypatch, "cumsum", one_wrong, calls)
    assert wrong.failure is not None and wrong.failure.check == "values"

"""Ops whose result depends on the order of a long accumulation: wider tolerances, OpInfo samples.

Every multiplier below is per dtype and measured with `python -m conformance.measure.tolerances`
on torch 2.13 (the suite's samples: OpInfo's first 8 per dtype, every layout, one thread):
CPU on each layout against CPU on contiguous copies ("layouts"), and CPU against the same
computation in float64 ("float64", doubled in `needs`: a kernel as accurate as CPU's, erring the
other way). A dtype not named keeps its base tolerance (engine/compare.py `tolerance`). Where
CPU's error is absolute (cancellation: large terms, a small result) the atol alone is widened,
so that a kernel some percent off still fails on the larger values. Samples where CPU disagrees
with itself beyond 10x the tolerance (the out= variants into strided outs) are torch bugs, judged
against the contiguous copies (engine/consistency.py), not a reason for a wider tolerance.
"""

from __future__ import annotations

import torch

from conformance.ops import OpSpec, register

BATCH_NORM = (
    "native_batch_norm",
    "native_batch_norm.out",
    "_native_batch_norm_legit",
    "_native_batch_norm_legit.out",
    "_native_batch_norm_legit.no_stats",
    "_native_batch_norm_legit_no_training",
    "_batch_norm_with_update",
    "_batch_norm_with_update.out",
)
# Figures: the largest over these overloads and their samples; "x" is the multiplier of the
# dtype's base tolerance a difference implies, "needs" the multiplier the tool asks for.
# float32: the expanded [2, 1] input has variance 0, so the output is (x - mean) rounding times
#   1/sqrt(eps): max abs 1.2e-4, rel 1.4e-5 both across layouts and against float64 (x5.7 each;
#   needs x11.4): x12.
# float16: layouts max abs 0.031, rel 0.037 (noncontiguous [3, 2, 3, 4], x28); float64 max abs
#   0.047, rel 0.022 (x17): CPU's half kernel errs on small outputs by cancellation. Needs x34
#   alike (rtol 3.4e-2) or atol alone x320: rtol x2, atol x300 (3e-3); the worst sample needs
#   0.70 of it.
# bfloat16: layouts max abs 0.5, rel 0.074 (x4.5); float64 max abs 0.33, rel 0.17 (x10: an
#   output of -0.018 where exact is -0.022). Needs x21 alike, which would pass a kernel 20 % off;
#   rtol x2 (3.2e-2) with atol x2000 (2e-2); the worst sample needs 0.75 of it.
# float64: nothing measurable (layouts max rel 3.1e-13).
BATCH_NORM_SCALE = {torch.float32: 12.0, torch.float16: (2.0, 300.0), torch.bfloat16: (2.0, 2000.0)}

# native_batch_norm_backward (excluded from the default fallback set, conformance/workloads/
# excluded.toml): float32 layouts max abs 7.6e-6, rel 4.2e-7 (x0.09), float64 likewise: no
# multiplier. float16: layouts max abs 0.062, rel 3.2e-3 (expanded [3, 2, 3, 4], x2.8), float64
# max abs 0.027, rel 2.3e-3 (x0.45); bfloat16: layouts max abs 0.062, rel 0.053 (expanded,
# x3.3), float64 max abs 0.12, rel 3.9e-3 (x0.24): x4 each (the worst sample needs 0.71 /
# 0.82 of it). Its zero_size samples kill CPU with SIGFPE in torch 2.13: nothing to measure.
BATCH_NORM_BACKWARD_SCALE = {torch.float16: 4.0, torch.bfloat16: 4.0}

ADDBMM = ("addbmm", "addbmm.out", "addbmm_")
# float32: layouts max abs 4.6e-5, rel 3.5e-5 (transposed, x1.1); float64 max abs 1e-4, rel
#   2.4e-5 (expanded, x2; needs x4): x5.
# float16/bfloat16: CPU sums the batch in the dtype itself (a rounding per batch, terms up to
#   ~2e3), so its result is far from exact: float64 max abs 0.43 / 2.7, rel 0.12 / 0.42 (x120 /
#   x26, needs x240 / x52 alike). The error is absolute, so atol: float16 rtol x2, atol x3e4
#   (0.3; the worst sample needs 0.71 of it), bfloat16 atol x1e5 (1.0; 0.80). No layout
#   dependence.
# float64: nothing measurable.
ADDBMM_SCALE = {torch.float32: 5.0, torch.float16: (2.0, 3e4), torch.bfloat16: (1.0, 1e5)}
# baddbmm, baddbmm.out, baddbmm_: no multiplier. CPU gives the same values in every layout, and
# against float64 max rel 1.1e-5 (float32, x0.39), 4.8e-4 (float16, x0.48), 3.8e-3 (bfloat16,
# x0.24): the base tolerances hold for a kernel as accurate as CPU's.

NOTE = "per-dtype tolerance: a long accumulation whose order and precision CPU itself varies"
#: training batch norm updates running_mean/running_var although the schema of these overloads
#: does not mark them written (`Tensor?`): their contract is CPU's behaviour (a kernel, or
#: cpu_fallback, that leaves them alone fails). Found by running every overload of the default
#: and `--fallback-ops all` sets with CPU as the device: only these two modify an unmarked input.
RUNNING_STATS = {"native_batch_norm": ("running_mean", "running_var")}
RUNNING_STATS["native_batch_norm.out"] = RUNNING_STATS["native_batch_norm"]
for overload in BATCH_NORM:
    written = RUNNING_STATS.get(overload, ())
    register(OpSpec(overload, tol_scale=BATCH_NORM_SCALE, written_args=written, notes=NOTE))
register(OpSpec("native_batch_norm_backward", tol_scale=BATCH_NORM_BACKWARD_SCALE, notes=NOTE))
for overload in ADDBMM:
    register(OpSpec(overload, tol_scale=ADDBMM_SCALE, notes=NOTE))

"""How to test one aten overload: the `OpSpec` the engine reads (samples, check options,
tolerances). Specs are declared in `conformance/ops/` (which registers them) and looked up by the
harness and the sample sources; the engine only receives them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from conformance.engine.calls import Call
from conformance.engine.compare import Scale


@dataclass
class OpSpec:
    """How to test one aten overload."""

    overload: str
    # extra samples for a dtype (in addition to OpInfo's unless use_opinfo is False)
    samples: Callable[[torch.dtype], list[Call]] | None = None
    use_opinfo: bool = True
    # names of OpInfo entries to take samples from (default: matched by name)
    opinfo_names: tuple[str, ...] = ()
    # CPU reference when CPU has no kernel for the overload itself (e.g. _copy_from)
    reference: Callable[..., object] | None = None
    # arguments the op writes although the schema does not say so (e.g. _copy_from's dst)
    written_args: tuple[str, ...] = ()
    check_aliasing: bool = True  # False where the schema's aliasing is not the real contract
    check_values: bool = True  # False for uninitialised memory (empty*)
    metadata_only_outputs: tuple[int, ...] = ()  # flat output indices left uninitialised
    keeps_old_contents: bool = False  # written args keep what existed before (resize_)
    nondeterministic: bool | None = None  # draws random numbers (None: from the schema)
    layout_free_reference: bool = True  # also run CPU on contiguous copies (self-consistency)
    check_strides: bool = True
    # CPU's result is exact, bit for bit (engine/exactness.py): None measures it; True declares
    # it (conversions, whose result IEEE defines); False never judges it exact
    exact: bool | None = None
    # each output element is computed from its own inputs alone, as torch's `pointwise` tag
    # says of the ops it tags (a fused RNN cell): its rounding errors are independent, so their
    # sides are judged (engine/error_balance.py); never an op with a shared sum or normaliser
    elementwise: bool = False
    # the reference (for an op CPU lacks) is differentiable as the device's autograd formula
    # is: -grad cases compare the device's gradients with CPU's autograd of the reference
    grad_reference: bool = False
    # indices of the returned values that are compared (None: all). For ops whose other results
    # are the backend's own business (an attention kernel's RNG state, sequence offsets)
    compared_outputs: tuple[int, ...] | None = None
    # multiplier(s) of the per-dtype tolerances, each measured (python -m
    # conformance.measure.tolerances) and justified in a comment: a float applies to float32 and
    # complex64 only, {dtype: multiplier} to the dtypes it names; other dtypes are derived from
    # their precision (engine/compare.py `tolerance`: float16/bfloat16 keep their base)
    tol_scale: Scale = 1.0
    dtypes: tuple[torch.dtype, ...] | None = None  # restrict (None: as requested)
    layouts: tuple[str, ...] | None = None  # restrict (None: as requested)
    # value sets beyond the ordinary samples (None: every one the schema allows, see
    # samples/values.py); () for ops whose operands are not values (copies' dst)
    value_sets: tuple[str, ...] | None = None
    notes: str = ""
    extra: dict = field(default_factory=dict)

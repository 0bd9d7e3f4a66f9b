"""Poison: the bytes a buffer holds before the op under test writes it, so that an element it
leaves unwritten differs from the answer whatever the allocator held.

- Every out= argument is placed holding poison (placing.py), whichever source built the
  sample: an out= tensor captured as `empty_like(answer)` often got the block the functional
  call had just freed, i.e. the answer itself, and a kernel that left elements of it unwritten
  passed on one machine's cache and failed on another's.
- A boolean out= argument cannot be poisoned by a byte pattern (every byte but 0 reads True,
  and only 0 and 1 are valid bools), so the sources that know the answer hold its negation
  there (`out_like`: samples/opinfo.py, samples/twins.py, hand-written specs).
- -asynchronous cases poison their inputs before the non_blocking copies land (modes/).
"""

from __future__ import annotations

import torch

POISON = 0x5A  # float32 1.5e16, float16 203.25, bfloat16 1.5e16, int8 90, int32 1515870810


#: dtypes a byte pattern cannot fill: bool (only 0 and 1 are valid), and the quantized ones
_NOT_BYTES = {torch.bool} | {
    getattr(torch, n)
    for n in ("qint8", "quint8", "qint32", "quint4x2", "quint2x4")
    if hasattr(torch, n)
}


def _byte_poisonable(dtype: torch.dtype) -> bool:
    return dtype not in _NOT_BYTES


def poison_of(t: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU tensor like `t` whose every byte is POISON (bool: the negation of `t`)."""
    if t.dtype == torch.bool:
        return ~t
    raw = torch.full((t.numel() * t.element_size(),), POISON, dtype=torch.uint8)
    return raw.view(t.dtype).reshape(t.shape)


def unwritten_out(t: torch.Tensor) -> torch.Tensor:
    """What an out= argument holds when placed: poison, or `t` itself where no byte pattern
    works (bool: the sample's own values, which `out_like` made the answer's negation)."""
    if t.device.type != "cpu" or t.layout != torch.strided or not _byte_poisonable(t.dtype):
        return t  # bool, quantized, sparse: no buffer of bytes to fill
    return poison_of(t)


def out_like(answer: torch.Tensor) -> torch.Tensor:
    """An out= argument for a call whose answer is `answer`: the answer's negation where it is
    boolean (unequal in every element), poison otherwise (contiguous); an empty one where
    neither applies (sparse, quantized)."""
    if answer.layout != torch.strided:
        return torch.empty_like(answer)
    if answer.dtype == torch.bool:
        return torch.logical_not(answer).contiguous()
    return poison_of(answer) if _byte_poisonable(answer.dtype) else torch.empty_like(answer)

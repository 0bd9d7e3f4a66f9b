"""The -reference value set's choice among OpInfo's ordinary reference inputs
(samples/opinfo.py `varied`)."""

from __future__ import annotations

import torch


def test_reference_inputs_are_chosen_for_their_arguments_first():
    """The -reference case keeps a few of OpInfo's ordinary reference inputs: those with
    keyword arguments sample_inputs never use come first (`alpha=-3.125`), then other shapes
    of the call, then the rest."""
    from types import SimpleNamespace

    from conformance.samples.sample_kinds import varied

    def sample(shape, other, **kwargs):
        return SimpleNamespace(input=torch.zeros(shape), args=(other,), kwargs=kwargs)

    candidates = list(enumerate([
        sample((3,), torch.zeros(3)),
        sample((4,), torch.zeros(4)),  # the same call's shape as the first
        sample((2, 3), torch.zeros(3)),  # a broadcast
        sample((5, 5), torch.zeros(5, 5), alpha=-3.125),
    ]))  # fmt: skip
    chosen = [i for i, _ in varied(candidates, 3)]
    assert chosen == [0, 3, 2]

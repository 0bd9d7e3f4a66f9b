"""Scenario 2: a tiny randomly initialised Qwen2 causal LM, greedy `generate`, device vs CPU.

Built from a config (no download), the same weights copied to the device. With and without
`attention_mask` (a left-padded batch, the path of the original masked_fill_ crash).
Needs the optional `transformers` dependency (`pip install -e .[scenarios]`).
"""

from __future__ import annotations

import copy
from importlib import metadata

import pytest
import torch

from conformance.harness.session import run_of
from conformance.scenarios._helpers import assert_same, step

PAD = 0

# Only the installed version is read here: importing transformers (seconds) waits until a
# scenario of this module runs, so collecting the suite (e.g. for -k masked_fill) stays cheap.
try:
    TRANSFORMERS_VERSION = metadata.version("transformers")
except metadata.PackageNotFoundError:
    pytest.skip(
        "transformers is not installed (pip install -e .[scenarios])", allow_module_level=True
    )


def _needs_amp_module(device: torch.device) -> None:
    """transformers 4.x: Qwen2's rotary embedding enters torch.autocast(device_type=<device>),
    which asks the device module for get_amp_supported_dtype()."""
    module = getattr(torch, device.type, None)
    if int(TRANSFORMERS_VERSION.split(".")[0]) < 5 and not hasattr(
        module, "get_amp_supported_dtype"
    ):
        pytest.skip(
            f"unsupported: transformers {TRANSFORMERS_VERSION} enters "
            f"torch.autocast(device_type='{device.type}'), which needs "
            f"torch.{device.type}.get_amp_supported_dtype() (the device module lacks it)"
        )


def _model():
    from conformance.engine.workload_models import tiny_qwen2

    model = tiny_qwen2(PAD)
    with torch.no_grad():  # larger weights than the default init: distinct, confident logits
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.2)
    return model


@pytest.fixture(scope="module")
def models(request):
    _needs_amp_module(run_of(request.config).suite.backend.device)
    cpu_model = _model()
    dev_model = copy.deepcopy(cpu_model).to(run_of(request.config).suite.backend.device)
    yield cpu_model, dev_model
    del dev_model


def _generate(model, device, input_ids, attention_mask):
    kwargs = dict(
        max_new_tokens=5,
        do_sample=False,
        pad_token_id=PAD,
        eos_token_id=None,
        return_dict_in_generate=True,
        output_scores=True,
    )
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask.to(device)
    with torch.no_grad():
        return model.generate(input_ids.to(device), **kwargs)


def _check(models, device, input_ids, attention_mask, what):
    cpu_model, dev_model = models
    step(f"forward ({what})")
    with torch.no_grad():
        mask = None if attention_mask is None else attention_mask.to(device)
        logits = dev_model(input_ids.to(device), attention_mask=mask).logits
        expected_logits = cpu_model(input_ids, attention_mask=attention_mask).logits
    if attention_mask is not None:  # padded positions' logits are not meaningful
        keep = attention_mask.bool()
        logits, expected_logits = logits.cpu()[keep], expected_logits[keep]
    assert_same(logits, expected_logits, f"Qwen2 forward logits ({what})", atol=1e-4, rtol=1e-4)
    step(f"generate ({what})")
    expected = _generate(cpu_model, torch.device("cpu"), input_ids, attention_mask)
    got = _generate(dev_model, device, input_ids, attention_mask)
    assert got.sequences.device.type == device.type
    assert got.sequences.cpu().tolist() == expected.sequences.tolist(), (
        f"Qwen2 greedy generate ({what}): device tokens {got.sequences.cpu().tolist()} != "
        f"CPU tokens {expected.sequences.tolist()}"
    )
    for i, (g, e) in enumerate(zip(got.scores, expected.scores, strict=True)):
        assert_same(g, e, f"Qwen2 generate scores of new token {i} ({what})", atol=1e-4, rtol=1e-4)


def test_qwen2_generate_without_attention_mask(models, device):
    input_ids = torch.tensor([[5, 17, 33, 8, 41, 12]])
    _check(models, device, input_ids, None, "one prompt, no attention_mask")


def test_qwen2_generate_left_padded_batch(models, device):
    input_ids = torch.tensor([[PAD, PAD, 7, 21, 9, 30], [11, 3, 60, 25, 14, 50]])
    attention_mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    _check(models, device, input_ids, attention_mask, "left-padded batch with attention_mask")

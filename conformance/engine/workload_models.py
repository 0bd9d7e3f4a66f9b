"""The representative models the workloads run on CPU, built from configs (no download).

A tiny Qwen2 causal LM (forward and greedy generate, with and without a padded attention mask),
a small CNN training step, the transformers attention-mask pipeline with SDPA, a
torch.save/torch.load round trip, and torch.export of the models to the core ATen set. Each is
seeded; engine/workloads.py records what they reach, and the scenarios reuse the models.
"""

from __future__ import annotations

import io

import torch
from torch.utils._python_dispatch import _disable_current_modes


def tiny_qwen2(pad: int = 0):
    """A 2-layer Qwen2 causal LM from a config (no download), seeded, in eval mode."""
    import transformers  # optional and slow to import: only where a Qwen2 is built

    config = transformers.Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=pad,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(config).eval()


def qwen2_generate() -> None:
    """Forward and greedy generate, one prompt and a left-padded batch with attention_mask."""
    model = tiny_qwen2()
    ids = torch.tensor([[0, 0, 7, 21, 9, 30], [11, 3, 60, 25, 14, 50]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        model(ids[1:], attention_mask=None)
        model(ids, attention_mask=mask)
        for m in (None, mask):
            kwargs = {} if m is None else {"attention_mask": m}
            model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0, **kwargs)


def small_cnn(dropout: bool = True, conv_bias: bool = True) -> torch.nn.Module:
    """The CNN of `cnn_train_step` (seeded; input [N, 3, 8, 8], 4 classes). Without `dropout`
    its forward draws no random numbers; without `conv_bias` the first convolution has no bias,
    whose gradient is rounding noise (batch norm subtracts it right away): an optimizer that
    normalises updates (Adam) would turn that noise into full steps. The training scenario
    compares both with CPU."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=conv_bias),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 8, 3, padding=1, groups=2),
        torch.nn.GELU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Dropout(0.1) if dropout else torch.nn.Identity(),
        torch.nn.Linear(8, 4),
    )


def cnn_train_step() -> None:
    """A small CNN: forward, cross-entropy, backward, clipping and SGD/AdamW steps; eval."""
    model = small_cnn()
    x = torch.randn(4, 3, 8, 8)
    target = torch.tensor([0, 1, 2, 3])
    # foreach=True: what optimizers pick by default for an accelerator (PrivateUse1 included)
    params = list(model.parameters())
    for opt in (
        torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=True),
        torch.optim.AdamW(params, lr=1e-3, foreach=True),
    ):
        loss = torch.nn.functional.cross_entropy(model(x), target)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    # On an accelerator (PrivateUse1 included) nn.Dropout takes ATen's fused path, which CPU
    # does not (at::native::is_fused_kernel_acceptable): record what the device would reach.
    features = torch.randn(4, 8, requires_grad=True)
    dropped, _ = torch.native_dropout(features, 0.1, True)
    dropped.sum().backward()
    model.eval()
    with torch.no_grad():
        model(x).softmax(-1).argmax(-1)


def attention_masks() -> None:
    """transformers' mask pipeline (padding + causal, min-filled) and SDPA with masks."""
    batch, tgt, heads, dim = 2, 5, 2, 8
    padding = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    causal = torch.full((tgt, tgt), torch.finfo(torch.float32).min)
    cond = torch.arange(tgt)
    causal.masked_fill_(cond < (cond + 1).view(tgt, 1), 0)
    expanded = padding[:, None, None, :].expand(batch, 1, tgt, tgt).to(torch.float32)
    inverted = 1.0 - expanded
    bias = inverted.masked_fill(inverted.to(torch.bool), torch.finfo(torch.float32).min)
    bias = bias + causal[None, None]
    keep = (
        torch.tril(torch.ones(tgt, tgt, dtype=torch.bool))[None, None]
        & padding.bool()[:, None, None, :]
    )
    torch.all(padding == 1)
    padding.sum(-1)
    q, k, v = (torch.randn(batch, heads, tgt, dim) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    sdpa(q, k, v, attn_mask=bias)
    sdpa(q, k, v, attn_mask=keep)
    sdpa(q, k, v, is_causal=True)


def save_load() -> None:
    """torch.save / torch.load of tensors, views and a state_dict."""
    base = torch.randn(6, 5)
    state = {"base": base, "t": base.t(), "row": base[2:5], "int": torch.arange(12).reshape(3, 4)}
    state["linear"] = torch.nn.Linear(5, 3).state_dict()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    torch.load(buffer, weights_only=True)


class QwenLogits(torch.nn.Module):
    """The tiny Qwen2's forward as torch.export takes it: (ids, attention_mask) -> logits."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.model(ids, attention_mask=mask, use_cache=False).logits


def _with_running_stats(model: torch.nn.Module) -> torch.nn.Module:
    """Seeded running statistics for every batch norm, as a trained model has: a fresh one's
    (mean 0, variance 1) would let a kernel that ignores them pass."""
    # the default generator and ops the workload calls anyway: the recorded op set stays the same
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            shape = module.running_mean.shape
            module.running_mean.copy_(torch.randn(shape) * 0.5)
            module.running_var.copy_(torch.randn(shape) * 0.25 + 1.0)  # seeded: all > 0.4
    return model


def exported_models(with_qwen2: bool = True) -> list[tuple[str, torch.nn.Module, tuple]]:
    """(name, model, example inputs) of the models the export scenario exports, on CPU."""
    torch.manual_seed(0)
    cnn = _with_running_stats(small_cnn(dropout=False)).eval()
    models = [("small_cnn", cnn, (torch.randn(2, 3, 8, 8),))]
    if with_qwen2:
        ids, mask = torch.tensor([[1, 5, 9, 3, 7]]), torch.tensor([[0, 1, 1, 1, 1]])
        models.append(("tiny_qwen2", QwenLogits(tiny_qwen2()), (ids, mask)))
    return models


def export_core_aten(with_qwen2: bool = True) -> None:
    """torch.export of the models, `run_decompositions()` to the core ATen set, and a run of
    the exported programs: what a backend's exported path calls. Exporting traces with fake
    tensors: only the run is recorded (the recorder's mode is lifted while exporting)."""
    for _, model, args in exported_models(with_qwen2):
        with _disable_current_modes():
            program = torch.export.export(model, args).run_decompositions()
        with torch.no_grad():
            program.module()(*args)

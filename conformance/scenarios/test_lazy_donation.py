"""Buffer donation on a lazy device (torch_xla; issue 36): after every sync point every live
tensor reads back and equals CPU's.

A step (`torch_xla.sync()`, `xm.mark_step()`) may donate an input buffer to the output that
replaces it. torch_xla <= 2.5's `xm.save` synced only the saved tensors as a step would, donating
a buffer that a pending graph of another live tensor still needed: the next step failed on the
deleted buffer (seed 004). Each scenario runs its sequence on CPU first, keeping what every live
tensor holds at each sync point, then on the device, where each sync point is named (`step`) and
followed by reading every live tensor back. Skipped unless the device is lazy and donates
buffers (torch_xla's `xla`).
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from conformance.scenarios._helpers import assert_same, step

ALIASES = "InputOutputAliasCount"  # torch_xla's metric: input buffers a step donated
ATOL, RTOL = 1e-5, 1e-4


@pytest.fixture
def xla(device: torch.device) -> Iterator[ModuleType]:
    """torch_xla, when the device is its lazy `xla` device with buffer donation on; afterwards,
    whatever a failed scenario left alive is dropped: pytest keeps the failing frames for
    post-mortem debugging (sys.last_traceback), and their tensors' pending graphs, which may
    need a lost buffer, would otherwise fail every later sync of this process."""
    if device.type != "xla":
        pytest.skip(
            f"buffer donation scenarios need a lazy device that donates buffers (torch_xla's "
            f"'xla'); the device here is '{device.type}'"
        )
    torch_xla = pytest.importorskip("torch_xla", reason="the 'xla' device needs torch_xla")
    if os.environ.get("XLA_ENABLE_PARAM_ALIASING", "1").lower() in ("0", "false"):
        pytest.skip("XLA_ENABLE_PARAM_ALIASING turns buffer donation off")
    yield torch_xla
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)
    gc.collect()


@dataclass
class Side:
    """One run of a scenario's sequence. On CPU (`xla` None) it keeps the values of the live
    tensors at each sync point; on the device it syncs as the device does, then compares every
    live tensor with CPU's values at the same point."""

    device: torch.device
    xla: ModuleType | None = None
    expected: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    checked: int = 0

    def mark_step(self, name: str) -> None:
        """Sync point `name`: every pending graph runs (nothing to do on CPU)."""
        if self.xla is not None:
            xla = self.xla
            sync = getattr(xla, "sync", None) or xla.core.xla_model.mark_step
            self._sync(name, sync)

    def save(self, name: str, data: Any, path: Path) -> None:
        """Sync point `name`: `xm.save` on the device, `torch.save` on CPU."""
        if self.xla is None:
            torch.save(data, path)
            return
        import torch_xla.core.xla_model as xm

        self._sync(name, lambda: xm.save(data, path))

    def check(self, name: str, live: dict[str, Any]) -> None:
        """After sync point `name`: every live tensor reads back and equals CPU's."""
        if self.xla is None:
            self.expected.append((name, {k: _snapshot(v) for k, v in live.items()}))
            return
        want_name, want = self.expected[self.checked]
        self.checked += 1
        assert want_name == name, f"the sequence differs from CPU's: {name!r} != {want_name!r}"
        assert list(live) == list(want), f"after {name}: live tensors {list(live)} != {list(want)}"
        for key, value in live.items():
            step(f"after {name}: read {key} back")
            try:
                got = _read(value)
            except RuntimeError as exc:
                raise AssertionError(
                    f"after {name}: the live tensor {key} is not readable: {_first_line(exc)}"
                ) from exc
            assert_same(got, want[key], f"after {name}: {key}", atol=ATOL, rtol=RTOL)

    def _sync(self, name: str, action: Callable[[], Any]) -> None:
        step(name)
        try:
            action()
        except RuntimeError as exc:
            raise AssertionError(
                f"{name}: the sync failed: {type(exc).__name__}: {_first_line(exc)}"
            ) from exc


def _snapshot(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_snapshot(v) for v in value)
    return value


def _read(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(_read(v) for v in value)
    return value


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _donations() -> int:
    import torch_xla.debug.metrics as met

    data = met.metric_data(ALIASES)
    return int(data[0]) if data else 0


def run_lockstep(
    sequence: Callable[[Side, Path], None], device: torch.device, xla: ModuleType, tmp: Path
) -> None:
    """`sequence` on CPU, then on the device, compared at every sync point; skipped when no step
    donated a buffer (the scenario would test nothing)."""
    # the device is used before CPU's backward: in a process whose first backward ran before
    # torch_xla 2.9's client started, every later backward on 'xla' fails an INTERNAL ASSERT
    # (engine.cpp: the device index is past the autograd engine's device queues)
    torch.zeros((), device=device).add_(1).cpu()
    cpu = Side(torch.device("cpu"))
    (tmp / "cpu").mkdir()
    sequence(cpu, tmp / "cpu")
    on_device = Side(device, xla, expected=cpu.expected)
    (tmp / "device").mkdir()
    before = _donations()
    sequence(on_device, tmp / "device")
    assert on_device.checked == len(cpu.expected), "the device ran fewer sync points than CPU"
    if _donations() == before:
        pytest.skip(f"no step donated a buffer ({ALIASES} unchanged): donation is off")


# ---- seed 004 and its neighbours: xm.save of a subset while other graphs are pending ------------
def _save_subset(side: Side, tmp: Path, read_after_save: bool) -> None:
    torch.manual_seed(0)
    a, b, c = (torch.randn(3, 4).to(side.device) for _ in range(3))
    side.mark_step("mark_step: inputs on the device")
    side.check("mark_step: inputs on the device", {"a": a, "b": b, "c": c})
    s = a + b  # pending graphs that share b's buffer as it is now
    p = b * c
    b.add_(1.0)  # b gets a new value: its old buffer may be donated
    a.mul_(c)
    side.save("xm.save of a subset (b)", {"b": b}, tmp / "subset.pt")
    if read_after_save:
        side.check("xm.save of a subset (b)", {"a": a, "b": b, "c": c, "s": s, "p": p})
    b.add_(s)  # further in-place ops after the save
    c.sub_(0.5)
    side.mark_step("xm.save of a subset, then mark_step")
    live = {"a": a, "b": b, "c": c, "s": s, "p": p}
    side.check("xm.save of a subset, then mark_step", live)
    q = c - b  # a second save of another subset, pending graphs again
    c.mul_(a)
    side.save("xm.save of another subset (a, c)", [a, c], tmp / "subset2.pt")
    side.mark_step("xm.save of another subset, then mark_step")
    side.check("xm.save of another subset, then mark_step", {**live, "q": q})
    saved = torch.load(tmp / "subset.pt", weights_only=True)
    saved2 = torch.load(tmp / "subset2.pt", weights_only=True)
    side.check("torch.load of the saved subsets", {"b": saved["b"], "a, c": saved2})


@pytest.mark.parametrize("then", ["step", "read"])
def test_donation_save_subset(device, xla, tmp_path, then):
    """Seed 004: xm.save of a subset of the live tensors, then (`read`: every live tensor read
    back, then) further in-place ops and a step."""
    run_lockstep(lambda s, t: _save_subset(s, t, then == "read"), device, xla, tmp_path)


def test_donation_seed_004(device, xla, tmp_path):
    """Seed 004 as reported: t2 = t0 + t1 pending, t1.add_(1), xm.save(t1), mark_step."""

    def sequence(side: Side, tmp: Path) -> None:
        t0 = torch.tensor([1], device=side.device)
        t1 = torch.tensor([2], device=side.device)
        side.mark_step("mark_step: t0, t1 on the device")
        t2 = t0 + t1
        t1.add_(1)
        side.save("xm.save(t1) with t2 = t0 + t1 pending", t1, tmp / "t1.pt")
        side.mark_step("xm.save(t1), then mark_step")
        side.check("xm.save(t1), then mark_step", {"t0": t0, "t1": t1, "t2": t2})

    run_lockstep(sequence, device, xla, tmp_path)


# ---- an in-place update of a donated input, through the tensor and its views --------------------
def _donated_input(side: Side, tmp: Path) -> None:
    torch.manual_seed(1)
    t = torch.randn(4, 6).to(side.device)
    side.mark_step("mark_step: t on the device")
    row, flat, cols = t[1], t.view(-1), t[:, 2:5]
    before = t.clone()  # pending: needs t's buffer as it is now
    t.add_(1)
    side.mark_step("t.add_(1), then mark_step (t's buffer donated)")
    live = {"t": t, "row": row, "flat": flat, "cols": cols, "before": before}
    side.check("t.add_(1), then mark_step", live)
    row.mul_(2)  # in place through a view of the tensor whose buffer was donated
    total = t.sum(0)
    side.mark_step("row.mul_(2) on a view of t, then mark_step")
    live["total"] = total
    side.check("row.mul_(2) on a view of t, then mark_step", live)
    t.add_(flat.view(4, 6))  # the tensor updated with an alias of itself
    cols.zero_()
    twice = t * 2
    side.mark_step("t.add_(alias of t), cols.zero_(), then mark_step")
    live["twice"] = twice
    side.check("t.add_(alias of t), cols.zero_(), then mark_step", live)
    t.copy_(before)  # overwritten from a tensor that outlived two donations
    before.add_(t)
    side.mark_step("t.copy_(before), before.add_(t), then mark_step")
    side.check("t.copy_(before), before.add_(t), then mark_step", live)


def test_donation_inplace_on_donated_input(device, xla, tmp_path):
    run_lockstep(_donated_input, device, xla, tmp_path)


# ---- optimizer steps and a checkpoint mid-training ----------------------------------------------
def _model() -> torch.nn.Module:
    torch.manual_seed(2)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


OPTIMIZERS = ("SGD", "AdamW")


def _optimizer(name: str, model: torch.nn.Module) -> torch.optim.Optimizer:
    if name == "SGD":
        return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)


def _data(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(3)
    return torch.randn(5, 6).to(device), torch.randn(5, 3).to(device)


def _live(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """The parameters and the optimizer's state, by name."""
    live: dict[str, Any] = {f"parameter {n}": p for n, p in model.named_parameters()}
    for n, p in model.named_parameters():
        for key, value in opt.state[p].items():
            live[f"{type(opt).__name__} state {n}.{key}"] = value
    return live


def _train_step(
    model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def _optimizer_steps(side: Side, tmp: Path, name: str) -> None:
    model = _model().to(side.device)
    opt = _optimizer(name, model)
    x, y = _data(side.device)
    side.mark_step("mark_step: model and data on the device")
    for i in range(3):
        loss = _train_step(model, opt, x, y)
        what = f"{name} step {i + 1}, then mark_step"
        side.mark_step(what)
        side.check(what, {"loss": loss, **_live(model, opt)})


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_donation_optimizer_steps(device, xla, tmp_path, optimizer):
    run_lockstep(lambda s, t: _optimizer_steps(s, t, optimizer), device, xla, tmp_path)


def _checkpoint(side: Side, tmp: Path) -> None:
    model = _model().to(side.device)
    opt = _optimizer("AdamW", model)
    x, y = _data(side.device)
    for i in range(2):
        loss = _train_step(model, opt, x, y)
        side.mark_step(f"AdamW step {i + 1}, then mark_step")
        side.check(f"AdamW step {i + 1}, then mark_step", {"loss": loss, **_live(model, opt)})
    loss = _train_step(model, opt, x, y)  # the step's graphs and its loss are still pending
    state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    side.save("xm.save of a checkpoint after AdamW step 3, before mark_step", state, tmp / "ck.pt")
    what = "checkpoint after AdamW step 3, then mark_step"
    side.mark_step(what)
    side.check(what, {"loss": loss, **_live(model, opt)})
    for i in range(3, 5):
        loss = _train_step(model, opt, x, y)
        side.mark_step(f"AdamW step {i + 1} after the checkpoint, then mark_step")
        side.check(f"AdamW step {i + 1} after the checkpoint", {"loss": loss, **_live(model, opt)})
    saved = torch.load(tmp / "ck.pt", weights_only=True)
    side.check("torch.load of the checkpoint", _saved_tensors(saved))
    model = _model().to(side.device)  # a fresh model and optimizer take the checkpoint
    opt = _optimizer("AdamW", model)
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["optimizer"])
    side.mark_step("load_state_dict of the checkpoint, then mark_step")
    side.check("load_state_dict of the checkpoint", _live(model, opt))
    loss = _train_step(model, opt, x, y)
    side.mark_step("AdamW step 4 from the checkpoint, then mark_step")
    side.check("AdamW step 4 from the checkpoint", {"loss": loss, **_live(model, opt)})


def _saved_tensors(data: Any, prefix: str = "saved") -> dict[str, torch.Tensor]:
    """The tensors of a loaded checkpoint by their path in it (xm.save turns the tuples of a
    state_dict into lists, torch.save does not: only the tensors are compared)."""
    if isinstance(data, torch.Tensor):
        return {prefix: data}
    items = data.items() if isinstance(data, dict) else enumerate(data)
    out: dict[str, torch.Tensor] = {}
    for key, value in items:
        if isinstance(value, (torch.Tensor, dict, list, tuple)):
            out.update(_saved_tensors(value, f"{prefix}.{key}"))
    return out


def test_donation_checkpoint_mid_training(device, xla, tmp_path):
    """A checkpoint (xm.save of the state_dicts) saved after an optimizer step, before its
    mark_step, training goes on; the checkpoint loads into a fresh model and trains on."""
    run_lockstep(_checkpoint, device, xla, tmp_path)

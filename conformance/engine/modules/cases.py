"""The module cases: one per (ModuleInfo of torch's `module_db` or the suite's own module spec,
engine/modules/suite_specs.py; dtype, train/eval, memory format, sample of its
`module_inputs_func`), named
`<module>-<dtype>-<train|eval>-<memory format>-<sample>` (`nn.BatchNorm2d-float32-train-
channels_last-0`).

Selections: `core` (the default run: float32, the first `CORE_SAMPLES` samples of each module in
train and in eval, each also in channels_last where its input is 4-d or 5-d) and `full` (a run
that names conformance/modules alone, and the nightly: every dtype the ModuleInfo lists that the
run's --dtypes names, every sample). Importing `module_db` costs seconds, so the case list of a
torch version is cached (a narrow `-k` run reads it and imports nothing).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from conformance.engine.testing_internals import import_testing

SELECTIONS = ("core", "full")
CORE_SAMPLES = 2  # samples per module and train/eval in the core selection
#: the memory format a sample's leading input of that many dimensions is also run in
CHANNELS_LAST = {4: "channels_last", 5: "channels_last_3d"}
MEMORY_FORMATS = {
    "contiguous": torch.contiguous_format,
    "channels_last": torch.channels_last,
    "channels_last_3d": torch.channels_last_3d,
}


@dataclass(frozen=True)
class ModuleCase:
    """One module case: which ModuleInfo, dtype, mode and memory format, and which sample."""

    module: str  # the ModuleInfo's name: "nn.BatchNorm2d"
    dtype: str  # "float32"
    training: bool
    memory_format: str  # a key of MEMORY_FORMATS
    sample: int  # its index among the samples of (module, dtype, training)
    desc: str = field(default="", compare=False)  # the sample's description, if it has one

    def __str__(self) -> str:
        mode = "train" if self.training else "eval"
        return f"{self.module}-{self.dtype}-{mode}-{self.memory_format}-{self.sample}"

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @classmethod
    def parse(cls, case_id: str) -> ModuleCase:
        """The case an id names (ValueError if it names none)."""
        parts = case_id.rsplit("-", 4)
        if len(parts) != 5 or parts[2] not in ("train", "eval") or not parts[4].isdigit():
            raise ValueError(f"not a module case id: {case_id!r}")
        module, dtype, mode, memory_format, sample = parts
        if memory_format not in MEMORY_FORMATS:
            raise ValueError(f"not a module case id: {case_id!r} (memory format {memory_format})")
        return cls(module, dtype, mode == "train", memory_format, int(sample))


@functools.cache
def module_infos() -> dict[str, Any]:
    """torch's ModuleInfos by name (imports module_db: seconds), once per process, then the
    suite's own module specs whose names module_db lacks (engine/modules/suite_specs.py)."""
    module_db = import_testing("common_modules").module_db

    from conformance.engine.modules.suite_specs import SPECS

    infos = {info.name: info for info in module_db}
    return infos | {spec.name: spec for spec in SPECS if spec.name not in infos}


def samples(info: Any, dtype: torch.dtype, training: bool) -> list[Any]:
    """The ModuleInfo's samples (ModuleInput) on CPU for `dtype` and the mode."""
    return list(
        info.module_inputs_func(
            info, device="cpu", dtype=dtype, requires_grad=True, training=training
        )
    )


def leading_input(sample: Any) -> torch.Tensor | None:
    """The first tensor argument of a sample's forward call (what a memory format applies to)."""
    args = list(sample.forward_input.args) + list(sample.forward_input.kwargs.values())
    return next((a for a in args if isinstance(a, torch.Tensor)), None)


def enumerate_cases(selection: str, dtypes: list[torch.dtype]) -> tuple[list[ModuleCase], dict]:
    """Every case of the selection, and the modules that have none, with why."""
    cases: list[ModuleCase] = []
    without: dict[str, str] = {}
    for name, info in module_infos().items():
        chosen = [d for d in info.dtypes if d in dtypes]
        if selection == "core":
            chosen = [d for d in chosen if d == torch.float32]
        if not chosen:
            listed = ", ".join(str(d).removeprefix("torch.") for d in info.dtypes)
            without[name] = f"none of its dtypes ({listed}) is in this selection"
            continue
        found = 0
        for dtype in chosen:
            for training in (True, False):
                try:
                    inputs = samples(info, dtype, training)
                except Exception as exc:  # noqa: BLE001 - torch's own sample function failed
                    without[name] = f"its module_inputs_func raised {type(exc).__name__}: {exc}"
                    continue
                if selection == "core":
                    inputs = inputs[:CORE_SAMPLES]
                for index, sample in enumerate(inputs):
                    found += 1
                    desc = str(getattr(sample, "desc", "") or "")
                    dtype_name = str(dtype).removeprefix("torch.")
                    case = ModuleCase(name, dtype_name, training, "contiguous", index, desc)
                    cases.append(case)
                    first = leading_input(sample)
                    layout = CHANNELS_LAST.get(first.dim()) if first is not None else None
                    if layout is not None:
                        cases.append(ModuleCase(name, dtype_name, training, layout, index, desc))
        if not found and name not in without:
            without[name] = "its module_inputs_func gives no sample"
    return cases, without


def _cache_path(cache_dir: str, selection: str, dtypes: list[torch.dtype]) -> str:
    with open(__file__, "rb") as f:
        digest = hashlib.sha1(f.read())
    digest.update(f"{selection}:{sorted(map(str, dtypes))}".encode())
    folder = os.path.join(cache_dir, f"modules-{torch.__version__}")
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"cases-{digest.hexdigest()[:12]}.json")


def cached_cases(
    selection: str, dtypes: list[torch.dtype], cache_dir: str | None
) -> tuple[list[ModuleCase], dict]:
    """`enumerate_cases`, read from the cache of this torch version where it holds them."""
    path = _cache_path(cache_dir, selection, dtypes) if cache_dir else None
    if path and os.path.exists(path):
        try:
            with open(path) as f:
                data = json.load(f)
            cases = [ModuleCase(**c) for c in data["cases"]]
            return cases, dict(data["without"])
        except (OSError, ValueError, KeyError, TypeError):  # a torn file: compute again
            pass
    cases, without = enumerate_cases(selection, dtypes)
    if path:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"cases": [vars(c) for c in cases], "without": without}, f)
        os.replace(tmp, path)
    return cases, without

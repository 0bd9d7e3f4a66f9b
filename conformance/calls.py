"""A `Call`: one invocation of one aten overload with concrete CPU arguments."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map


@dataclass
class Call:
    """Arguments for one aten overload, as CPU values (tensors contiguous)."""

    overload: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    # positional indices of tensor args that stay on CPU in the device run (e.g. _copy_from)
    cpu_args: frozenset[int] = frozenset()

    def tensors(self) -> list[torch.Tensor]:
        leaves, _ = tree_flatten((self.args, self.kwargs))
        return [x for x in leaves if isinstance(x, torch.Tensor)]

    def signature(self) -> str:
        """A short description used to deduplicate samples and in failure messages."""

        def describe(x: Any) -> Any:
            if isinstance(x, torch.Tensor):
                return f"{str(x.dtype).removeprefix('torch.')}{list(x.shape)}"
            return x

        args = tree_map(describe, self.args)
        kwargs = tree_map(describe, self.kwargs)
        parts = [str(a) for a in args] + [f"{k}={v}" for k, v in kwargs.items()]
        return f"{self.overload}({', '.join(parts)})"


def clone_tree(tree: Any) -> Any:
    """Deep-copy every tensor in a pytree as a contiguous, detached CPU tensor."""
    return tree_map(
        lambda x: x.detach().clone().contiguous() if isinstance(x, torch.Tensor) else x, tree
    )


def map_tensors(fn: Callable[[torch.Tensor], Any], tree: Any) -> Any:
    return tree_map(lambda x: fn(x) if isinstance(x, torch.Tensor) else x, tree)

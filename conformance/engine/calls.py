"""A `Call`: one invocation of one aten overload with concrete CPU arguments."""

from __future__ import annotations

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
            if isinstance(x, torch.UntypedStorage):
                return f"Storage[{x.nbytes()} bytes]"
            return x

        args = [tree_map(describe, a) for a in self.args]
        for i in self.cpu_args:  # which tensors stay on CPU is part of the call (copy direction)
            if i < len(args):
                args[i] = tree_map(lambda x: f"{x}@cpu", args[i])
        kwargs = tree_map(describe, self.kwargs)
        return format_call(self.overload, args, kwargs)


def clone_tree(tree: Any) -> Any:
    """Deep-copy every tensor in a pytree as a contiguous, detached CPU tensor."""
    return tree_map(
        lambda x: x.detach().clone().contiguous() if isinstance(x, torch.Tensor) else x, tree
    )


def format_call(overload: str, args: Any, kwargs: dict) -> str:
    """'op(a, b, k=v)' from already-described arguments."""
    parts = [str(a) for a in args] + [f"{k}={v}" for k, v in kwargs.items()]
    return f"{overload}({', '.join(parts)})"

"""What a collectives case is, and which cases a run collects.

A case: one collective with one reduce op (`none` for those that reduce nothing), one dtype, one
element count per rank tensor, one layout of the input tensors, one world size and one mode
(`sync`, or `async_op=True` completed by `wait`, by polling `is_completed`, or by the
`get_future`). Its id: `all_reduce-AVG-float32-33-contiguous-w2-sync`.

Selections: `core` (every collective once: the default run), `default` (every collective x op x
dtype at one size, the size sweep and the layouts at a few dtypes, world sizes 3 and 4 and the
async modes on a core set: minutes), `full` (the whole product: a nightly).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from conformance.errors import ConformanceUsageError


@dataclass(frozen=True)
class Collective:
    """One collective as the suite calls it (ranks.py)."""

    name: str
    reduces: bool = False  # takes a reduce op
    rooted: bool = False  # has a src/dst rank (the last rank: a root other than 0)
    uneven: bool = False  # has per-peer split sizes (the `uneven` layout)
    data: bool = True  # moves tensors (barrier does not)


COLLECTIVES: tuple[Collective, ...] = (
    Collective("all_reduce", reduces=True),
    Collective("broadcast", rooted=True),
    Collective("reduce", reduces=True, rooted=True),
    Collective("all_gather"),
    Collective("all_gather_into_tensor"),
    Collective("reduce_scatter", reduces=True),
    Collective("reduce_scatter_tensor", reduces=True),
    Collective("all_to_all", uneven=True),
    Collective("all_to_all_single", uneven=True),
    Collective("gather", rooted=True),
    Collective("scatter", rooted=True),
    Collective("send_recv"),
    Collective("batch_isend_irecv"),
    Collective("barrier", data=False),
    Collective("all_reduce_coalesced", reduces=True),
    Collective("all_gather_into_tensor_coalesced"),
    Collective("reduce_scatter_tensor_coalesced", reduces=True),
)
BY_NAME: dict[str, Collective] = {c.name: c for c in COLLECTIVES}
NO_OP = "none"
REDUCE_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "AVG", "PREMUL_SUM", "BAND", "BOR", "BXOR")
PREMUL_FACTOR = 0.5  # PREMUL_SUM's factor (exact in every floating dtype)
DTYPES = (
    "float32",
    "float64",
    "float16",
    "bfloat16",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool",
    "complex64",
    "complex128",
)
LAYOUTS = ("contiguous", "transposed", "sliced", "offset", "uneven")
LAYOUT_HELP = {
    "contiguous": "a fresh contiguous tensor",
    "transposed": "a (p, n/p) tensor's transpose (sizes with a factor only)",
    "sliced": "every other element of a buffer twice as long (stride 2)",
    "offset": "a view 3 elements into its buffer (storage offset 3)",
    "uneven": "all_to_all with split sizes that differ per peer (n + (src + 2 dst) % 3)",
}
MODES = ("sync", "wait", "poll", "future")
MODE_HELP = {
    "sync": "the blocking call",
    "wait": "async_op=True, then Work.wait",
    "poll": "async_op=True, then Work.is_completed polled until True, no wait",
    "future": "async_op=True, then Work.get_future and its wait",
}
SELECTIONS = ("core", "default", "full")
WORLD_SIZES = (2, 3, 4)
SIZE = 33  # the one size of "every collective x op x dtype"
SWEEP = (0, 1, 2, 3, 4, 5, 7, 13, 28, 29, 30, 31, 32, 33, 63, 64, 65, 1023, 1024, 1025, 65537)
FULL_SIZES = (*SWEEP, 1 << 20)
CORE_SET = ("all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor")
CORE_SET += ("all_to_all_single", "send_recv")


@dataclass(frozen=True, order=True)
class CollectiveCase:
    """One collectives case (see the module docstring)."""

    collective: str
    op: str
    dtype: str
    size: int
    layout: str
    world: int
    mode: str

    def __str__(self) -> str:
        return (
            f"{self.collective}-{self.op}-{self.dtype}-{self.size}-{self.layout}-"
            f"w{self.world}-{self.mode}"
        )

    @classmethod
    def parse(cls, text: str) -> CollectiveCase:
        """A case from its id (or a pytest name ending in `[<id>]`)."""
        if text.endswith("]") and "[" in text:
            text = text[text.index("[") + 1 : -1]
        parts = text.split("-")
        ok = len(parts) == 7 and parts[3].isdigit() and parts[5][1:].isdigit()
        if not ok or parts[0] not in BY_NAME:
            raise ValueError(f"not a collectives case id: {text!r}")
        c, op, dtype, size, layout, world, mode = parts
        return cls(c, op, dtype, int(size), layout, int(world[1:]), mode)

    @property
    def spec(self) -> Collective:
        return BY_NAME[self.collective]

    @property
    def root(self) -> int:
        """The src/dst rank of a rooted collective: the last rank."""
        return self.world - 1

    @property
    def is_async(self) -> bool:
        return self.mode != "sync"

    def describe(self) -> str:
        """`all_reduce AVG float32, 33 elements, 'contiguous', world 2, sync`."""
        op = f" {self.op}" if self.op != NO_OP else ""
        return (
            f"{self.collective}{op} {self.dtype}, {self.size} elements, '{self.layout}', "
            f"world {self.world}, {MODE_HELP[self.mode]}"
        )


def factor(n: int) -> int | None:
    """The smallest factor 1 < p < n of n (the transposed layout's rows), or None."""
    for p in range(2, math.isqrt(n) + 1):
        if n % p == 0:
            return p
    return None


def applies(c: Collective, op: str, dtype: str, size: int, layout: str, mode: str) -> bool:
    """Whether the combination is a case at all (not whether the backend accepts it)."""
    if (op == NO_OP) == c.reduces:
        return False
    if not c.data:
        return dtype == "float32" and size == 0 and layout == "contiguous"
    if mode in ("poll", "future") and (c.name.endswith("_coalesced") or c.name == "barrier"):
        return False  # a coalescing manager's Work has wait() only
    if layout == "uneven" and not c.uneven:
        return False
    if layout == "transposed" and factor(size) is None:
        return False
    if layout == "transposed" and c.name == "all_to_all_single":
        return False  # its split sizes count dim-0 rows: a 2-D input is another call, not a layout
    return True


def _cases(collectives, ops, dtypes, sizes, layouts, worlds, modes) -> list[CollectiveCase]:
    out = []
    for name in collectives:
        c = BY_NAME[name]
        for op in ops if c.reduces else (NO_OP,):
            for dtype in dtypes if c.data else ("float32",):
                for size in sizes if c.data else (0,):
                    for layout in layouts:
                        for world in worlds:
                            for mode in modes:
                                if applies(c, op, dtype, size, layout, mode):
                                    out.append(
                                        CollectiveCase(name, op, dtype, size, layout, world, mode)
                                    )
    return out


def selection(name: str, worlds: tuple[int, ...] = WORLD_SIZES) -> list[CollectiveCase]:
    """The cases of a selection (`core`, `default` or `full`) at these world sizes, in a
    stable order (by world size first: a world serves a run of cases)."""
    every = tuple(c.name for c in COLLECTIVES)
    first = (min(worlds),)
    one = ("float32",), (SIZE,), ("contiguous",), first
    if name == "full":
        cases = _cases(every, REDUCE_OPS, DTYPES, FULL_SIZES, LAYOUTS, worlds, MODES)
    elif name == "core":
        cases = _cases(every, ("SUM",), *one, ("sync",))
        cases += _cases(("all_reduce",), ("AVG",), *one, ("sync",))
        cases += _cases(("all_reduce",), ("SUM",), *one, ("wait",))
    elif name == "default":
        cases = _default(worlds)
    else:
        raise ConformanceUsageError(
            f"--collectives-set {name!r}: valid values are {', '.join(SELECTIONS)}"
        )
    return sorted(set(cases), key=lambda c: (c.world, _order(c)))


def _default(worlds: tuple[int, ...]) -> list[CollectiveCase]:
    """Everything at the smallest world size; the other world sizes on a core set."""
    every = tuple(c.name for c in COLLECTIVES)
    contiguous, w2 = ("contiguous",), (min(worlds),)
    others, last = tuple(w for w in worlds if w != w2[0]), (max(worlds),)
    cases = _cases(every, REDUCE_OPS, DTYPES, (SIZE,), contiguous, w2, ("sync",))
    # the size sweep: float32 at every size (SUM and AVG), int32 at the tile edges
    cases += _cases(every, ("SUM", "AVG"), ("float32",), SWEEP, contiguous, w2, ("sync",))
    cases += _cases(
        every, ("SUM",), ("int32",), (0, 1, 31, 32, 33, 1025), contiguous, w2, ("sync",)
    )
    # the layouts at a float and an integer dtype
    cases += _cases(every, ("SUM",), ("float32", "int64"), (6, SIZE, 1024), LAYOUTS, w2, ("sync",))
    # world sizes 3 and 4, and the async modes, on a core set
    core_ops = ("SUM", "AVG", "MAX")
    cases += _cases(every, core_ops, ("float32",), (SIZE, 1025), contiguous, others, ("sync",))
    cases += _cases(every, ("SUM",), ("float32",), (SIZE, 1025), contiguous, w2, MODES[1:])
    cases += _cases(CORE_SET, ("SUM",), ("float32",), (SIZE,), contiguous, last, ("wait",))
    return cases


def _order(case: CollectiveCase) -> tuple[object, ...]:
    return (
        [c.name for c in COLLECTIVES].index(case.collective),
        case.op,
        case.dtype,
        case.size,
        case.layout,
        case.mode,
    )


def parse_worlds(text: str) -> tuple[int, ...]:
    """`--world-sizes 2,3,4`: world sizes of at least 2."""
    try:
        worlds = tuple(int(w) for w in text.split(",") if w.strip())
    except ValueError:
        worlds = ()
    if not worlds or any(w < 2 for w in worlds):
        raise ConformanceUsageError(
            f"--world-sizes {text!r}: give comma-separated world sizes of at least 2, e.g. 2,3,4"
        )
    return worlds

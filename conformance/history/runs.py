"""The runs of a store as a question sees them: shards of one run joined into one RunGroup, the
cells a store holds, and a case name resolved from what a user types."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from conformance.errors import ConformanceUsageError
from conformance.history.rows import seconds_between
from conformance.history.schema import CASE_NAMES, RUNS
from conformance.record import FAILING, Status

#: statuses that count against a case (a flake needs one of these and one of GOOD)
BAD: frozenset[str] = frozenset(s.value for s in FAILING)
#: statuses that count for it: compared and held, or failed as the manifest expects
GOOD: frozenset[str] = frozenset({Status.PASSED.value, Status.XFAILED.value})


def flips(outcomes: list[bool]) -> int:
    """How often a sequence of yes/no turned (failing or not, present or not)."""
    return sum(a != b for a, b in zip(outcomes, outcomes[1:], strict=False))


class QuestionError(ConformanceUsageError):
    """A question the store cannot answer as asked (unknown cell or case: one line)."""


@dataclass
class RunGroup:
    """One run of a cell: its shards' rows (a whole run has one)."""

    group: str
    cell: str
    started: str
    finished: str | None
    torch: str
    torch_git: str
    backend_version: str
    allocator: str
    configuration: str
    run_ids: list[int] = field(default_factory=list)
    shards: list[int] = field(default_factory=list)
    shard_count: int | None = None
    cases: int = 0
    machine_s: float = 0.0  # the shards' run times added up
    exitstatus: int | None = None
    pruned: bool = False  # its case rows were dropped (`prune`): only its times and findings

    @property
    def wall_s(self) -> float | None:
        """From the first shard's start to the last one's end (None: a shard did not end)."""
        return seconds_between(self.started, self.finished)

    @property
    def cases_per_s(self) -> float | None:
        wall = self.wall_s
        return self.cases / wall if wall else None

    @property
    def label(self) -> str:
        """`2026-11-30 02:15:07 torch 2.13.0+cpu`."""
        return f"{self.started[:19].replace('T', ' ')} torch {self.torch}"

    @property
    def missing_shards(self) -> list[int]:
        if not self.shard_count or not self.shards:
            return []
        return [i for i in range(1, self.shard_count + 1) if i not in self.shards]


class Runs:
    """The runs of a store, read once per question session (``conn``: an open connection)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        groups: dict[str, RunGroup] = {}
        for row in conn.execute(select(RUNS).order_by(RUNS.c.started, RUNS.c.id)):
            group = groups.get(row.run_group)
            if group is None:
                group = groups[row.run_group] = RunGroup(
                    row.run_group, row.cell, row.started, row.finished, row.torch,
                    row.torch_git, row.backend_version, row.allocator, row.configuration,
                    shard_count=row.shard_count,
                )  # fmt: skip
            group.run_ids.append(row.id)
            group.pruned = group.pruned or bool(row.pruned)
            if row.shard_index is not None:
                group.shards.append(row.shard_index)
            group.cases += row.cases
            group.machine_s += row.wall_s or 0.0
            if row.exitstatus is not None:
                group.exitstatus = max(group.exitstatus or 0, row.exitstatus)
            if group.finished is not None:
                ends = (group.finished, row.finished)
                group.finished = max(ends) if row.finished else None
        self.groups = sorted(groups.values(), key=lambda g: (g.started, g.group))
        self.of_run = {run_id: g for g in self.groups for run_id in g.run_ids}

    def cells(self) -> list[str]:
        """The cells the store holds, by name."""
        return sorted({g.cell for g in self.groups})

    def of_cell(self, cell: str, with_cases: bool = True) -> list[RunGroup]:
        """The cell's runs, oldest first (``with_cases``: only those whose cases are kept)."""
        return [g for g in self.groups if g.cell == cell and not (with_cases and g.pruned)]

    def cell(self, cell: str | None) -> str:
        """``cell``, checked; None where the store holds one cell names it."""
        cells = self.cells()
        if not cells:
            raise QuestionError("the store holds no runs yet: append one with `add RESULTS`")
        if cell is None:
            if len(cells) == 1:
                return cells[0]
            raise QuestionError(
                f"the store holds {len(cells)} cells: pick one with --cell ({_few(cells)})"
            )
        if cell not in cells:
            raise QuestionError(f"no runs of cell {cell!r} in the store (it holds {_few(cells)})")
        return cell

    def case(self, typed: str) -> tuple[int, str]:
        """The id and name of the case ``typed`` names: its whole id, or a part of exactly one
        case id (`add.Tensor-float32-contiguous-native`)."""
        like = typed.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        for whole in (
            CASE_NAMES.c.name == typed,
            CASE_NAMES.c.name.like(f"%[{like}]", escape="\\"),
        ):
            exact = list(
                self.conn.execute(select(CASE_NAMES.c.id, CASE_NAMES.c.name).where(whole).limit(2))
            )
            if len(exact) == 1:  # the whole id, or the whole of its parameters
                return exact[0].id, exact[0].name
        query = (
            select(CASE_NAMES.c.id, CASE_NAMES.c.name)
            .where(CASE_NAMES.c.name.like(f"%{like}%", escape="\\"))
            .order_by(func.length(CASE_NAMES.c.name))
            .limit(6)
        )
        found = list(self.conn.execute(query))
        if len(found) == 1:
            return found[0].id, found[0].name
        if not found:
            raise QuestionError(
                f"no case in the store matches {typed!r}: give a case id as the results name it"
            )
        names = _few([r.name for r in found[:5]])
        raise QuestionError(f"{typed!r} matches several cases ({names}): give the whole case id")


def _few(names: list[str]) -> str:
    shown = ", ".join(names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")

"""Aggregations shared by the Markdown and HTML reports: counts per op/layout and the grid."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from conformance.report.load import FAILING, Case, Run, status_rank, worst_status

__all__ = ["Grid", "GridCell", "build_grid", "counts_by", "ordered"]

_DTYPE_ORDER = (
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
)
_LAYOUT_FIRST = ("contiguous",)


def ordered(values: Iterable[str], first: tuple[str, ...] = ()) -> list[str]:
    """Distinct ``values``: those in ``first`` in that order, then the rest sorted."""
    distinct = set(values)
    head = [v for v in first if v in distinct]
    return head + sorted(distinct - set(head))


def counts_by(cases: Iterable[Case], key: str) -> dict[str, Counter[str]]:
    """Status counts per value of ``key`` (``op_name`` or ``layout`` ...), problem rows first."""
    table: dict[str, Counter[str]] = {}
    for case in cases:
        table.setdefault(getattr(case, key), Counter())[case.status] += 1

    def rank(item: tuple[str, Counter[str]]) -> tuple[int, str]:
        name, counts = item
        bad = sum(n for s, n in counts.items() if s in FAILING)
        return (0 if bad else 1, name)

    return dict(sorted(table.items(), key=rank))


def family_rows(runs: Sequence[Run]) -> dict[str, list[tuple[Run, Case]]]:
    """The cases of each family besides the op cases, across the runs, in order: the report's
    sections besides the grid."""
    rows: dict[str, list[tuple[Run, Case]]] = {}
    for run in runs:
        for family, cases in run.family_cases().items():
            rows.setdefault(family, []).extend((run, c) for c in cases)
    return rows


def family_tables(runs: Sequence[Run]) -> dict[str, tuple[list[str], list[tuple[Run, dict]]]]:
    """The table a family's cases carry, one row each (`extra["table"]`: the autocast policy
    table), by family: (its columns, in the first row's order; (run, row) for every case)."""
    tables: dict[str, tuple[list[str], list[tuple[Run, dict]]]] = {}
    for family, found in family_rows(runs).items():
        rows = [
            (run, c.extra["table"]) for run, c in found if isinstance(c.extra.get("table"), dict)
        ]
        if rows:
            tables[family] = (list(rows[0][1]), rows)
    return tables


@dataclass(frozen=True)
class GridCell:
    """One (op, dtype, layout) of the grid: the worst status over its paths and its cases."""

    op: str
    dtype: str
    layout: str
    status: str
    cases: tuple[Case, ...]

    @property
    def detail(self) -> str:
        """One line per path: ``native: failed [memory] message``."""
        lines = []
        for c in self.cases:
            check = f" [{c.check}]" if c.check else ""
            msg = f" {c.message}" if c.message else ""
            lines.append(f"{c.path}: {c.status}{check}{msg}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Grid:
    """The op x dtype x layout grid of one run; ``cells`` only holds combinations with results."""

    ops: list[str]
    dtypes: list[str]
    layouts: list[str]
    cells: dict[tuple[str, str, str], GridCell]

    def cell(self, op: str, dtype: str, layout: str) -> GridCell | None:
        """The cell at (op, dtype, layout), or ``None`` if no case ran there."""
        return self.cells.get((op, dtype, layout))

    def row_status(self, op: str) -> str:
        """The worst status of an op's row."""
        return worst_status(c.status for (o, _, _), c in self.cells.items() if o == op)


def build_grid(run: Run) -> Grid:
    """Group the run's cases by (op, dtype, layout); the cell status is the worst over paths."""
    groups: dict[tuple[str, str, str], list[Case]] = {}
    for case in run.op_cases():
        groups.setdefault((case.op_name, case.dtype, case.layout), []).append(case)
    cells = {
        key: GridCell(
            op=key[0],
            dtype=key[1],
            layout=key[2],
            status=worst_status(c.status for c in cases),
            cases=tuple(sorted(cases, key=lambda c: (status_rank(c.status), c.path))),
        )
        for key, cases in groups.items()
    }
    return Grid(
        ops=sorted({k[0] for k in cells}),
        dtypes=ordered((k[1] for k in cells), _DTYPE_ORDER),
        layouts=ordered((k[2] for k in cells), _LAYOUT_FIRST),
        cells=cells,
    )

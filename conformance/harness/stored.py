"""`--store`: the run's results appended to the results store (conformance/history) at its end,
once run.json is written. A store that cannot take them costs one line of the summary, never a
verdict or the exit status; SQLAlchemy is imported only when the option is given."""

from __future__ import annotations

from pathlib import Path

from conformance.errors import ConformanceUsageError


def append_run(where: str, results: str | Path) -> str:
    """Append the results folder to the store at ``where``; the summary's line about it."""
    from conformance.history.store import Store
    from conformance.report.load import load_run

    try:
        with Store(where) as store:
            done = store.append(load_run(results))
    except ConformanceUsageError as exc:
        return f"conformance: the results store did not take this run: {exc}"
    return (
        f"conformance: results appended to the store {store.where} ({done.cases} cases): "
        f"python -m conformance.history --store {where} changes"
    )

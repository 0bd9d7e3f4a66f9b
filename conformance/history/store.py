"""The results store: a SQLite file by default, any SQL server through its URL.

SQLAlchemy speaks to both with one set of queries (`schema.py`'s tables), so a team that already
runs PostgreSQL points ``--store postgresql://...`` at it and nothing else changes. Appending a
results folder is one transaction that holds the store's write lock (SQLite: ``BEGIN
IMMEDIATE``; PostgreSQL: a transaction-scoped advisory lock), so shards appending at once are
serialised and a shard joins its run's group exactly once. Appending the same folder twice adds
nothing. Errors (unreachable server, missing driver, newer schema) are one line naming the fix.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, func, select
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

from conformance.errors import ConformanceUsageError
from conformance.history.rows import RunRows, run_rows
from conformance.history.schema import (
    CASE_NAMES,
    FINDINGS,
    RESULTS,
    RUNS,
    chunks,
    prepare,
    write_lock,
)
from conformance.report.load import Run
from conformance.sharding import digest

#: shards of one run started within this long of each other join one group
SHARD_WINDOW = timedelta(hours=24)

DRIVERS = {"postgresql": "pip install 'psycopg[binary]' (and use postgresql+psycopg://...)"}


class StoreError(ConformanceUsageError):
    """The store cannot be opened or written (one line naming the fix)."""


@dataclass(frozen=True)
class Appended:
    """What appending one results folder did."""

    source: str
    run_id: int
    run_group: str
    cases: int
    new: bool  # False: the folder was in the store already, nothing added


def store_url(where: str) -> str:
    """A SQLAlchemy URL for ``where``: a URL as given (plain ``postgresql://`` through psycopg 3
    where psycopg2 is not installed), a file path as a SQLite database."""
    if "://" in where:
        if where.startswith("postgresql://") and _has("psycopg") and not _has("psycopg2"):
            return "postgresql+psycopg://" + where.removeprefix("postgresql://")
        return where
    path = Path(where).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    return (str(orig).strip().splitlines() or [type(orig).__name__])[0]


def _sqlite_locking(engine: Engine) -> None:
    """Let SQLAlchemy, not the sqlite3 module, begin transactions, and begin them IMMEDIATE:
    the write lock is taken when a writing transaction starts, so two appenders queue (busy
    timeout) instead of one failing on an upgrade from a read lock; readers begin deferred."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        # write-ahead log: a reader never blocks an appender's commit (in the rollback journal
        # a commit waits for every reader); the last connection to close folds the log back in
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:  # a reader (Store.reading) takes no write lock
        reader = conn.get_execution_options().get("reader")
        conn.exec_driver_sql("BEGIN" if reader else "BEGIN IMMEDIATE")


class Store:
    """An opened results store (``where``: a file path or a SQLAlchemy URL)."""

    def __init__(self, where: str) -> None:
        try:
            url = make_url(store_url(where))
        except (ArgumentError, ValueError) as exc:
            raise StoreError(f"--store {where}: not a path or a database URL ({exc})") from None
        self.where = url.render_as_string(hide_password=True)
        self.sqlite = url.get_backend_name() == "sqlite"
        try:
            if self.sqlite:
                self.engine = create_engine(url, connect_args={"timeout": 120})
                _sqlite_locking(self.engine)
            else:
                args = {"connect_timeout": 10} if url.get_backend_name() == "postgresql" else {}
                self.engine = create_engine(url, connect_args=args, pool_pre_ping=True)
        except (NoSuchModuleError, ModuleNotFoundError) as exc:
            fix = DRIVERS.get(url.get_backend_name(), "install its SQLAlchemy driver")
            raise StoreError(f"store {self.where}: no driver for it ({exc}): {fix}") from None
        try:
            with self.engine.begin() as conn:
                prepare(conn, self.where)
        except DBAPIError as exc:
            raise StoreError(
                f"cannot open the store {self.where}: {_first_line(exc)} (is the server up, "
                "the URL right, the file writable?)"
            ) from None

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A connection for the questions (one transaction)."""
        try:
            with self.engine.connect() as conn:
                yield conn.execution_options(reader=True)
        except DBAPIError as exc:
            raise StoreError(f"store {self.where}: {_first_line(exc)}") from None

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def append(self, run: Run, run_group: str | None = None) -> Appended:
        """Append one results folder (a run, a shard, or shards merged by the report's loader);
        ``run_group``: an id its shards share (CI's run id: with the cell, it names the run),
        else the run is worked out from the configuration and the start times."""
        added = datetime.now(timezone.utc).isoformat()  # noqa: UP017 (3.10 has no UTC)
        rows = run_rows(run, str(run.path), added)
        try:
            with self.engine.begin() as conn:
                return self._append(conn, rows, run_group)
        except SQLAlchemyError as exc:
            raise StoreError(
                f"store {self.where}: appending {run.path} failed, nothing of it was kept: "
                f"{_first_line(exc)}"
            ) from None

    def prune(self, keep_days: int) -> int:
        """Drop the case rows of runs started more than ``keep_days`` before the newest run
        (their run rows and findings stay: run times and finding timelines reach back);
        returns how many runs were pruned. SQLite's file shrinks (VACUUM)."""
        with self.engine.begin() as conn:
            newest = conn.execute(select(func.max(RUNS.c.started))).scalar()
            if newest is None:
                return 0
            cutoff = (datetime.fromisoformat(newest) - timedelta(days=keep_days)).isoformat()
            old = select(RUNS.c.id).where(RUNS.c.started < cutoff, RUNS.c.pruned == 0)
            ids = [row.id for row in conn.execute(old)]
            for chunk in chunks(ids):
                conn.execute(RESULTS.delete().where(RESULTS.c.run_id.in_(chunk)))
                conn.execute(RUNS.update().where(RUNS.c.id.in_(chunk)).values(pruned=1))
        if ids and self.sqlite:  # outside any transaction, so on the driver's connection
            raw = self.engine.raw_connection()
            try:
                raw.driver_connection.execute("VACUUM")
            finally:
                raw.close()
        return len(ids)

    def _append(self, conn: Connection, rows: RunRows, run_group: str | None) -> Appended:
        write_lock(conn)
        row, source = rows.run, rows.run["source"]
        old = conn.execute(select(RUNS.c.id, RUNS.c.run_group).where(RUNS.c.key == row["key"]))
        found = old.first()
        if found is not None:
            return Appended(source, found.id, found.run_group, row["cases"], new=False)
        group = digest([run_group, row["cell"]]) if run_group else self._group(conn, row)
        run_id = conn.execute(RUNS.insert().values(**row, run_group=group)).inserted_primary_key[0]
        ids = self._name_ids(conn, rows.names)
        results = [
            {**result, "run_id": run_id, "case_id": ids[name]}
            for name, result in rows.results.items()
        ]
        if results:
            conn.execute(RESULTS.insert(), results)
        if rows.findings:
            conn.execute(FINDINGS.insert(), [{**f, "run_id": run_id} for f in rows.findings])
        return Appended(source, run_id, group, len(results), new=True)

    @staticmethod
    def _group(conn: Connection, row: dict[str, Any]) -> str:
        """The group of a shard: the latest group of the same configuration and shard count,
        started within SHARD_WINDOW, that lacks this shard; else a group of its own."""
        if row["shard_index"] is None:
            return row["key"]
        started = datetime.fromisoformat(row["started"])
        query = (
            select(RUNS.c.run_group, RUNS.c.shard_index, RUNS.c.started)
            .where(RUNS.c.configuration == row["configuration"])
            .where(RUNS.c.shard_count == row["shard_count"])
            .where(RUNS.c.shard_index.is_not(None))
            .order_by(RUNS.c.started.desc())
        )
        taken: dict[str, set[int]] = {}
        for group, index, when in conn.execute(query):
            if abs(datetime.fromisoformat(when) - started) <= SHARD_WINDOW:
                taken.setdefault(group, set()).add(index)
        for group, indices in taken.items():
            if row["shard_index"] not in indices:
                return group
        return row["key"]

    @staticmethod
    def _name_ids(conn: Connection, names: dict[str, dict[str, str]]) -> dict[str, int]:
        """Each case name's id, adding the names the store has not seen."""

        def look_up(wanted: list[str]) -> None:
            for chunk in chunks(wanted):
                query = select(CASE_NAMES.c.name, CASE_NAMES.c.id)
                rows = conn.execute(query.where(CASE_NAMES.c.name.in_(chunk)))
                ids.update((name, id_) for name, id_ in rows)

        ids: dict[str, int] = {}
        look_up(list(names))
        new = [n for n in names if n not in ids]
        if new:  # the write lock is held: no other appender adds names meanwhile
            conn.execute(CASE_NAMES.insert(), [names[n] for n in new])
            look_up(new)
        return ids

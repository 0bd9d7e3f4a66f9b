"""The results store's tables, its schema version and the migrations between versions.

One ``store_info`` row holds the schema version. A store written by an older suite is migrated in
place (``MIGRATIONS``: version -> the step to the next); a store of a newer schema is refused with
one line, so an old checkout never half-writes what it does not understand. The tables:

- ``runs``: one row per appended results folder (a whole run or one shard of it); ``run_group``
  ties the shards of one run together; ``configuration`` is what must be equal for two runs to be
  evidence of a flake (torch commit, backend version, cell, the backend's environment, checkers).
- ``case_names``: each case id once, with what the questions group by (family, op, dtype, ...).
- ``results``: one row per case of a run: status, check, finding, duration, first message line.
- ``findings``: the run's root causes (conformance/findings.py) with their ids, stable across runs.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import Connection

from conformance.errors import ConformanceUsageError

#: the schema this suite writes; bump it with a step in MIGRATIONS
SCHEMA_VERSION = 1

METADATA = MetaData()

STORE_INFO = Table(
    "store_info",
    METADATA,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

RUNS = Table(
    "runs",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key", String(64), nullable=False, unique=True),  # the folder's identity: no twice
    Column("run_group", String(64), nullable=False, index=True),  # the shards of one run
    Column("started", String(40), nullable=False),  # ISO 8601, UTC
    Column("finished", String(40)),  # null: the run did not finish
    Column("cell", String(200), nullable=False),  # the session: conformance-2.8-guard
    Column("torch", String(80), nullable=False),
    Column("torch_git", String(64), nullable=False),
    Column("backend", String(200), nullable=False),
    Column("backend_version", String(200), nullable=False),
    Column("device", String(80), nullable=False),
    Column("allocator", String(80), nullable=False),
    Column("python", String(40), nullable=False),
    Column("configuration", String(32), nullable=False, index=True),
    Column("environment", Text, nullable=False),  # JSON: the backend's variables, checkers
    Column("shard_index", Integer),  # null: a whole run (or shards merged before appending)
    Column("shard_count", Integer),
    Column("exitstatus", Integer),
    Column("wall_s", Float),
    Column("cases", Integer, nullable=False),
    Column("collected", Integer),
    Column("pruned", Integer, nullable=False, default=0),  # 1: its case rows were dropped
    Column("registered", Text, nullable=False, default="[]"),  # JSON: the backend's overloads
    Column("source", Text, nullable=False),  # the folder it was read from
    Column("added", String(40), nullable=False),
)

CASE_NAMES = Table(
    "case_names",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", Text, nullable=False, unique=True),
    Column("family", String(40), nullable=False),
    Column("op", String(200), nullable=False),
    Column("dtype", String(40), nullable=False),
    Column("layout", String(80), nullable=False),
    Column("path", String(80), nullable=False),
)

RESULTS = Table(
    "results",
    METADATA,
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("case_id", Integer, ForeignKey("case_names.id"), primary_key=True),
    Column("status", String(20), nullable=False),
    Column("check_name", String(80)),
    Column("finding", String(16)),
    Column("duration", Float),
    Column("message", Text),  # the first line, for failing cases only
    Index("results_case", "case_id"),
    sqlite_with_rowid=False,  # the key is the row: half the size of a rowid table and its index
)

FINDINGS = Table(
    "findings",
    METADATA,
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("finding", String(16), primary_key=True),
    Column("title", Text, nullable=False),
    Column("check_name", String(80)),
    Column("cases", Integer, nullable=False),
    Column("ops", Text, nullable=False),  # JSON list
    Column("representative", Text, nullable=False),
    Column("repro", Text, nullable=False),
    Column("message", Text),
)

#: the PostgreSQL advisory lock that serialises a store's writers (any constant: it names it)
PG_LOCK = 0x7C0F0A11
#: ids or names looked up per query (SQLite allows at least 999 parameters)
CHUNK = 500
#: version -> the step that takes a store of that version to the next one
MIGRATIONS: dict[int, Callable[[Connection], None]] = {}


class StoreSchemaError(ConformanceUsageError):
    """A store this suite cannot use as it is (newer schema, unknown tables)."""


def write_lock(conn: Connection) -> None:
    """Hold the store's write lock for the rest of the transaction (PostgreSQL's advisory
    lock; a SQLite transaction holds it from BEGIN IMMEDIATE: store.py)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_LOCK})


def chunks(values: list, size: int = CHUNK) -> list[list]:
    """``values`` in pieces a query's IN list can take."""
    return [values[start : start + size] for start in range(0, len(values), size)]


def stored_version(conn: Connection) -> int | None:
    """The store's schema version; None for an empty database."""
    if not inspect(conn).has_table(STORE_INFO.name):
        return None
    row = conn.execute(
        select(STORE_INFO.c.value).where(STORE_INFO.c.key == "schema_version")
    ).first()
    return int(row[0]) if row else None


def prepare(conn: Connection, where: str) -> int:
    """Create the tables of an empty store, migrate an older one; returns the version found
    (0: an empty store). Raises StoreSchemaError for a newer store."""
    write_lock(conn)  # two first opens at once: one creates the tables
    found = version = stored_version(conn)
    if version is None:
        METADATA.create_all(conn)
        conn.execute(STORE_INFO.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))
        return 0
    if version > SCHEMA_VERSION:
        raise StoreSchemaError(
            f"the store {where} has schema {version}, newer than this suite's "
            f"{SCHEMA_VERSION}: upgrade torch-conformance (pip install -U torch-conformance) "
            "or use another store"
        )
    while version < SCHEMA_VERSION:
        MIGRATIONS[version](conn)
        version += 1
        conn.execute(
            STORE_INFO.update()
            .where(STORE_INFO.c.key == "schema_version")
            .values(value=str(version))
        )
    return found

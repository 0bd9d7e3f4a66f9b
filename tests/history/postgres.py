"""A throwaway PostgreSQL server for the store's tests: initdb and pg_ctl in a temporary folder,
on a free loopback port, as the `postgres` user where the tests run as root (the server refuses
root). Where no server binaries or no psycopg are found, the test says why it skipped."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def postgres_server() -> Iterator[str]:
    """A running server; yields its SQLAlchemy URL. Skips the test where none can start."""
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    if not (initdb and pg_ctl):
        pytest.skip("no PostgreSQL server here (initdb, pg_ctl): install postgresql to run this")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed: pip install 'psycopg[binary]'")
    as_user: list[str] = []
    folder = tempfile.mkdtemp(prefix="conformance-pg-")
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root, and no 'postgres' user to run the server as")
        os.chown(folder, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = os.path.join(folder, "data"), _free_port()
    run = dict(check=True, capture_output=True, text=True, timeout=120)
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
    log = os.path.join(folder, "server.log")
    try:
        subprocess.run(
            [*as_user, initdb, "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"], **run
        )
        start = [*as_user, pg_ctl, "-D", data, "-o", options, "-l", log, "-w", "start"]
        subprocess.run(start, **run)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        shutil.rmtree(folder, ignore_errors=True)
        said = (getattr(exc, "stderr", "") or str(exc)).strip().splitlines()
        pytest.skip(f"a PostgreSQL server could not start here: {said[-1] if said else exc}")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_user, pg_ctl, "-D", data, "-m", "immediate", "stop"], capture_output=True
        )
        shutil.rmtree(folder, ignore_errors=True)

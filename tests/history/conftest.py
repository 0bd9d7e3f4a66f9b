"""The store's fixtures: ten echo_npu runs with faults switched on and off between them (one with
a flaky fault), made once per test run, and stores of them in SQLite and in PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conformance.history.__main__ import main
from tests.helpers import once_per_run, run_pytest
from tests.history.postgres import postgres_server

#: the ops of every run (two dtypes, two layouts: about 100 cases, two seconds a run)
OPS = "neg,sqrt,mul.Tensor"
#: the ten runs: (ECHO_NPU_FAULTS, the flaky fault switched on unseen)
PLAN: list[tuple[str, bool]] = [
    ("", False),
    ("", False),
    ("mul_rounds_toward_zero", False),  # 3: mul's cases start failing
    ("mul_rounds_toward_zero", False),
    ("mul_rounds_toward_zero,sqrt_ulp", False),  # 5: sqrt's too (new finding)
    ("sqrt_ulp", False),  # 6: mul fixed
    ("sqrt_ulp", True),  # 7: neg fails, on the same configuration as 6 and 8: flaky
    ("sqrt_ulp", False),
    ("", False),  # 9: sqrt fixed
    ("", False),
]


def _make_runs(folder: Path) -> list[Path]:
    runs = []
    for number, (faults, flaky) in enumerate(PLAN, 1):
        results = folder / f"night-{number:02d}" / "conformance-2.13"
        args = ["conformance", "--ops", OPS, "-n", "0", "--results", str(results)]
        args += ["--dtypes", "float32,float16", "--layouts", "contiguous,transposed"]
        args += ["--store", str(folder / "flag.db")]  # the user's one flag
        if flaky:
            args += ["-p", "tests.history.flaky_fault"]
        env = {"ECHO_NPU_FAULTS": faults} if faults else None
        done = run_pytest(*args, env=env)
        assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
        assert "results appended to the store" in done.stdout, done.stdout[-2000:]
        runs.append(results)
    return runs


@pytest.fixture(scope="session")
def ten_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The ten results folders of PLAN, oldest first (their `--store` file: flag.db beside)."""
    return once_per_run(tmp_path_factory, "history-ten-runs", _make_runs)


@pytest.fixture(scope="module")
def postgres() -> Iterator[Callable[[str], str]]:
    """A PostgreSQL server for the module; calling it makes a fresh database, its URL."""
    import psycopg

    with postgres_server() as url:
        plain = url.replace("postgresql+psycopg://", "postgresql://")

        def database(name: str) -> str:
            with psycopg.connect(plain, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            return url.rsplit("/", 1)[0] + "/" + name

        yield database


class Ask:
    """The command line on one store: `ask("changes")` -> its JSON answer."""

    def __init__(self, where: str) -> None:
        self.where = where

    def add(self, *folders: Path) -> None:
        assert main(["--store", self.where, "add", *map(str, folders)]) == 0

    def __call__(self, *args: str, capsys: pytest.CaptureFixture[str]) -> object:
        capsys.readouterr()
        assert main(["--store", self.where, "--json", *args]) == 0
        return json.loads(capsys.readouterr().out)


@pytest.fixture(params=["sqlite", "postgresql"])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], Ask]:
    """An empty store of each kind: `new_store(name)`."""
    if request.param == "sqlite":
        return lambda name: Ask(str(tmp_path / f"{name}.db"))
    database = request.getfixturevalue("postgres")
    return lambda name: Ask(database(name))

"""Fixtures of the report tests: synthetic results folders in tmp dirs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from report_fixtures import write_results


@pytest.fixture
def make_results(tmp_path: Path) -> Callable[..., Path]:
    """Write a results folder ``tmp_path/<name>`` (see ``write_results``); return its path."""

    def make(*args: object, **kwargs: object) -> Path:
        return write_results(tmp_path, *args, **kwargs)  # type: ignore[arg-type]

    return make

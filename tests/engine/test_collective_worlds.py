"""The worlds of rank processes (engine/collectives/world.py) leave nothing behind: a world's
folder (its ranks' log and store) is removed when the world is replaced, when its process's
worlds close, and when it fails to start (every collectives run left one folder per world in
the temp directory, hundreds on a machine that runs the self-tests)."""

from __future__ import annotations

import os

import pytest

from conformance.engine.collectives.spec import CollectiveCase
from conformance.engine.collectives.world import Setup, WorldFailure, Worlds

CASE = CollectiveCase.parse("all_reduce-SUM-float32-33-contiguous-w2-sync")


def test_a_world_s_folder_is_removed_when_the_worlds_close():
    worlds = Worlds(Setup("gloo", "cpu", "", timeout=60.0))
    try:
        answers = worlds.run(CASE)
        folder = worlds.worlds[2].folder
        assert [a.kind for a in answers] == ["result", "result"] and os.path.isdir(folder)
    finally:
        worlds.close()
    assert not os.path.exists(folder)


def test_a_world_that_fails_to_start_leaves_no_folder(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    worlds = Worlds(Setup("no-such-c10d", "cpu", "", timeout=60.0))
    with pytest.raises(WorldFailure) as failure:
        worlds.get(2)
    assert failure.value.status == "failed"
    assert list(tmp_path.iterdir()) == []
    worlds.close()

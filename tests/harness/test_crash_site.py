"""harness/crash_site.py: the op a traced replay died inside, read from its trace file."""

from __future__ import annotations

import os

import torch

from conformance.harness.crash_site import op_label, site_of, start_trace, trace_site


def test_the_site_is_the_last_op_entered_and_not_left_on_any_thread() -> None:
    # the main thread waits in backward (no op open) while the engine's thread dies in neg
    trace = "> 1 abs\n< 1\n> 2 sum.dim_IntList\n< 2\n> 2 neg\n"
    assert site_of(trace) == "neg"
    # an op the main thread still has open, entered before the engine's last op
    assert site_of("> 1 _foreach_mul_.Scalar\n> 2 mul.Tensor\n< 2\n> 2 neg\n") == "neg"
    assert site_of("> 1 _foreach_mul_.Scalar\n> 2 mul.Tensor\n< 2\n") == "_foreach_mul_.Scalar"


def test_no_site_when_every_op_was_left() -> None:
    assert site_of("> 1 abs\n< 1\n") is None
    assert site_of("") is None


def test_op_labels_are_the_records_op_names() -> None:
    assert op_label("aten::neg", "") == "neg"
    assert op_label("aten::add", "Tensor") == "add.Tensor"
    assert op_label("aten::sum", "default") == "sum"


def test_an_op_that_forces_deferred_work_names_no_site_unless_the_trace_waited() -> None:
    """Where the trace could not wait after each op, a crash in `.cpu()` or `.item()` may be
    any earlier op's queued work: no site, unless the case is that op's own; where it waited,
    the forcing op's own work died there."""
    unwaited = "> 1 neg\n< 1\n> 1 _to_copy\n"
    assert trace_site(unwaited, "neg") is None
    assert trace_site(unwaited, "_to_copy") == "_to_copy"
    assert trace_site("= waits after each op\n" + unwaited, "neg") == "_to_copy"
    assert trace_site("> 1 neg\n", "abs") == "neg"


def test_the_trace_waits_after_each_op_before_leaving_it(tmp_path) -> None:
    """A kernel that dies on a queue dies during the wait: the op is still open in the file."""
    path = str(tmp_path / "trace")
    waits: list[str] = []

    def wait() -> None:
        with open(path) as f:
            waits.append(f.read().splitlines()[-1])

    mode = start_trace(path, wait)
    try:
        torch.neg(torch.ones(2))
    finally:
        mode.__exit__(None, None, None)
        os.close(mode.fd)
    text = open(path).read()
    assert text.startswith("= waits after each op\n")
    assert any(line.endswith(" neg") and line.startswith("> ") for line in waits), waits
    assert site_of(text) is None


class _Item:
    def __init__(self, case: str) -> None:
        self.nodeid = f"conformance/test_conformance.py::test_matches_cpu[{case}]"


def test_one_traced_replay_per_op_and_class_and_a_bounded_number_in_all(monkeypatch) -> None:
    """A backend whose every op crashes pays a bounded extra: one replay per op and crash class,
    at most SITES x --culprit-search of them; none with --culprit-search 0."""
    from conformance.harness import culprit

    replayed: list[list[str]] = []

    def fake_crashes(items, **_kw) -> culprit.Replay:
        replayed.append([item.nodeid for item in items])
        return culprit.Replay(False)

    search = culprit.CulpritSearch([], start=None, budget=2, case_timeout=0)
    monkeypatch.setattr(search, "_replay", fake_crashes)
    search.crash_site(_Item("neg-float32-contiguous-native"), "abort")
    search.crash_site(_Item("neg-float64-sliced-native"), "abort")  # same op and class
    search.crash_site(_Item("neg-float64-sliced-native"), "segfault")
    assert len(replayed) == 2
    for i in range(20):
        search.crash_site(_Item(f"op{i}-float32-contiguous-native"), "segfault")
    assert len(replayed) == culprit.SITES * 2
    off = culprit.CulpritSearch([], start=None, budget=0, case_timeout=0)
    monkeypatch.setattr(off, "_replay", fake_crashes)
    assert off.crash_site(_Item("relu-float32-contiguous-native"), "abort") is None
    assert len(replayed) == culprit.SITES * 2


def _replaying(monkeypatch, search, status: int, log: str, trace: str = "> 1 neg\n"):
    """`search`'s replays die with `status` and `log` after writing `trace`."""
    from conformance.harness import culprit

    def fake_replay(items, trace: str, **_kw) -> culprit.Replay:
        with open(trace, "w") as f:
            f.write(written)
        return culprit.Replay(True, status, log)

    written = trace
    monkeypatch.setattr(search, "_replay", fake_replay)


ABORTED, SEGFAULTED = 6, 11  # wait statuses of a process killed by SIGABRT, SIGSEGV


def test_a_replay_that_dies_another_way_names_no_site(monkeypatch) -> None:
    """The site is kept only where the replay died as the case did: an abort replayed as a
    segfault (a different bug, or the trace's own path) says nothing of the abort."""
    from conformance.harness import culprit

    search = culprit.CulpritSearch([], start=None, budget=2, case_timeout=0)
    _replaying(monkeypatch, search, SEGFAULTED, "")
    assert search.crash_site(_Item("abs-float32-contiguous-native"), "abort") is None
    _replaying(monkeypatch, search, ABORTED, "")
    assert search.crash_site(_Item("relu-float32-contiguous-native"), "abort") == "neg"


def test_a_failing_replay_costs_the_crash_nothing_but_its_site(monkeypatch) -> None:
    """A replay that raises (a runner that cannot start) leaves the site unknown; the crash's
    record is still written by its caller."""
    from conformance.harness import culprit

    def broken(*_a, **_kw):
        raise OSError("no runner")

    search = culprit.CulpritSearch([], start=broken, budget=2, case_timeout=0)
    assert search.crash_site(_Item("abs-float32-contiguous-native"), "abort") is None


def test_no_site_is_traced_on_a_lazy_device(monkeypatch) -> None:
    """A lazy device runs its work at a sync, away from the op that built it."""
    from conformance.harness import culprit

    search = culprit.CulpritSearch([], start=None, budget=2, case_timeout=0, traced=False)
    _replaying(monkeypatch, search, ABORTED, "")
    assert search.crash_site(_Item("abs-float32-contiguous-native"), "abort") is None

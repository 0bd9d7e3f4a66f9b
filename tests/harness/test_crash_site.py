"""harness/crash_site.py: the op a traced replay died inside, read from its trace file."""

from __future__ import annotations

from conformance.harness.crash_site import op_label, site_of


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


class _Item:
    def __init__(self, case: str) -> None:
        self.nodeid = f"conformance/test_conformance.py::test_matches_cpu[{case}]"


def test_one_traced_replay_per_op_and_class_and_a_bounded_number_in_all(monkeypatch) -> None:
    """A backend whose every op crashes pays a bounded extra: one replay per op and crash class,
    at most SITES x --culprit-search of them; none with --culprit-search 0."""
    from conformance.harness import culprit

    replayed: list[list[str]] = []

    def fake_crashes(items, **_kw) -> bool:
        replayed.append([item.nodeid for item in items])
        return False

    search = culprit.CulpritSearch([], start=None, budget=2, case_timeout=0)
    monkeypatch.setattr(search, "_crashes", fake_crashes)
    search.crash_site(_Item("neg-float32-contiguous-native"), "abort")
    search.crash_site(_Item("neg-float64-sliced-native"), "abort")  # same op and class
    search.crash_site(_Item("neg-float64-sliced-native"), "segfault")
    assert len(replayed) == 2
    for i in range(20):
        search.crash_site(_Item(f"op{i}-float32-contiguous-native"), "segfault")
    assert len(replayed) == culprit.SITES * 2
    off = culprit.CulpritSearch([], start=None, budget=0, case_timeout=0)
    monkeypatch.setattr(off, "_crashes", fake_crashes)
    assert off.crash_site(_Item("relu-float32-contiguous-native"), "abort") is None
    assert len(replayed) == culprit.SITES * 2

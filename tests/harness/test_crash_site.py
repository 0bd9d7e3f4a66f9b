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

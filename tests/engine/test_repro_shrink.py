"""--repro-dir keeps the smallest sample that shows the case's divergence: a smaller sample that
fails the same check worded alike (other numbers, shapes) is kept; one that fails the same check
for another reason is not (torch_xla: a zero-size sample of `_log_softmax_backward_data` failed
`error` otherwise, and the report's script, run on it, showed nothing)."""

from __future__ import annotations

from types import SimpleNamespace

from conformance.engine.compare import Mismatch
from conformance.engine.outcome import CaseOutcome
from conformance.engine.runner import _smallest_failing

LOWERING = (
    "[error] device raised RuntimeError [internal]: Error while lowering: aten::x, "
    "xla_shape=f32[{n},10,5]{{2,1,0}}, cpu raised RuntimeError [dtype]: expected scalar type "
    "Float but found Long (a different class)"
)
READ_BACK = "[error] the device raised when a result it returned was read back: Check failed"


class Placed:
    """A placed sample of `n` elements whose run fails with `message`."""

    def __init__(self, n: int, message: str) -> None:
        self.n, self.message = n, message

    def tensor_leaves(self) -> list:
        return [SimpleNamespace(placement=SimpleNamespace(size=(self.n,)))]


class Mode:
    def new_evidence(self) -> None:
        return None

    def run_sample(self, ctx, placed: Placed, outcome, first: bool) -> None:
        raise Mismatch("error", placed.message)


def _repro(failing: Placed, others: list[Placed]) -> Placed | None:
    outcome = CaseOutcome(failure=Mismatch("error", failing.message), failed_call=failing)
    _smallest_failing(SimpleNamespace(), Mode(), [failing, *others], outcome)
    return outcome.repro_call


def test_a_smaller_sample_failing_alike_is_the_repro() -> None:
    failing = Placed(250, LOWERING.format(n=5))
    smaller = Placed(20, LOWERING.format(n=2))
    assert _repro(failing, [smaller]) is smaller


def test_a_smaller_sample_failing_the_check_otherwise_is_not() -> None:
    failing = Placed(250, LOWERING.format(n=5))
    assert _repro(failing, [Placed(0, READ_BACK)]) is None
    alike = Placed(20, LOWERING.format(n=2))
    assert _repro(failing, [Placed(0, READ_BACK), alike]) is alike

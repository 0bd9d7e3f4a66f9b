"""The result vocabulary (conformance/record.py): case ids, statuses, the record's JSON."""

from __future__ import annotations

import json

import pytest

from conformance.record import FAILING, CaseId, CaseRecord, Status, status_rank, worst_status


def test_case_id_round_trip_and_parts() -> None:
    case = CaseId("masked_fill_.Scalar", "float32", "transposed", "native")
    assert str(case) == "masked_fill_.Scalar-float32-transposed-native"
    assert case.test_name == "test_matches_cpu[masked_fill_.Scalar-float32-transposed-native]"
    assert (case.op, case.overload_tag) == ("masked_fill_", "Scalar")
    assert CaseId.parse(str(case)) == case
    assert CaseId.parse("conformance/test_conformance.py::" + case.test_name) == case
    assert CaseId("abs", "int64", "zero_dim", "fallback").overload_tag == "default"


@pytest.mark.parametrize("bad", ["abs", "abs-float32", "-float32-contiguous-native"])
def test_case_id_parse_rejects_what_is_not_an_id(bad: str) -> None:
    with pytest.raises(ValueError, match="not a case id"):
        CaseId.parse(bad)


def test_status_order_and_failing() -> None:
    assert worst_status(["passed", "skipped", "failed"]) is Status.FAILED
    assert worst_status([]) is Status.SKIPPED
    assert status_rank("no-such-status") == status_rank(Status.ERROR)
    assert status_rank(Status.UNSUPPORTED) < status_rank(Status.PASSED)
    assert Status.UNSUPPORTED not in FAILING and Status.HUNG in FAILING
    assert {"failed": 1}[Status.FAILED] == 1  # a status is its value, also as a dict key
    assert json.dumps({"s": Status.CRASHED}) == '{"s": "crashed"}'


def test_record_json_round_trip_keeps_unknown_fields() -> None:
    case = CaseId("add.Tensor", "int64", "offset", "native")
    record = CaseRecord.for_case(case, Status.FAILED, check="values", samples=3, torch="2.13.0")
    data = record.to_json()
    assert data["id"] == case.test_name and data["status"] == "failed"
    assert (data["op"], data["overload"], data["dtype"]) == ("add", "Tensor", "int64")
    data["future_field"] = [1, 2]
    back = CaseRecord.from_json(json.loads(json.dumps(data)))
    assert back.status is Status.FAILED and back.check == "values" and back.samples == 3
    assert back.extra == {"future_field": [1, 2]}
    assert back.to_json() == data


def test_record_json_is_a_copy_as_asdict_made_it() -> None:
    """to_json reads the plain fields as they are and copies `extra` as dataclasses.asdict did:
    a dataclass in it becomes a dict, and changing the JSON changes nothing of the record."""
    import collections
    import dataclasses

    @dataclasses.dataclass
    class Note:
        text: str
        where: list[int]

    pair = collections.namedtuple("pair", "a b")
    case = CaseId("add.Tensor", "int64", "offset", "native")
    record = CaseRecord.for_case(case, Status.PASSED, samples=3)
    record.extra.update(notes=[Note("n", [1])], seen={"x": [1, 2]}, at=pair(1, [2]))
    data = record.to_json()
    old = dataclasses.asdict(record)
    assert data == {**{k: v for k, v in old.items() if k != "extra"}, "status": "passed",
                    **old["extra"]}  # fmt: skip
    assert data["notes"] == [{"text": "n", "where": [1]}] and data["at"] == pair(1, [2])
    data["seen"]["x"].append(3)
    data["notes"][0]["where"].append(2)
    data["at"].b.append(3)
    assert record.extra["seen"] == {"x": [1, 2]} and record.extra["notes"][0].where == [1]
    assert record.extra["at"].b == [2]


def test_record_from_partial_json() -> None:
    record = CaseRecord.from_json({"id": "x", "status": "weird"})
    assert record.status is Status.ERROR and record.op == "?" and record.dtype == "-"


def test_missing_kernel_reads_the_dispatchers_words() -> None:
    from conformance.record import missing_kernel

    text = "NotImplementedError: Could not run 'aten::add.out' with arguments from the 'pyreg' "
    assert missing_kernel(text + "backend. This could be") == "add.out"
    assert missing_kernel(
        "Could not run 'aten::as_strided' with arguments from the 'npu' backend"
    ) == ("as_strided")
    autograd = (
        "Could not run 'aten::mul.Tensor' with arguments from the 'AutogradPrivateUse1' backend"
    )
    assert missing_kernel(autograd) is None  # not the device's kernel
    assert missing_kernel("values differ") is None and missing_kernel(None) is None

"""The generated conformance cases: one test per (overload, dtype, layout, path)."""

from conformance.plugin import RECORD_KEY


def test_matches_cpu(conformance_case, conformance_suite, request):
    """Device result of one aten overload matches CPU, with every check (see docs)."""
    record: dict = {}
    request.node.stash[RECORD_KEY] = record
    conformance_suite.run(conformance_case, request.node.nodeid, record)

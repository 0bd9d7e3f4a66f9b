"""The generated conformance cases: one test per (overload, dtype, layout, path)."""


def test_matches_cpu(conformance_case, conformance_suite, request):
    """Device result of one aten overload matches CPU, with every check (see docs)."""
    conformance_suite.verdicts.run(conformance_case, request.node)

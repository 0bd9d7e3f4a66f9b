"""The conformance engine: run one case of one aten overload on the device and on CPU, and judge it.

Never imports pytest (tests/meta/test_layering.py checks it): the harness, the scenarios, repro
scripts and benchmarks all drive it directly.
"""

"""Upstream reuse: a measured run becomes the configuration of PyTorch's own device-generic tests.

`python -m conformance.upstream RESULTS -o upstream_config.py` writes a Python module that calls
`PrivateUse1TestBase.set_test_configs(...)` (torch 2.13+) with what the run measured: the
OpInfos whose ops the backend has kernels for (op_allowlist, applied on request), strict
expected failures for reproducible findings, skips for crashes and hangs, measured tolerances
(op_overrides), and the test classes the device profile says it cannot run (test_exclusions).
api.py: the torch versions whose API it knows; models.py: PyTorch's tests modelled (what each
runs and compares); opinfos.py: the calls an OpInfo's callable makes on a test's inputs;
seeing.py: whether a modelled test sees a measured failure; reach.py: partial results, what the
run did not measure; evidence.py: the run's records -> the configuration; render.py: the
module's text (templates/). docs/UPSTREAM.md.
"""

"""The pytest harness: options, the run's case list, expectations, results, crash isolation.

Everything pytest-specific lives here and in `conformance/plugin.py` (which only declares options,
parametrises and registers the objects defined here).
"""

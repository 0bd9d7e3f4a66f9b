"""Bisect torch releases: which release first breaks (or fixes) a conformance case.

``python -m conformance.bisect <case id or -k expression> --good 2.7 --bad 2.12`` lists the torch
releases between the two ends from the package index (:mod:`.index`), probes both ends, then
binary-searches (:mod:`.search`), skipping releases that cannot be installed or built. Each probe
installs that torch into a venv cached per build key, builds the backend the matrix file describes
against it and runs the case (:mod:`.runner`); the result is written as Markdown and JSON
(:mod:`.output`). The probe runner is an interface (:class:`ProbeRunner`), so tests use fakes.
"""

from conformance.bisect.index import IndexError_, list_versions, resolve_version
from conformance.bisect.probe import VenvProbeRunner, gated_env, gated_fault_env
from conformance.bisect.search import (
    BisectError,
    BisectResult,
    Probe,
    ProbeRunner,
    bisect_versions,
    max_probes,
)

__all__ = [
    "BisectError",
    "BisectResult",
    "IndexError_",
    "Probe",
    "ProbeRunner",
    "VenvProbeRunner",
    "bisect_versions",
    "gated_env",
    "gated_fault_env",
    "list_versions",
    "max_probes",
    "resolve_version",
]

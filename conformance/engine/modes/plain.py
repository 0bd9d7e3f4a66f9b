"""The plain forward call: the mode of every case whose id ends in no mode (base.py's
defaults: sample_run.py runs and checks each sample)."""

from __future__ import annotations

from conformance.engine.modes.base import CaseMode, register

PLAIN = register(CaseMode())

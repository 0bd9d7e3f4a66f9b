"""The mutation campaign: the suite's power measured by kernels nobody chose per op.

One registered kernel of the device under test at a time (or a batch of kernels of different
overloads) is replaced by a mutant that calls the original kernel and changes its behaviour by
an operator (`operators.py`: values, semantics, runtime, registration); the real suite runs
against it (`campaign.py`: `python -m pytest conformance --ops ...` with
`CONFORMANCE_BACKEND_WRAPPER` naming `install.wrap`, engine/wrapping.py), and the mutant is
killed, survives, is equivalent on every input the suite fed it, is never reached, or crashes.
`python -m conformance.measure.mutants --help`; docs/POWER.md has the table.
"""

"""torch-conformance: op-conformance suite for PyTorch PrivateUse1 device backends.

Run it with plain pytest (`pytest conformance`); see `docs/ARCHITECTURE.md` for the data flow.
"""

# before anything imports torch (and with it an autoloaded backend): the environment that every
# child process of the suite gets back (processes/interpreter.py)
from conformance.processes import interpreter as _interpreter  # noqa: F401, E402

# numpy's OpenBLAS starts its thread server at import: a process of the suite keeps one thread
# until it needs more, so that it may fork (processes/forking.py); the CPU references are torch's
_interpreter.quiet_blas()

__version__ = "0.1.0"

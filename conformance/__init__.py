"""torch-conformance: op-conformance suite for PyTorch PrivateUse1 device backends.

Run it with plain pytest (`pytest conformance`); see `docs/ARCHITECTURE.md` for the data flow.
"""

__version__ = "0.1.0"

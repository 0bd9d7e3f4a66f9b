"""Factories: memory is uninitialised, so only dtype, shape and strides are compared."""

from conformance.ops import OpSpec, register

for name in ("empty.memory_format", "empty_strided"):
    register(OpSpec(name, check_values=False, notes="uninitialised memory: metadata only"))

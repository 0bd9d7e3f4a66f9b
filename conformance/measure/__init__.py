"""Measuring the suite and the backend: the power of the checks, CPU's drift per op, the first
week's baseline manifest, the model workloads' recording."""

"""User-facing errors: each prints as one line that names the fix, never a traceback."""


class ConformanceUsageError(Exception):
    """Bad input from the user (unknown backend, dtype, layout, op, malformed manifest, ...)."""

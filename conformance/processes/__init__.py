"""The suite's processes: which kinds there are and why (`kinds.py`, the one table), the one
place that starts a Python child of the suite (`launch.py`), how a process forks (`forking.py`:
never with threads), zygotes (`zygote.py`), and the interpreter and environment every child gets
(`interpreter.py`). No pytest and no torch at import: `conformance/__init__.py` imports
`interpreter` before any backend loads."""

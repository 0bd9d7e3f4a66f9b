"""The collectives family's engine (issue 47): a device's c10d ProcessGroup judged across
collectives, reduce ops, dtypes, sizes, layouts, world sizes and async Works against an oracle in
plain torch on CPU. pytest-free: `spec.py` (what a case is, the selections), `data.py` (every
rank's inputs, the layouts, the oracle), `ranks.py` (what one rank process runs), `world.py` (N
rank processes started once and driven over pipes), `judge.py` (a case's verdict).
docs/COLLECTIVES.md."""

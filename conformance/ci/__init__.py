"""The CI room: the matrix file and its cells, nox sessions, backend builds, the checker launcher,
workflow templates and their local rehearsal, and a backend repository's setup (init)."""

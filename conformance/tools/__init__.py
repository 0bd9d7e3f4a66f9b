"""Kept for backend repositories set up by earlier versions: `tools/sessions.py` re-exports
`register` for their noxfiles. The CI tools live in `conformance/ci/`, the measuring tools in
`conformance/measure/`."""

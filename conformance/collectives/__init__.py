"""The collectives family (issue 47): a device's c10d ProcessGroup judged case by case against an
oracle in plain torch on CPU (engine/collectives/, docs/COLLECTIVES.md); records by
`harness/families/collectives.py`."""

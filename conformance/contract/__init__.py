"""The runtime contract cases: one test per item of `engine/runtime_contract.py` (streams,
events, devices, generators, memory statistics, pinned memory, non_blocking copies,
record_stream), each judged by data through standard torch APIs; records by
`harness/families/contract.py`."""

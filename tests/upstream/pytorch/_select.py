"""What the PyTorch-style test modules of this folder share: the backend imported first (as an
autoloaded backend is), and the OpInfos they instantiate: each @ops list is one of
conformance.upstream.models' op lists, narrowed to $UPSTREAM_OPS (comma-separated full names) so
a self-test runs a handful of OpInfos rather than all of op_db."""

import importlib
import os

importlib.import_module(os.environ.get("UPSTREAM_BACKEND", "echo_npu"))

from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

from conformance.upstream.models import op_list  # noqa: E402

NAMES = [n for n in os.environ.get("UPSTREAM_OPS", "abs").split(",") if n]


def listed(rule: str) -> list:
    """The OpInfos of op list `rule` among $UPSTREAM_OPS, in the order named."""
    held = op_list(rule)
    return [op for name in NAMES for op in op_db if op.full_name == name and name in held]

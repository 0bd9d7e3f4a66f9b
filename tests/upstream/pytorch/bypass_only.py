"""A pytest plugin that only lifts the @onlyOn gates (what the generated configuration also
does), so a run without the configuration runs the same tests: `-p bypass_only`."""

import importlib
import os

importlib.import_module(os.environ.get("UPSTREAM_BACKEND", "echo_npu"))

from torch.testing._internal.common_device_type import PrivateUse1TestBase  # noqa: E402

PrivateUse1TestBase.bypass_device_restrictions = True

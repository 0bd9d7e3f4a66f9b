"""echo_npu initialised at import, as some real backends are (a runtime context created when
the module loads): with ECHO_NPU_REFUSE_FORK=1 no forked child can use it, so the suite must
not fork."""

import torch
from echo_npu import *  # noqa: F403  (registers the device; the protocol hooks as echo_npu's)

torch.npu.init()

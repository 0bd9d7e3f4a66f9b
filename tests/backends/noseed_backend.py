"""echo_npu whose device module lacks manual_seed_all (as many device modules do): every
torch.manual_seed then warns "Set seed for `npu` device does not take effect"."""

import torch
from echo_npu import *  # noqa: F403  (registers the device; the protocol hooks as echo_npu's)

del torch.npu.manual_seed_all

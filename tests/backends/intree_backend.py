"""A backend whose kernels live under an in-tree dispatch key (MTIA), not PrivateUse1, as
torch_xla's live under XLA: it registers one aten kernel from Python and no device runtime (no
tensor can be made on it). For the loading self-tests: `--backend intree_backend` must find
the device type `mtia` and discover its kernels under `MTIA`."""

import torch

_lib = torch.library.Library("aten", "IMPL", "MTIA")


def _abs(self):
    raise NotImplementedError("intree_backend has no device runtime")


_lib.impl("abs", _abs)

"""pyreg_npu: a backend of another shape than echo_npu, for the self-tests (issue 31).

Shaped like PrivateUse1 packages whose kernels are written in Python:

- importing registers nothing: the user calls ``pyreg_npu.register_devices()`` (no
  ``torch.backends`` entry point); the suite reaches it with
  ``--backend pyreg_npu:register_devices``;
- the native runtime initialises the device at import (``torch.pyreg.is_initialized()`` is True
  before any tensor exists) and refuses use in a forked child, and it sets ``PYTHONEXECUTABLE``
  at C level to the first ``python3`` on PATH (a child interpreter that inherits the C
  environment becomes that Python);
- a few primitives are native (allocation, ``_copy_from``, ``set_``, ``resize_``: echo_npu's
  runtime and kernels, registered without the rest of echo_npu), every other kernel is
  registered from Python with ``torch.library`` (``kernels.py``): no ``as_strided``, no ``view``
  of its own but a wrong one, no boxed fallback, no ``.out`` variants;
- its real bugs (each one a finding the suite must name): ``empty_permuted`` ignores the
  physical layout, ``_to_copy`` drops channels_last strides, ``view`` of a non-viewable tensor
  copies instead of raising, a 0-dim CPU operand is refused, ``cos`` computes contiguous
  float32 only, ``empty_strided`` needs the missing ``as_strided``.
"""

from __future__ import annotations

import torch

from . import _runtime

DEVICE_NAME = "pyreg"

_runtime.start()  # the runtime initialises the device when the package loads


def register_devices() -> None:
    """Register the ``pyreg`` device, its device module and its kernels (idempotent)."""
    if hasattr(torch, DEVICE_NAME):
        return
    from . import device, kernels

    _runtime.register_native()
    torch.utils.rename_privateuse1_backend(DEVICE_NAME)
    torch._register_device_module(DEVICE_NAME, device)
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_storage=True)
    kernels.register(DEVICE_NAME)

"""Load the backend under test and adapt its optional hooks (docs/BACKEND_PROTOCOL.md).

Loading never touches the device (a device that refuses a forked child once initialised must
stay uninitialised in the process that forks; `engine/probe.py` checks usability elsewhere) and
never imports a second PrivateUse1 backend: registering PrivateUse1 hooks twice aborts the
interpreter, so a conflict is a one-line `ConformanceUsageError` before any import.

Which device: the PrivateUse1 device the module registered; else, for a device torch names
itself whose kernels live under their own dispatch key (torch_xla's `xla` under `XLA`), the one
such device the import gave kernels, or `--device TYPE` (`Backend.dispatch_key`).

Which module: `--backend` when given (`MODULE`, or `MODULE:FUNCTION` for a package whose device
is registered by a function its users call); else the backend that `import torch` already
registered (PyTorch's `torch.backends` entry points, "autoload": `registration.py`); else
echo_npu.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch

from conformance.engine import wrapping
from conformance.engine.backend_errors import (
    first_line,
    registered_nothing,
    registration_hint,
    unknown_device,
)
from conformance.engine.device_keys import (
    collectives_for,
    compiler_for,
    dispatch_key_of,
    has_kernels,
    in_tree_devices,
)
from conformance.engine.lazy import LazyRuntime, runtime_for
from conformance.engine.profile import DeviceProfile, Fact
from conformance.engine.protocol import HOOK_NAMES, HOOKS
from conformance.engine.registration import (
    entry_point_of,
    owner_of,
    registered_device,
    top_level,
)
from conformance.errors import ConformanceUsageError
from conformance.processes import interpreter

DEFAULT_BACKEND = "echo_npu"


@dataclass
class Backend:
    """The backend module under test and the device it registered."""

    module_name: str
    module: ModuleType
    device_type: str
    how_loaded: str = "imported"  # for the run header
    # the dispatch key its kernels are registered under: PrivateUse1, or an in-tree key (XLA,
    # HPU, XPU, MTIA) for a device torch names itself
    dispatch_key: str = "PrivateUse1"
    register: str = ""  # the function --backend MODULE:FUNCTION called, if any
    wrapped_by: str = ""  # CONFORMANCE_BACKEND_WRAPPER's MODULE:FUNCTION (engine/wrapping.py)
    # the suite's red zones for the backend's heap blocks (engine/heap.py): the --heap-zones
    # setting, where the layer is built, and the layer once installed where the probe saw the
    # device's memory go through it
    heap_zones: str = "auto"
    heap_cache: str | None = None
    heap: Any = None
    _routable: dict[str, bool] = field(default_factory=dict)
    first_calls: dict[str, float] = field(default_factory=dict)  # 1st device call per op (s)

    @functools.cached_property
    def profile(self) -> DeviceProfile:
        """What the run knows about the device (engine/profile.py): the facts torch answers
        (and the device count, where a process uses the backend alone: a tool, a script)
        until the run sets the probed profile (harness/session.py), frozen from then on."""
        count, how = self.device_count(), f"torch.{self.device_type}.device_count()"
        second = count - 1 if count > 1 else None
        return self.declared_profile(ask_compiler=False).with_probe(
            {"device_count": Fact(count, how), "second_index": Fact(second, how)}
        )

    def declared_profile(self, ask_compiler: bool) -> DeviceProfile:
        """The facts torch answers without touching the device (`ask_compiler`: ask Inductor
        which torch.compile backend the device has, seconds on first use)."""
        return DeviceProfile.declared(
            self.device_type,
            self.dispatch_key,
            self.lazy.name if self.lazy is not None else None,
            self.compiler if ask_compiler else None,
            collectives_for(self.device_type),
            delay_injector=callable(self.hook("set_delay")),
        )

    @functools.cached_property
    def compiler(self) -> str:
        """The torch.compile backend of the -compile cases: `inductor` where the device has an
        Inductor backend, else `aot_eager` (engine/compiling.py)."""
        return compiler_for(self.device_type)

    @functools.cached_property
    def lazy(self) -> LazyRuntime | None:
        """The lazy runtime behind the device's dispatch key (torch_xla, torch._lazy), or None."""
        return runtime_for(self.dispatch_key)

    @functools.cached_property
    def device(self) -> torch.device:
        """The device the cases run on (index 0); made once, asked on every sample's path."""
        return torch.device(self.device_type, 0)

    def device_count(self) -> int:
        """The device module's `device_count()` (the standard hook `torch.accelerator` reads
        too); 1 where it cannot count."""
        count = getattr(getattr(torch, self.device_type, None), "device_count", None)
        try:
            return int(count()) if callable(count) else 1
        except Exception:  # noqa: BLE001 - a device module that cannot count has one device
            return 1

    @property
    def other_device(self) -> torch.device | None:
        """The device's last index where it has more than one (never the current device, 0),
        else None (the profile's `second_index`)."""
        index = self.profile.second_index.value
        return torch.device(self.device_type, index) if index is not None else None

    @property
    def spec(self) -> str:
        """How a child process loads the same backend: `MODULE` or `MODULE:FUNCTION`."""
        return f"{self.module_name}:{self.register}" if self.register else self.module_name

    @property
    def device_module(self) -> Any:
        """`torch.<device>` (the backend's device module), or None."""
        return getattr(torch, self.device_type, None)

    def device_function(self, name: str) -> Any:
        """A function of the device module (`torch.npu.memory_allocated`), or None."""
        return getattr(self.device_module, name, None)

    def seed_generators(self, value: int) -> None:
        """Seed what torch.manual_seed(value) seeds for this device: the CPU's default generator
        and the device module's (`device_seed_all`), and a lazy runtime's own, which
        torch.manual_seed does not reach (engine/lazy.py). The generators of the devices not
        under test are left alone: for each one not initialised (CUDA's, XPU's),
        torch.manual_seed formats the caller's stack to queue the seed, 2-3 ms a call under
        pytest (36 of the power tool's 76 s, profiled), and a random op's case seeds before
        each of its draws."""
        torch.default_generator.manual_seed(value)
        seed_all = self.device_seed_all()
        if seed_all is not None and not self.device_function("_is_in_bad_fork")():
            seed_all(value)
        if self.lazy is not None and self.lazy.seed is not None:
            self.lazy.seed(value)

    def device_seed_all(self) -> Any:
        """The device module's manual_seed_all where torch.manual_seed calls it (the module
        also has _is_in_bad_fork), else None: torch does not seed the device."""
        seed_all = self.device_function("manual_seed_all")
        bad_fork = self.device_function("_is_in_bad_fork")
        return seed_all if callable(seed_all) and callable(bad_fork) else None

    def synchronize(self) -> None:
        """Wait for the device's queued work: the device module's `synchronize`, else
        `torch.accelerator.synchronize` where this device is the accelerator; a lazy device's
        pending graph runs. An error the work raised surfaces here."""
        if self.lazy is not None:
            self.lazy.sync()
            return
        sync = self.eager_synchronize()
        if sync is not None:
            sync()

    def eager_synchronize(self) -> Callable[[], None] | None:
        """What waits for an eager device's queued work (`synchronize`'s first two ways), or
        None: neither torch API reaches this device."""
        sync = self.device_function("synchronize")
        if callable(sync):
            return sync
        accelerator = getattr(torch, "accelerator", None)
        current = getattr(accelerator, "current_accelerator", None)
        if callable(current):
            found = current()
            if found is not None and found.type == self.device_type:
                return accelerator.synchronize
        return None

    def unusable(self) -> str | None:
        """Why this process can no longer run work on the device (a sticky error such as CUDA's
        device-side assert, a lazy runtime that cannot sync), or None: a synchronize, then a
        small tensor computed on the device and read back."""
        try:
            self.synchronize()
            doubled = (torch.ones(2, device=self.device) * 2).cpu()
        except Exception as exc:  # noqa: BLE001 - any failure: unusable in this process
            return f"{type(exc).__name__}: {first_line(exc)}"
        return None if bool(doubled.eq(2).all()) else "2 x 1.0 computed on it read back wrong"

    def hook(self, name: str) -> Any:
        """An optional protocol function of the backend module (engine/protocol.py), or None."""
        if name not in HOOK_NAMES:
            raise KeyError(f"{name!r} is not a hook of the backend protocol (engine/protocol.py)")
        return getattr(self.module, name, None)

    @property
    def can_route_fallback(self) -> bool:
        return self.hook("set_fallback_routes") is not None

    def allocator_mode(self) -> str:
        fn = self.hook("allocator_mode")
        return str(fn()) if fn else "unknown"

    def routed_through_fallback(self, overload: str | None) -> contextlib.AbstractContextManager:
        """Route `overload` through cpu_fallback inside the block (no-op for None: most
        samples' calls, so no generator is made for them).

        Without `get_fallback_routes` the routes in force before the block are unknown: the
        block ends with no route at all (the run header says so)."""
        if overload is None:
            return contextlib.nullcontext()
        return self._routed(overload)

    @contextlib.contextmanager
    def _routed(self, overload: str) -> Iterator[None]:
        setter = self.hook("set_fallback_routes")
        getter = self.hook("get_fallback_routes")
        before = list(getter()) if getter else []
        setter(sorted(set(before) | {overload}))
        try:
            yield
        finally:
            setter(before)

    def fallback_routable(self, overload: str) -> bool:
        """Whether the backend accepts routing `overload` through cpu_fallback."""
        if overload not in self._routable:
            ok = self.can_route_fallback
            if ok:
                try:
                    with self.routed_through_fallback(overload):
                        pass
                except (ValueError, RuntimeError):
                    ok = False
            self._routable[overload] = ok
        return self._routable[overload]

    def fallback_count(self, overload: str) -> int | None:
        """How often `overload` went through cpu_fallback, if the backend counts it."""
        fn = self.hook("fallback_counts")
        if fn is None:
            return None
        return int(fn().get(overload, 0))

    def capabilities(self) -> list[str]:
        """The protocol hooks this backend offers."""
        return [h.name for h in HOOKS if self.hook(h.name) is not None]


# ---- loading ------------------------------------------------------------------------------------
#: CUDA's is_available()/device_count() ask NVML instead of initialising the driver (a process
#: whose driver is initialised may not fork: processes/forking.py)
PROBE_ENVIRONMENT = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}


def load_backend(spec: str | None, device: str | None = None) -> Backend:
    """Find or import the backend module (which registers its device) and call its register
    function if `spec` names one (`MODULE:FUNCTION`); never touch the device or its driver.
    Whatever the backend's runtime did to the environment that selects a child's interpreter
    is undone (processes/interpreter.py)."""
    for name, value in PROBE_ENVIRONMENT.items():  # set before torch asks its driver anything
        os.environ.setdefault(name, value)
    try:
        backend = _load_backend(spec, device)
        backend.wrapped_by = wrapping.apply(backend)  # CONFORMANCE_BACKEND_WRAPPER, if set
        return backend
    finally:
        interpreter.pin()


def _load_backend(spec: str | None, device: str | None) -> Backend:
    module_name, register = split_spec(spec)
    already = registered_device()
    owner = owner_of(already) if already else None
    if module_name is None:
        if already is not None:
            if owner is None:
                raise ConformanceUsageError(
                    f"import torch registered a PrivateUse1 device '{already}' but its module "
                    "is unknown; pass --backend MODULE (the module that registers it)"
                )
            ep = entry_point_of(owner)
            how = (
                f"registered by import torch (torch.backends entry point '{ep.name} = {ep.value}')"
                if ep
                else "registered by import torch"
            )
            return _backend(owner, device, how)
        module_name = DEFAULT_BACKEND
    if already is not None and not register:
        if top_level(module_name) in sys.modules and (
            owner is None or owner == top_level(module_name)
        ):
            return _backend(module_name, device, "registered by import torch (autoload)")
        raise ConformanceUsageError(
            f"--backend {module_name}: import torch already registered the PrivateUse1 backend "
            f"'{already}' ({'module ' + owner if owner else 'unknown module'}, through its "
            "torch.backends entry point) and a process holds only one; omit --backend to test "
            f"it, or set TORCH_DEVICE_BACKEND_AUTOLOAD=0 to test {module_name}"
        )
    before = in_tree_devices()  # cuda in a CUDA build of torch: not the backend's
    module = _import(module_name)
    how = "imported"
    if register:
        _call_register(module, module_name, register)
        how = f"imported, then {module_name}.{register}() called"
    if registered_device() is None:
        ep = entry_point_of(module_name)
        if ep is not None:  # registration lives in the entry point (autoload is off)
            try:
                ep.load()()
            except Exception as exc:  # noqa: BLE001
                raise ConformanceUsageError(
                    f"backend '{module_name}': its torch.backends entry point '{ep.value}' "
                    f"failed: {first_line(exc)}"
                ) from None
            how = f"imported, then its torch.backends entry point '{ep.value}' called"
    if registered_device() is None:
        found = in_tree_devices()
        new = [d for d in found if d not in before]
        if device is None and len(new) == 1:
            device = new[0]  # the one in-tree device the import gave kernels (torch_xla)
        key = dispatch_key_of(device) if device is not None else None
        if key is not None and device not in found:
            raise ConformanceUsageError(
                f"--device {device}: nothing registered kernels under its dispatch key "
                f"{key} in this process"
                + (f"; devices with kernels of their own key: {', '.join(found)}" if found else "")
            )
        if device is None or device not in found:
            raise ConformanceUsageError(registered_nothing(module, module_name, register))
    backend = _backend(module_name, device, how)
    backend.register = register
    return backend


def split_spec(spec: str | None) -> tuple[str | None, str]:
    """`MODULE:FUNCTION` -> (MODULE, FUNCTION); `MODULE` -> (MODULE, "")."""
    if not spec:
        return None, ""
    module, _, function = spec.partition(":")
    if not module or (":" in spec and not function.isidentifier()):
        raise ConformanceUsageError(
            f"--backend {spec}: expected MODULE or MODULE:FUNCTION (e.g. my_npu or "
            "my_npu:register_devices)"
        )
    return module, function


def _call_register(module: ModuleType, module_name: str, register: str) -> None:
    fn = getattr(module, register, None)
    if not callable(fn):
        hint = registration_hint(module)
        raise ConformanceUsageError(
            f"--backend {module_name}:{register}: {module_name} has no function '{register}'"
            + (f" (its callables that may register a device: {hint})" if hint else "")
        )
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the backend's own error, in one line
        raise ConformanceUsageError(
            f"--backend {module_name}:{register}: {module_name}.{register}() raised "
            f"{type(exc).__name__}: {first_line(exc)}"
        ) from None


def _backend(module_name: str, device: str | None, how: str) -> Backend:
    module = sys.modules.get(module_name) or _import(module_name)
    registered = torch._C._get_privateuse1_backend_name()
    if device is not None and device != registered:
        key = dispatch_key_of(device)
        if key is None or not has_kernels(key):
            raise ConformanceUsageError(unknown_device(device, registered))
        return Backend(module_name, module, device, how, dispatch_key=key)
    return Backend(module_name, module, registered, how)


def _import(module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise ConformanceUsageError(
                f"backend module '{module_name}' is not importable: install it or pass "
                "--backend MODULE"
            ) from None
        raise ConformanceUsageError(
            f"importing backend '{module_name}' failed: {first_line(exc)}"
        ) from None
    except Exception as exc:  # the backend's own one-line errors (e.g. bad env values)
        raise ConformanceUsageError(
            f"importing backend '{module_name}' failed: {first_line(exc)}"
        ) from None

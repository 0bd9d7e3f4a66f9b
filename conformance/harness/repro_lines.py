"""Repro lines: one command that runs exactly one case (or scenario) again, from the folder pytest
was started in, with every option and backend variable that created it.

Built from where the suite is installed, never from pytest's rootdir (which `--results`,
`--expectations` or `--pyargs` move): the file relative to the invocation folder when the suite
lies inside it, else `--pyargs conformance.<module>::<test>`, which runs from any folder.
"""

from __future__ import annotations

import os
import shlex

from conformance.engine.backend import Backend
from conformance.engine.environment import compiler_variables
from conformance.engine.modes import mode_of
from conformance.harness.cases import CaseList
from conformance.harness.nodes import PACKAGE_DIR
from conformance.harness.options import Options
from conformance.record import CaseId

CASES_FILE = "test_conformance.py"  # the module of the generated cases


class ReproLines:
    """The repro line of any node of this run."""

    def __init__(
        self, options: Options, backend: Backend, cases: CaseList, invocation_dir: str
    ) -> None:
        self.options = options
        self.backend = backend
        self.cases = cases
        self.invocation_dir = invocation_dir
        self._prefixes: dict[bool, str] = {}  # env_prefix, once per process (every record has one)
        self._targets: dict[str | None, tuple[str, str | None]] = {}  # _target's resolved files

    def environment(self) -> dict[str, str]:
        """The environment a case depends on (repros, run.json): the variables of the backend
        module and of the module that registered the device module (`ECHO_NPU_*` for echo_npu
        and wrappers of it), and whether torch autoloads backends."""
        from conformance.engine.registration import owner_of

        name = self.backend.module_name
        modules = {name, owner_of(self.backend.device_type) or name}
        prefixes = tuple(m.split(".")[0].upper() + "_" for m in sorted(modules))
        prefixes += ("TORCH_DEVICE_BACKEND_AUTOLOAD",)
        return {k: v for k, v in sorted(os.environ.items()) if k.startswith(prefixes)}

    def env_prefix(self, compiled: bool = False) -> str:
        """`VAR=value ...` for the repro line; `compiled`: with the variables Inductor and its
        C++ compiler read (a -compile case's kernel depends on them)."""
        if compiled not in self._prefixes:
            env = self.environment()
            if compiled:
                env.update(compiler_variables())
            self._prefixes[compiled] = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        return self._prefixes[compiled]

    @staticmethod
    def checkers() -> list[str]:
        """The preloaded memory checkers the run is under, as `tools/launch.py` flags."""
        preload = os.environ.get("LD_PRELOAD", "")
        pairs = (("libasan", "--asan"), ("malloc_debug", "--malloc-check"))
        return [flag for lib, flag in pairs if lib in preload]

    def _target(self, nodeid: str, path: str | None = None) -> list[str]:
        """The arguments that select this node from the directory pytest was started in, built
        from where the suite is installed (never from rootdir, which --results or --pyargs
        move): its file relative to that directory when it lies inside it, else `--pyargs` and
        the module (any folder, any rootdir)."""
        name = nodeid.rpartition("::")[2]
        if path not in self._targets:
            self._targets[path] = self._file_target(path)
        file, module = self._targets[path]
        return [f"{file}::{name}"] if module is None else ["--pyargs", f"{module}::{name}"]

    def _file_target(self, path: str | None) -> tuple[str, str | None]:
        """(the file relative to the invocation folder, None) when it lies inside it, else
        ("", its module)."""
        path = os.path.realpath(path or os.path.join(PACKAGE_DIR, CASES_FILE))
        here = os.path.realpath(self.invocation_dir)
        if path.startswith(here + os.sep):
            return os.path.relpath(path, here), None
        module = os.path.relpath(os.path.splitext(path)[0], os.path.dirname(PACKAGE_DIR))
        return "", module.replace(os.sep, ".")

    def repro(self, nodeid: str, path: str | None = None) -> str:
        """One command that runs exactly this case again with every option that created it:
        the options the user set (flags or CONFORMANCE_* variables, as flags), --ops or
        --fallback-ops narrowed to the case's overload, the backend's environment."""
        # one case runs alone: the shard it was in does not apply to it, nor does the baseline
        override: dict[str, str | None] = dict.fromkeys(
            ("results", "repro_dir", "shard", "shard_durations", "store", "write_expectations")
        )
        case = None  # a family's case (its test file is `path`): its options as given
        if path is None:  # a generated op case
            try:
                case = CaseId.parse(nodeid)
            except ValueError:
                case = None
        if case is not None and case.overload in self.cases.grad_only:
            override["ops"] = override["fallback_ops"] = None  # a decomposition the models call
        elif case is not None:
            registered = case.overload in self.cases.registered
            override["ops"] = case.overload if registered else None
            override["fallback_ops"] = None if registered else case.overload
        if case is not None:
            for name, value in (
                ("dtypes", case.dtype),
                ("layouts", case.layout),
                ("paths", case.path),
            ):
                if name in self.options.given:
                    override[name] = value
        flags = [shlex.quote(f) for f in self.options.flags(**override)]
        target = [shlex.quote(a) for a in self._target(nodeid, path)]
        cmd = " ".join(["pytest", *target, *flags, "--results", "none"])
        checkers = self.checkers()
        if checkers:  # the run was under a preloaded checker: so is the repro
            cmd = f"python -m conformance.ci.launch {' '.join(checkers)} -- {cmd}"
        compiled = case is not None and mode_of(case.values).compiled
        return f"{self.env_prefix(compiled)} {cmd}".strip()

"""Command-line options of the suite, each declared once as a field of `Options`.

A field's metadata gives its help text, default and parser; the flag (`--fallback-ops`) and the
environment variable (`CONFORMANCE_FALLBACK_OPS`) are derived from the field name. `add_options`
and `read_options` iterate the fields, so adding an option is adding one field.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import Field, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import torch

from conformance.engine.layout_names import LAYOUT_HELP, parse_layouts
from conformance.engine.mode_names import MODES, modes_help
from conformance.errors import ConformanceUsageError
from conformance.sharding import Shard

DEFAULT_DTYPES = "float32,float64,float16,bfloat16,int32,int64,bool"
PATHS = ("native", "fallback")
ORDINARY = "ordinary"  # the value set of the ordinary samples (ids without a values part)
# every value set of samples/valuesets.py (a meta test checks they agree; this module is read
# by --help without torch)
VALUE_SETS = (ORDINARY, "special", "promotion", "reference", "arguments", "sizes", "models")
SIZE_SETS = ("boundaries", "large", "none")  # samples/sizes.py
# execution modes beyond the plain forward call (ids end in -<mode>): a module each in
# engine/modes/; those not named here run on request only (--modes compile)
DEFAULT_MODES = ("grad", "inference", "sync", "asynchronous")
ISOLATE = ("auto", "fork", "spawn", "none")
DEFAULT_CASE_TIMEOUT = "300"

ALL_DTYPES = (
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "complex64",
    "complex128",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
)


def parse_dtypes(text: str) -> list[torch.dtype]:
    import torch

    names = ALL_DTYPES if text == "all" else [n.strip() for n in text.split(",") if n.strip()]
    out = []
    for name in names:
        dtype = getattr(torch, name.removeprefix("torch."), None)
        if not isinstance(dtype, torch.dtype):
            raise ConformanceUsageError(f"unknown dtype '{name}'; valid: {', '.join(ALL_DTYPES)}")
        out.append(dtype)
    return out


def _names(text: str, valid: tuple[str, ...], what: str, none: bool = False) -> list[str]:
    """A comma-separated list of names out of `valid` (`none`: the word "none" is the empty
    list); a one-line usage error naming the valid ones otherwise."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if none and names == ["none"]:
        return []
    bad = [n for n in names if n not in valid]
    if bad or not names:
        raise ConformanceUsageError(
            f"{what} {', '.join(bad) or '(none)'}; valid: {', '.join(valid)}"
            + (" or none" if none else "")
        )
    return names


def parse_modes(text: str) -> list[str]:
    return _names(text, MODES, "--modes: unknown mode(s)", none=True)


def parse_paths(text: str) -> list[str]:
    return _names(text, PATHS, "unknown path(s)")


def parse_values(text: str) -> list[str]:
    return _names(text, VALUE_SETS, "--values: unknown value set(s)")


def choice(flag: str, value: str, valid: tuple[str, ...]) -> str:
    if value not in valid:
        raise ConformanceUsageError(f"{flag} {value!r}: valid values are {', '.join(valid)}")
    return value


def _list(text: str | None) -> list[str] | None:
    return [o.strip() for o in text.split(",") if o.strip()] if text else None


def _expectations(text: str | None) -> list[str] | None:
    return None if text is None else ([] if text == "none" else text.split(","))


def _results(text: str | None) -> str | None:
    return None if text in (None, "", "none") else text


def _shard(text: str | None) -> Shard | None:
    return None if text in (None, "") else Shard.parse(text)


def _count(flag: str, text: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        value = -1
    if value < 0:
        raise ConformanceUsageError(f"{flag} {text!r}: use a whole number >= 0")
    return value


def _at_least_one(flag: str, text: str) -> int:
    value = _count(flag, text)
    if value < 1:
        raise ConformanceUsageError(f"{flag} {text!r}: use 'auto' or a whole number >= 1")
    return value


def _bool(flag: str, text: str) -> bool:
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ConformanceUsageError(f"{flag} {text!r}: use 1 or 0")


def _isolate(text: str) -> str:
    return choice("--isolate", text, ISOLATE)


def seconds(text: str, flag: str = "--case-timeout") -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0 or (value == 0 and flag != "--case-timeout"):
        turns_off = " (0 turns the limit off)" if flag == "--case-timeout" else " above 0"
        raise ConformanceUsageError(f"{flag} {text!r}: give a number of seconds{turns_off}")
    return value


def option(
    help: str, default: str | None = None, parse: Callable[[Any], Any] = str, flag: bool = False
) -> Any:
    """Declare one option: its help text, default (as typed on the command line) and parser;
    a `flag` may also be given without a value (meaning "1")."""
    return field(metadata={"help": help, "default": default, "parse": parse, "flag": flag})


def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


def env_of(name: str) -> str:
    return "CONFORMANCE_" + name.upper()


@dataclass(frozen=True)
class Options:
    """Every option of the suite; `--<field-name>` on the command line or `CONFORMANCE_<NAME>`."""

    backend: str | None = option(
        "Python module whose import registers the PrivateUse1 device under test (default: the "
        "backend import torch registered through a torch.backends entry point, else echo_npu)",
        parse=lambda v: v or None,
    )
    device: str | None = option(
        "device type of the backend (default: the PrivateUse1 name after import)",
        parse=lambda v: v,
    )
    ops: list[str] | None = option(
        "comma-separated overloads or globs to test, e.g. 'masked_fill_.*,add.Tensor' "
        "(default: every overload the backend registered; 'none': only --fallback-ops)",
        parse=_list,
    )
    fallback_ops: list[str] | None = option(
        "also test overloads the backend did not register, reached only through its boxed "
        "cpu_fallback (path 'fallback'): 'models' (what representative models reach, "
        "conformance/workloads/; the default unless --ops is given), 'all' (every such overload "
        "with OpInfo samples: for nightly runs), 'none', or comma-separated globs",
        parse=_list,
    )
    dtypes: list[torch.dtype] = option(
        "comma-separated torch dtypes ('all' for every dtype OpInfo knows)",
        default=DEFAULT_DTYPES,
        parse=lambda v: parse_dtypes(v),
    )
    layouts: list[str] = option(
        "comma-separated layouts: " + ", ".join(f"{k} ({v})" for k, v in LAYOUT_HELP.items()),
        default="all",
        parse=parse_layouts,
    )
    paths: list[str] = option(
        "native (the backend's kernel) and/or fallback (the same op routed through cpu_fallback, "
        "when the backend offers set_fallback_routes)",
        default=",".join(PATHS),
        parse=lambda v: parse_paths(v),
    )
    values: list[str] = option(
        "comma-separated value sets: ordinary (the op's samples), special (NaN, infinities, "
        "-0.0, subnormals, dtype extremes; case ids end in -special), promotion (operands of "
        "another dtype: int with float, 0-dim CPU tensors, bool with int; ids end in "
        "-promotion), arguments (every value class of every schema argument the samples miss: "
        "reduction none/mean/sum, optional tensors present and absent, both bools, negative "
        "and several dims, ignore_index hit and missed; ids end in -arguments), sizes (reduced, "
        "scanned and pointwise extents across tile and vector boundaries, see --sizes; native "
        "path only; ids end in -sizes) and models (the shapes and arguments the representative "
        "models call the overload with; ids end in -models); each but ordinary on the "
        "contiguous layout",
        default=",".join(VALUE_SETS),
        parse=parse_values,
    )
    heap_zones: str = option(
        "red zones for the heap blocks of the backend's own shared objects (engine/heap.py): "
        "'auto' rewrites the allocation imports (malloc, posix_memalign, aligned_alloc, "
        "operator new, free) of the libraries under the backend's package folder, where the "
        "device probe sees its memory allocated through them, so that a write past a block's "
        "end or into a freed block fails the case whose sample made it; 'off'; or "
        "comma-separated globs of more libraries to watch (a vendor runtime elsewhere)",
        default="auto",
        parse=lambda v: v.strip() or "auto",
    )
    sizes: str = option(
        "the extents of the -sizes cases: boundaries (one past each tile and vector boundary: "
        "reductions and scans over 1, 17, 33, 257, 1025 and 65537 elements, pointwise ops on "
        "7, 9, 17, 65 and 4097), large (both sides of every boundary, and 2^20), none (no "
        "-sizes cases)",
        default=SIZE_SETS[0],
        parse=lambda v: choice("--sizes", v, SIZE_SETS),
    )
    modes: list[str] = option(
        modes_help(DEFAULT_MODES),
        default=",".join(DEFAULT_MODES),
        parse=parse_modes,
    )
    expectations: list[str] | None = option(
        "expected-failure manifest(s), comma-separated (default: "
        "matrices/expectations/<backend>/{common,torch-<minor>}.toml); 'none' for no manifest",
        parse=_expectations,
    )
    isolate: str = option(
        "crash isolation: 'fork' runs cases in a forked child so a segfault/abort marks that case "
        "crashed and the run goes on; 'spawn' in a fresh interpreter (for devices that refuse a "
        "forked child); 'none' runs in-process; 'auto' = fork, or spawn when the device was "
        "initialised before forking or refuses a forked child (also inside each pytest-xdist "
        "worker, so a crash never takes a worker down)",
        default="auto",
        parse=_isolate,
    )
    case_timeout: float = option(
        "seconds a case (or scenario) may run: past it the case is marked hung and the run goes "
        "on in a fresh process; 0 for no limit",
        default=DEFAULT_CASE_TIMEOUT,
        parse=seconds,
    )
    runner_cases: int = option(
        "cases one runner process (--isolate fork or spawn) runs before a fresh one replaces "
        "it; a crash or hang replaces it at once, a failed case does not (0: no limit)",
        default="500",
        parse=lambda v: _count("--runner-cases", v),
    )
    runners: int = option(
        "runner processes a plain pytest process (no -n) runs its cases in at the same time, "
        "where they are forked and the device may be open in several processes; 'auto' = one "
        "per usable CPU core, at most 4 (spawned runners and a device one process may open at "
        "a time: 1); under pytest-xdist each worker has one",
        default="auto",
        parse=lambda v: 0 if str(v).strip() == "auto" else _at_least_one("--runners", v),
    )
    culprit_search: int = option(
        "after a crash in a runner that ran other cases first, replay them in fresh processes to "
        "find the case that corrupted memory (at most N searches per runner of a process, "
        "--runners; 0: off, with the replay of an own crash under an op trace that finds the "
        "op it died inside)",
        default="8",
        parse=lambda v: _count("--culprit-search", v),
    )
    exit_teardown: bool = option(
        "end the pytest process through the interpreter's normal teardown; by default it ends "
        "with os._exit once its summary is printed and its results are written, so a backend "
        "whose teardown hangs or aborts at exit cannot change the exit code (harness/exiting.py)",
        default="0",
        parse=lambda v: _bool("--exit-teardown", v),
        flag=True,
    )
    strict_errors: bool = option(
        "compare CPU errors that only state a memory-layout precondition of CPU's kernel "
        '("Expected X.is_contiguous()") like any error; by default such a sample is not '
        "applicable to that layout",
        default="0",
        parse=lambda v: _bool("--strict-errors", v),
        flag=True,
    )
    repro_dir: str | None = option(
        "write a standalone script plus the exact inputs (<case>.py, <case>.pt) for every "
        "failing case into this directory",
        parse=lambda v: v,
    )
    results: str | None = option(
        "directory for per-case JSON lines and run.json ('none' to disable)",
        default="results",
        parse=_results,
    )
    store: str | None = option(
        "at the end of the run, append its results to the results store: a SQLite file or a "
        "database URL (python -m conformance.history answers questions over the runs in it)",
        parse=lambda v: v or None,
    )
    shard: Shard | None = option(
        "run shard K of N (K/N or K-of-N, 1 <= K <= N): the same partition of the cases in "
        "every shard, "
        "items built only for this one; each shard writes its own --results and the report "
        "merges them (docs/MATRIX.md)",
        parse=_shard,
    )
    shard_durations: str | None = option(
        "balance the shards by the case durations of an earlier run: its results folder (or a "
        "folder of them, e.g. its shards); every shard must be given the same one",
        parse=lambda v: v or None,
    )
    write_expectations: str | None = option(
        "at the end of the run, write an expectations manifest to this file that expects what "
        "the run found (a baseline): one entry per finding and per group of unsupported cases, "
        "plus the entries of the manifest in use that its cases still need; the next run with "
        "--expectations FILE has no unexpected failure (python -m conformance.measure.baseline "
        "writes the same from results folders)",
        parse=lambda v: v or None,
    )
    # not an option: the raw text of every option the user set (flag or environment), by name
    given: dict[str, str] = field(default_factory=dict, compare=False)
    # not options: each family's own (Family.options: a dataclass of option fields), by name
    families: dict[str, Any] = field(default_factory=dict, compare=False)

    def family(self, name: str, declared: type) -> Any:
        """The options the family `name` declared (`declared`, its dataclass), as read for this
        run; from the environment and their defaults where the run did not read them."""
        found = self.families.get(name)
        return found if found is not None else _parsed(declared, None, {})

    @property
    def names_overloads(self) -> bool:
        """--ops or --fallback-ops name the overloads to test: the run has op cases only (the
        other families' items are not collected: harness/session.py, ordering.py)."""
        return bool(self.ops or self.fallback_ops)

    def flags(self, **override: str | None) -> list[str]:
        """The options the user set, as command-line flags (`override` replaces or, with None,
        drops a value): what a repro command needs to recreate the same case."""
        raw = {**self.given, **override}
        return [f"{flag_of(name)}={value}" for name, value in raw.items() if value is not None]


def option_fields(declared: type | None = None) -> list[Field]:
    """The fields of `Options` (or of a family's options, `declared`) that are options."""
    return [f for f in fields(declared or Options) if f.metadata]


def add_options(parser: pytest.Parser, families: Iterable[type] = ()) -> None:
    """Every option of `Options` and of the families' own option dataclasses."""
    group = parser.getgroup("conformance", "torch-conformance (op conformance vs CPU)")
    for f in [*option_fields(), *(g for d in families for g in option_fields(d))]:
        default, env = f.metadata["default"], env_of(f.name)
        shown = f" [env {env}; default: {default}]" if default else f" [env {env}]"
        group.addoption(
            flag_of(f.name),
            dest="conformance_" + f.name,
            default=None,
            help=f.metadata["help"] + shown,
            **({"nargs": "?", "const": "1"} if f.metadata["flag"] else {}),
        )


def _parsed(declared: type, config: pytest.Config | None, given: dict[str, str]) -> Any:
    """`declared` (Options or a family's) from the command line, else the environment, else
    the default; the raw text of what the user set added to `given`."""
    values = {}
    for f in option_fields(declared):
        flag = config.getoption("conformance_" + f.name) if config is not None else None
        env = os.environ.get(env_of(f.name))
        raw = flag if flag is not None else (env or f.metadata["default"])
        if flag is not None or env:
            given[f.name] = raw
        values[f.name] = f.metadata["parse"](raw)
    return declared(**values)


def read_options(config: pytest.Config, families: Mapping[str, type] | None = None) -> Options:
    """Options from the command line, else the environment, else the declared default; with
    each family's own (`families`: its name -> its options dataclass)."""
    given: dict[str, str] = {}
    options = _parsed(Options, config, given)
    chosen = {name: _parsed(d, config, given) for name, d in (families or {}).items()}
    return replace(options, given=given, families=chosen)


def default_options(**given: str) -> Options:
    """The options of a run given only `given` (raw text by field name, as typed after the
    flag): what a tool that builds a run's cases outside pytest uses."""
    values = {}
    for f in option_fields():
        raw = given.get(f.name, f.metadata["default"])
        values[f.name] = f.metadata["parse"](raw)
    return Options(**values, given=dict(given))

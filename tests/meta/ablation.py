"""A pytest plugin that switches one check of the suite off, or makes one status path more
permissive (torch-bug, blocked, unsupported, not applicable, property oracle, xfail), to prove
some self-test notices.

Loaded with `-p tests.meta.ablation` (through PYTEST_ADDOPTS, so the suites that self-tests start
in subprocesses load it too); `ABLATE=<name>` names what to switch off (one of `ABLATIONS`).
Used by tests/meta/ablate_checks.py; harmless when ABLATE is unset.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import replace

ENV = "ABLATE"


def _registered(name: str) -> Callable[[], None]:
    def off() -> None:
        from conformance.engine import checks, runner  # noqa: F401 - runner registers bits.py's

        found = [i for i, check in enumerate(checks.CHECKS) if check.name == name]
        assert found, f"no registered check {name!r} to ablate"
        for i in found:
            checks.CHECKS[i] = replace(checks.CHECKS[i], run=lambda sample: None)

    return off


def _patch(module: str, attr: str, value_of: Callable[[object], object]) -> Callable[[], None]:
    def off() -> None:
        import importlib

        mod = importlib.import_module(module)
        owner_name, _, name = attr.rpartition(".")
        owner = getattr(mod, owner_name) if owner_name else mod
        setattr(owner, name, value_of(getattr(owner, name)))

    return off


def _died() -> object:
    """A confirmation run that died too (crash confirmation ablated)."""
    from conformance.harness.runners import Attempt

    return Attempt(end="died")


def _passed() -> object:
    """A collectives verdict that passes (its judgement ablated)."""
    from conformance.engine.collectives.judge import Verdict

    return Verdict("passed")


def _off(module: str, attr: str) -> Callable[[], None]:
    """`module.attr` (a function or method) does nothing and returns None."""
    return _patch(module, attr, lambda f: lambda *a, **k: None)


def _subclass_errors() -> None:
    """The error check as it was: any subclass of CPU's exception type passes."""
    from conformance.engine import checks, error_checks  # noqa: F401 - registers the error check
    from conformance.engine.compare import Mismatch

    def old(s) -> None:
        e, a = s.expected.exc, s.actual.exc
        if (e is None) != (a is None) or not isinstance(a, type(e)):
            raise Mismatch("error", f"device raised {a!r}, cpu raised {e!r}")

    for i, check in enumerate(checks.CHECKS):
        if check.name == "error":
            checks.CHECKS[i] = replace(check, run=old)


def _cpu_read_back() -> None:
    """Read results with the backend's own strided device->host copy (`.cpu()`)."""
    from conformance.engine import checks, compare, transfer

    def read_back(t):
        return t.detach().cpu()

    for module in (transfer, checks, compare):
        module.read_back = read_back


# ---- status paths made more permissive: each must be caught as a wrong kernel passing --------
def _excuse_third_results() -> None:
    """torch-bug: a device result matching neither of CPU's results is excused (as it was)."""
    from conformance.engine import sample_run
    from conformance.engine.compare import Mismatch

    original = sample_run.run_sample

    def permissive(*args):
        try:
            return original(*args)
        except Mismatch as m:
            if "matches neither of cpu's two results" not in m.message:
                raise
            return False, f"excused: {m.message}"

    sample_run.run_sample = permissive


def _block_on_any_broken_foundation() -> None:
    """blocked: any broken foundation of the dtype blocks, evidence or not."""
    from conformance.engine import foundations

    original = foundations.Foundations.blame

    def permissive(self, *args, **kwargs):
        found = original(self, *args, **kwargs)
        return foundations.Blame(found.blocked_by or found.related)

    foundations.Foundations.blame = permissive


def _error_check_gives(outcome: str) -> Callable[[], None]:
    """unsupported / not applicable: a failed error check becomes that status instead."""

    def permissive() -> None:
        from conformance.engine import checks, error_checks  # noqa: F401 - registers it
        from conformance.engine.compare import Mismatch

        def wrap(run):
            def check(s) -> None:
                try:
                    run(s)
                except checks.Unsupported:
                    raise
                except Mismatch as m:
                    if outcome == "unsupported":
                        raise checks.Unsupported(m.message) from None
                    raise checks.NotApplicable(m.message) from None

            return check

        for i, c in enumerate(checks.CHECKS):
            if c.name == "error":
                checks.CHECKS[i] = replace(c, run=wrap(c.run))

    return permissive


def _opaque_errors_match() -> None:
    """error classes: an unclassifiable message matches any class of the same Python type."""
    from conformance.engine import errorclass

    original = errorclass.same_class

    def permissive(expected, actual) -> bool:
        if errorclass.OTHER in (expected.kind, actual.kind):
            return expected.type_name == actual.type_name
        return original(expected, actual)

    errorclass.same_class = permissive


def _exactness_rule(kind: str) -> Callable[[], None]:
    """`judge` as it was before issue 43 for one IEEE kind: a correctly rounded operation CPU
    rounds wrong on some elements makes no claim; a recommended function is held to the bit."""

    def off() -> None:
        from conformance.engine import exactness, ieee

        original = exactness.judge

        def judge(k, own, float32, dtype, overload=""):
            found = original(k, own, float32, dtype, overload)
            if k != kind or not found.exact:
                return found
            if kind == ieee.RECOMMENDED:
                return exactness.Exactness(True, found.elements, found.why, exactness.BITS)
            m = float32 if dtype in (exactness.torch.float32, exactness.torch.float64) else own
            if m is not None and m.wrong:
                return exactness.Exactness(False, found.elements, "ablated")
            return found

        exactness.judge = judge

    return off


def _without_value_set(name: str) -> Callable[[], None]:
    """The value set's cases have no samples (as before issue 43; its generated calls are
    cached on disk, so the samples are dropped where the run asks for them)."""

    def value_of(calls_for: Callable) -> Callable:
        def ablated(overload, dtype, cache_dir, value_set="", *args, **kwargs):
            if value_set == name:
                return []
            return calls_for(overload, dtype, cache_dir, value_set, *args, **kwargs)

        return ablated

    return _patch("conformance.samples", "calls_for", value_of)


ABLATIONS: dict[str, Callable[[], None]] = {
    **{
        name: _registered(name)
        for name in (
            "path",
            "error",
            "identity",
            "aliasing",
            "outputs",
            "written",
            "inputs",
            "view",
            "subnormal",
            "rounding",
            "signed-zero",
            "write-through",
        )
    },
    "error-classes": _subclass_errors,
    "memory": _off("conformance.engine.memory", "MemoryWatch.check_after"),
    "leak": _off("conformance.engine.memory", "MemoryWatch.check_leaks"),
    "old-contents": _off("conformance.engine.write_checks", "_compare_old_contents"),
    "layout-free-reference": _off("conformance.engine.consistency", "layout_free"),
    "random-properties": _off("conformance.engine.oracles", "distribution_problem"),
    "random-redraw": _patch(
        "conformance.engine.oracles",
        "pool",
        lambda f: lambda actual, expected, more=(): f(actual, expected, ()),
    ),
    "random-value-set": _off("conformance.engine.oracles", "value_set_problem"),
    "random-range": _off("conformance.engine.oracles", "range_problem"),
    "blame": _off("conformance.engine.foundations", "Foundations.blame"),
    "primitive-read-back": _cpu_read_back,
    # status paths, more permissive (issue 20)
    "torch-bug-excuses-third-results": _excuse_third_results,
    "blocked-without-evidence": _block_on_any_broken_foundation,
    "error-mismatch-is-unsupported": _error_check_gives("unsupported"),
    "error-mismatch-not-applicable": _error_check_gives("not-applicable"),
    "opaque-errors-match": _opaque_errors_match,
    "property-oracle-for-every-op": _patch(
        "conformance.engine.oracles", "is_nondeterministic", lambda f: lambda op: True
    ),
    # the runtime contract and the -asynchronous mode (issue 46)
    "contract": _off("conformance.contract.conftest", "Runtime.check"),
    "asynchronous": _off("conformance.engine.modes.asynchronous", "AsyncMode._pipeline"),
    # the collectives family (issue 47): each of its judgements, and its async cases
    "collectives-values": _patch(
        "conformance.engine.collectives.judge", "_compare", lambda f: lambda *a, **k: None
    ),
    "collectives-outside-view": _patch(
        "conformance.engine.collectives.judge", "_outside", lambda f: lambda *a, **k: None
    ),
    "collectives-barrier": _patch(
        "conformance.engine.collectives.judge", "_barrier", lambda f: lambda *a, **k: _passed()
    ),
    "collectives-refusal-reference": _patch(
        "conformance.engine.collectives.judge",
        "_refused",
        lambda f: lambda case, info, c10d, reference: f(case, info, c10d, None),
    ),
    "collectives-async-modes": _patch(
        "conformance.engine.collectives.spec", "MODES", lambda v: ("sync",)
    ),
    # modes (issue 21)
    "grad": _off("conformance.engine.gradients", "run_grad_sample"),
    "grad-output-layouts": _patch(
        "conformance.engine.gradients", "GRAD_OUTPUT_LAYOUTS", lambda v: ("contiguous",)
    ),
    "inference-mode": _patch(
        "conformance.engine.modes.inference", "inference_context", lambda f: contextlib.nullcontext
    ),
    "identity-first-call": _patch(
        "conformance.engine.alias_checks",
        "_returns_written",
        lambda f: (
            lambda s, result, dev, where: (
                f(s, result, dev, where) if where == "called below autograd" else None
            )
        ),
    ),
    # power and determinism (issue 32)
    "random-parametric": _off("conformance.engine.parametric", "check"),
    "grad-measured-allowance": _off("conformance.engine.grad_compare", "float64_truth"),
    "nondeterministic-reference": _off("conformance.engine.sample_run", "_unstable_reference"),
    "culprit-unconfirmed": _patch(
        "conformance.harness.culprit",
        "CulpritSearch._corrupts",
        lambda f: lambda self, suspect: "assumed (ablated)",
    ),
    "xfail-excuses-any-check": _patch(
        "conformance.harness.expectations", "Entry.expects", lambda f: lambda self, check: True
    ),
    # compiled paths (issue 33)
    "compile": _off("conformance.engine.compiling", "run_compile_sample"),
    "compile-special": _patch("conformance.engine.compiling", "SPECIAL_SAMPLES", lambda v: 0),
    "compile-other-index": _off("conformance.engine.compiling", "_on_other_index"),
    "compile-dynamic": _off("conformance.engine.dynamic_shapes", "run_dynamic"),
    "compile-torch-bug": _off("conformance.engine.compiling", "inductor_on_cpu_agrees"),
    "compile-load-error": _off("conformance.engine.compiling", "inductor_load_error"),
    "compile-strided": _patch(
        "conformance.engine.compiling", "CASE_LAYOUTS", lambda v: ("contiguous",)
    ),
    "compile-int-dtype": _patch("conformance.engine.compiling", "CASE_DTYPES", lambda v: v[:1]),
    "scenario-output-device": _off("conformance.scenarios._helpers", "assert_on"),
    # lazy devices (issue 36)
    "lazy-settle": _patch(
        "conformance.engine.sample_run", "settle", lambda f: lambda lazy, outcome: outcome
    ),
    "sync-recompile": _patch("conformance.engine.syncing", "COMPILES", lambda v: "no such counter"),
    "lazy-retire": _patch(
        "conformance.harness.serving", "_lazy_runtime_ok", lambda f: lambda backend: True
    ),
    # sticky device errors (issue 55: CUDA's device-side asserts)
    "device-unusable": _patch(
        "conformance.engine.backend", "Backend.unusable", lambda f: lambda self: None
    ),
    "case-settle": _off("conformance.engine.runner", "_settled"),
    # memory kept once (a workspace) judged a leak
    "kept-once": _patch("conformance.engine.runner", "_kept_once", lambda f: lambda *a: a[-1]),
    "lazy-fallback-counters": _patch(
        "conformance.engine.lazy", "Counts.fell_back", lambda f: lambda self, before: []
    ),
    # sizes, arguments and what IEEE asks (issue 43)
    "evidence-tolerance": _patch(
        "conformance.engine.evidence", "measured_scale", lambda f: lambda *a, **k: None
    ),
    "ieee-correctly-rounded": _exactness_rule("correctly-rounded"),
    "ieee-recommended-ulp": _exactness_rule("recommended"),
    "single-operation": _patch(
        "conformance.engine.ieee", "single_operation", lambda f: lambda *a, **k: True
    ),
    "arguments-value-set": _without_value_set("arguments"),
    "sizes-value-set": _without_value_set("sizes"),
    # heap red zones on any allocator (issue 48)
    "heap-zones": _patch(
        "conformance.engine.heap", "watch", lambda f: lambda *a, **k: (None, "ablated")
    ),
    "heap-phases": _off("conformance.engine.sample_run", "_heap_phase"),
    # issue 44: the device profile's needs, and the -repeat mode (one file)
    "profile-needs": _patch(
        "conformance.engine.profile", "DeviceProfile.missing", lambda f: lambda self, needs: None
    ),
    "repeat-mode": _off("conformance.engine.modes.repeat", "differs"),
    # issue 45: a lazy runtime seeded with torch; an internal check where CPU refuses too is no
    # parity verdict
    "runtime-seed": _patch(
        "conformance.engine.backend",
        "Backend.seed_generators",
        lambda f: lambda self, value: __import__("torch").manual_seed(value),
    ),
    "both-refused": _patch(
        "conformance.engine.errorclass", "both_refused", lambda f: lambda expected, actual: False
    ),
    "crash-confirmation": _patch(
        "conformance.harness.isolation",
        "IsolatedRunner._confirm",
        lambda f: lambda self, item, nextitem: _died(),
    ),
    "runner-dies-with-owner": _off("conformance.processes.zygote", "die_with_parent"),
    "unvectorised-nan": _off("conformance.engine.unvectorised", "fix_vectorised_nans"),
    # a JIT backend's first calls never said (the summary line)
    "first-call-time": _off("conformance.harness.terminal", "_first_calls"),
    # a declared half-precision computation judged by nothing (passes whatever the values)
    "computes-in-dtype-bound": _off("conformance.engine.precision", "_judge_in_dtype"),
    # the declaration ignored: half values judged as computed in float32
    "computes-in-dtype-declared": _patch(
        "conformance.engine.precision",
        "DtypePolicy.in_dtype",
        lambda f: lambda self, dtype: False,
    ),
    "random-model-by-run-name": _patch(
        "conformance.engine.parametric",
        "model_of",
        lambda f: lambda overload, call: f(overload, call) if "." in overload else None,
    ),
}


def apply() -> None:
    """Switch off what `ABLATE` names (nothing when unset): for tools outside pytest too."""
    name = os.environ.get(ENV)
    if name:
        ABLATIONS[name]()


def pytest_configure(config) -> None:
    apply()

"""One Markdown bug report per finding: its title, the versions, a standalone script (the
representative case run again with `--repro-dir`, its repro made into `script.py`'s form) with
what it printed when run alone, the check the device failed and what it promises, since which
torch it fails (the results store), and the command that reproduces it with the suite."""

from __future__ import annotations

import re
import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from conformance.bugs.script import Repro, standalone_script
from conformance.findings import Finding
from conformance.processes import launch
from conformance.record import HARNESS_CHECKS
from conformance.report.load import Run

#: seconds the representative case may take when it runs again, and its script
RERUN_TIMEOUT = 600
#: a script run alone imports the suite at its peril: this makes such an import fail
ALONE = (
    "import runpy, sys; sys.modules['conformance'] = None; "
    "runpy.run_path(sys.argv[1], run_name='__main__')"
)
VERSION_KEYS = ("torch", "torch git", "backend", "python", "compiler", "glibc", "machine", "isa")


def check_doc(check: str) -> str:
    """What the check promises (the engine's registry, the harness's and the gradients')."""
    from conformance.engine.checks import CHECKS
    from conformance.engine.gradients import GRAD_CHECKS
    from conformance.engine.sample_run import checks_left_out  # noqa: F401 - registers all

    docs = {c.name: c.doc for c in CHECKS} | dict(HARNESS_CHECKS) | dict(GRAD_CHECKS)
    return docs.get(check, "")


def op_doc(op: str) -> str:
    """The op's page in PyTorch's documentation, where torch has a function of its name."""
    name = op.split(".")[0].rstrip("_")
    if name and hasattr(torch, name):
        return f"https://docs.pytorch.org/docs/stable/generated/torch.{name}.html"
    return ""


@dataclass
class Rerun:
    """The representative case run again with --repro-dir: its saved repro, or why none."""

    repro: Repro | None
    why: str
    env: dict[str, str]


def rerun(command: str, cwd: Path) -> Rerun:
    """Run the record's repro command again with --repro-dir (the user's folder as cwd)."""
    words = shlex.split(command)
    env: dict[str, str] = {}
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    if not words or words[0] != "pytest":
        return Rerun(None, f"its repro is not a pytest command: {command}", env)
    with tempfile.TemporaryDirectory(prefix="conformance-bug-") as folder:
        argv = ["-m", "pytest", *words[1:], "--repro-dir", folder, "-q"]
        argv += ["-p", "no:cacheprovider"]
        try:
            done = launch.run("suite-run", argv, env, cwd=cwd, capture_output=True, text=True,
                              timeout=RERUN_TIMEOUT)  # fmt: skip
        except subprocess.TimeoutExpired:
            return Rerun(None, f"it ran past {RERUN_TIMEOUT} s when run again", env)
        facts = sorted(Path(folder).glob("*.json"))
        if not facts:
            tail = (done.stdout.strip().splitlines() or ["no output"])[-1]
            return Rerun(None, f"running it again wrote no repro script ({tail})", env)
        return Rerun(Repro.load(facts[0]), "", env)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:60]


def _fence(text: str, lang: str = "") -> str:
    return f"```{lang}\n{text.rstrip()}\n```"


def _versions(run: Run) -> list[str]:
    built = run.meta.get("compile_environment")
    built = built if isinstance(built, dict) else {}
    rows = [f"| {key} | {built[key]} |" for key in VERSION_KEYS if built.get(key)]
    rows += [f"| device | {run.meta.get('device') or '?'} |", f"| allocator | {run.allocator} |"]
    env = run.meta.get("environment") or {}
    if env:
        rows.append("| environment | " + " ".join(f"`{k}={v}`" for k, v in env.items()) + " |")
    return ["| what | version |", "| --- | --- |", *rows]


def write_report(
    finding: Finding, run: Run, out: Path, since: str, cwd: Path
) -> tuple[Path, int | None]:
    """Write `<out>/<finding id>-<slug>.md` (and its script); returns the report's path and the
    script's exit status when run alone (None: no script)."""
    rep = finding.representative
    stem = f"{finding.id}-{_slug(finding.ops[0] if finding.ops else 'case')}"
    title = f"{', '.join(finding.ops[:3]) or rep.op_name}: {rep.first_line}"[:160]
    lines = [f"# {title}", ""]
    lines += [f"Found by torch-conformance in `{run.name}`: {finding.count} case(s) in "
              f"{', '.join(finding.ops[:8])}; the simplest is `{rep.id}`.", ""]  # fmt: skip
    lines += ["## Versions", "", *_versions(run), ""]
    status: int | None = None
    again = rerun(rep.repro, cwd) if rep.repro else Rerun(None, "its record has no repro", {})
    lines += ["## Reproduce with torch and the backend only", ""]
    if again.repro is not None and again.repro.standalone:
        text, beside = standalone_script(again.repro, title, stem)
        script = out / f"{stem}.py"
        script.write_text(text, encoding="utf-8")
        if beside:
            torch.save(beside, out / f"{stem}.pt")
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in again.env.items())
        try:
            done = launch.run("standalone-script", ["-I", "-c", ALONE, str(script)], again.env,
                              cwd=out, capture_output=True, text=True,
                              timeout=RERUN_TIMEOUT)  # fmt: skip
            status, printed = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired:
            status, printed = -1, f"(ran past {RERUN_TIMEOUT} s: stopped)"
        printed = "\n".join(printed.strip().splitlines()[:60])
        lines += [f"`{script.name}`" + (f" (inputs in `{stem}.pt` beside it)" if beside else "")
                  + ":", "", _fence(text, "python"), ""]  # fmt: skip
        command = f"{env} python {script.name}".strip()
        lines += [f"`{command}` printed (exit status {status}; CPU's and the device's "
                  "results):", "", _fence(printed), ""]  # fmt: skip
    else:
        why = again.why or "its CPU reference is the suite's own (no aten kernel on CPU)"
        lines += [f"No standalone script: {why}.", ""]
    lines += ["## What the suite saw", "", _fence(rep.message or "(no message)"), ""]
    check = finding.key.check
    promise = check_doc(check)
    lines += ["## What is promised", ""]
    lines.append(f"- check `{check}`: {promise or 'see docs/RESULTS.md'} (the device is judged "
                 "against CPU's result for the same inputs, placed the same way)")  # fmt: skip
    docs = [op_doc(op) for op in finding.ops[:4] if op_doc(op)]
    if docs:
        lines.append("- the op's documentation: " + ", ".join(dict.fromkeys(docs)))
    lines += ["", "## Since when", "", since, ""]
    lines += ["## With the suite", "", _fence(rep.repro or "(none)", "bash"), ""]
    path = out / f"{stem}.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path, status

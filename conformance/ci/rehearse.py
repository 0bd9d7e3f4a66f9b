"""Rehearse a GitHub Actions workflow locally: its own jobs, matrix, steps and artifacts.

    python -m conformance.ci.rehearse .github/workflows/nightly.yml --input filter='2\\.13$'
    nox -s nightly -- 2.12 2.13        # the same for the nightly, cells named as nox sessions

What runs is the workflow file itself, so a rehearsal that passes proves the workflow's steps:
jobs in ``needs`` order with their ``if:`` conditions, ``strategy.matrix`` (also from
``fromJSON(needs.<job>.outputs.<name>)``), every ``run:`` step under bash with ``GITHUB_OUTPUT``,
``GITHUB_ENV`` and ``GITHUB_STEP_SUMMARY``, job outputs, and ``${{ }}`` expressions
(:mod:`conformance.ci.expressions`). Each job runs in a fresh workspace, as on a runner.

Emulated actions: ``actions/checkout`` (a copy of the project, without ``.git``, ``.nox``,
``results``, build products), ``actions/setup-python`` (the host python),
``actions/upload-artifact`` / ``actions/download-artifact`` (a local artifact store with their v4
layout: one folder per artifact, ``pattern`` downloads into ``path/<name>/``), PyTorch's CRCR
callback (ci/relay.py: checked, and what it would send written to ``crcr-callbacks.jsonl``;
``--event repository_dispatch --event-payload FILE`` gives it its dispatch). Any other action is
an error. ``ACT=true`` is set, as nektos/act does, so steps guarded by ``if: ${{ !env.ACT }}``
(installing tools, talking to GitHub) are skipped.

On the steps' PATH, ``python`` is this interpreter and ``nox`` is ``python -m nox --envdir
<root>/.nox``: session venvs and backend builds are shared with ordinary nox runs (a build is
reused while its build key matches). Output: ``<root>/results/rehearsal/`` (``artifacts/``, one log
per job in ``logs/``, the jobs' step summaries in ``summary.md``, ``rehearsal.json``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from conformance.ci.expressions import ExpressionError, condition, interpolate, to_text
from conformance.ci.rehearsal_steps import RehearsalError, StepRunner, parse_kv_file, write_shims

__all__ = ["JobResult", "Rehearsal", "RehearsalError", "main"]


@dataclass
class JobResult:
    """One job instance (a matrix job has one per combination)."""

    job: str
    label: str
    result: str  # success | failure | skipped
    seconds: float = 0.0
    outputs: dict[str, str] = field(default_factory=dict)
    log: str = ""
    failed_step: str = ""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "job"


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


class Rehearsal:
    """Run ``workflow`` for ``root`` (the project folder) with ``inputs``."""

    def __init__(
        self,
        workflow: Path,
        root: Path,
        *,
        inputs: Mapping[str, str] | None = None,
        out: Path | None = None,
        work: Path | None = None,
        keep: bool = False,
        event: str = "workflow_dispatch",
        echo: bool = True,
        payload: Mapping[str, Any] | None = None,
    ) -> None:
        import yaml  # a dev requirement; imported here so --help works without it

        self.workflow_path = workflow
        self.root = root
        try:
            data = yaml.safe_load(workflow.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise RehearsalError(f"workflow {workflow} not found") from None
        if not isinstance(data, dict) or "jobs" not in data:
            raise RehearsalError(f"{workflow}: not a workflow (no jobs)")
        data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads `on` as True
        self.wf = data
        self.event = event
        self.payload = dict(payload or {})  # github.event (repository_dispatch: client_payload)
        self.out = out or root / "results" / "rehearsal"
        self.work = work or root / ".nox" / "rehearsal"
        self.keep = keep
        self.echo = echo
        self.inputs = self._inputs(dict(inputs or {}))
        self.results: list[JobResult] = []

    # -- setup ----------------------------------------------------------------------------------

    def _inputs(self, given: dict[str, str]) -> dict[str, Any]:
        on = self.wf.get("on") or {}
        spec = {}
        if isinstance(on, dict) and isinstance(on.get(self.event), dict):
            spec = on[self.event].get("inputs") or {}
        values = {name: (s or {}).get("default", "") for name, s in spec.items()}
        for name, value in given.items():
            if name not in spec:
                valid = ", ".join(spec) or "none"
                raise RehearsalError(f"unknown input '{name}' of {self.event} (valid: {valid})")
            values[name] = value
        return values

    def _say(self, text: str) -> None:
        if self.echo:
            print(text, flush=True)

    # -- jobs -----------------------------------------------------------------------------------

    def _order(self) -> list[str]:
        jobs = self.wf["jobs"]
        done: list[str] = []
        pending = list(jobs)
        while pending:
            ready = [j for j in pending if all(n in done for n in _as_list(jobs[j].get("needs")))]
            if not ready:
                raise RehearsalError(f"jobs {', '.join(pending)} wait on each other (needs)")
            for j in ready:
                unknown = [n for n in _as_list(jobs[j].get("needs")) if n not in jobs]
                if unknown:
                    raise RehearsalError(f"job {j} needs unknown job {unknown[0]}")
            done.append(ready[0])
            pending.remove(ready[0])
        return done

    def _contexts(self, **extra: Any) -> dict[str, Any]:
        ctx: dict[str, Any] = {
            "github": {
                "event_name": self.event,
                "event": self.payload,
                "repository": f"local/{self.root.name}",
                "token": "",
                "workflow": self.wf.get("name", self.workflow_path.name),
                "ref": "refs/heads/rehearsal",
                "run_id": "0",
                "server_url": "https://github.com",
            },
            "inputs": self.inputs,
            "env": {},
            "matrix": {},
            "needs": {},
            "steps": {},
            "strategy": {},
            "runner": {"os": "Linux", "arch": "X64", "temp": str(self.work / "tmp")},
            "secrets": {"GITHUB_TOKEN": ""},
            "vars": {},
            "job": {"status": "success"},
        }
        ctx.update(extra)
        return ctx

    def _combinations(self, job: Mapping[str, Any], ctx: Mapping[str, Any]) -> list[dict]:
        strategy = job.get("strategy") or {}
        matrix = interpolate(strategy.get("matrix"), ctx)
        if matrix is None:
            return [{}]
        if not isinstance(matrix, dict):
            raise RehearsalError("strategy.matrix must be a mapping")
        if "include" in matrix or "exclude" in matrix:
            raise RehearsalError("strategy.matrix include/exclude are not rehearsed")
        keys = list(matrix)
        values = []
        for key in keys:
            vals = interpolate(matrix[key], ctx)
            if not isinstance(vals, list) or not vals:
                raise RehearsalError(
                    f"strategy.matrix.{key} must be a non-empty list, got {vals!r}"
                )
            values.append(vals)
        return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*values)]

    def run(self) -> int:
        """Run every job; 0 if none failed."""
        shutil.rmtree(self.out, ignore_errors=True)
        (self.out / "artifacts").mkdir(parents=True)
        (self.out / "logs").mkdir()
        self.steps = StepRunner(
            root=self.root,
            workflow=self.wf,
            event=self.event,
            artifacts=self.out / "artifacts",
            bindir=write_shims(self.work / "bin", self.root),
            echo=self.echo,
        )
        jobs = self.wf["jobs"]
        state: dict[str, dict[str, Any]] = {}
        start = time.monotonic()
        for job_id in self._order():
            job = jobs[job_id]
            needs = {n: state[n] for n in _as_list(job.get("needs"))}
            ok = all(n["result"] == "success" for n in needs.values())
            failed = any(n["result"] == "failure" for n in needs.values())
            ctx = self._contexts(needs=needs)
            status = {"success": ok, "failure": failed, "cancelled": False}
            if not condition(job.get("if"), ctx, status):
                self._say(f"== job {job_id}: skipped (if: {job.get('if', 'success()')})")
                self.results.append(JobResult(job_id, job_id, "skipped"))
                state[job_id] = {"result": "skipped", "outputs": {}}
                continue
            combos = self._combinations(job, ctx)
            fail_fast = (job.get("strategy") or {}).get("fail-fast", True)
            instance_results: list[JobResult] = []
            for combo in combos:
                if fail_fast and any(r.result == "failure" for r in instance_results):
                    label = self._label(job_id, combo)
                    instance_results.append(JobResult(job_id, label, "skipped"))
                    continue
                instance_results.append(self._run_job(job_id, job, combo, needs))
            self.results.extend(instance_results)
            result = (
                "failure" if any(r.result == "failure" for r in instance_results) else "success"
            )
            outputs: dict[str, str] = {}
            for r in instance_results:
                outputs.update(r.outputs)
            state[job_id] = {"result": result, "outputs": outputs}
        self._write_report(time.monotonic() - start)
        return 1 if any(r.result == "failure" for r in self.results) else 0

    @staticmethod
    def _label(job_id: str, combo: Mapping[str, Any]) -> str:
        return job_id + (f" ({', '.join(to_text(v) for v in combo.values())})" if combo else "")

    def _run_job(
        self, job_id: str, job: Mapping[str, Any], combo: dict, needs: dict[str, Any]
    ) -> JobResult:
        label = self._label(job_id, combo)
        slug = _slug(label)
        ws = self.work / "work" / slug
        temp = self.work / "tmp" / slug
        for d in (ws, temp):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
        log_path = self.out / "logs" / f"{slug}.log"
        summary = self.out / "summaries" / f"{slug}.md"
        summary.parent.mkdir(parents=True, exist_ok=True)
        timeout = float(interpolate(job.get("timeout-minutes", 360), self._contexts())) * 60
        deadline = time.monotonic() + timeout
        base = self._contexts(matrix=combo, needs=needs)
        env_ctx: dict[str, str] = {"ACT": "true"}
        for scope in (self.wf.get("env") or {}, job.get("env") or {}):
            for k, v in scope.items():
                env_ctx[k] = to_text(interpolate(v, {**base, "env": env_ctx}))
        steps_ctx: dict[str, Any] = {}
        job_failed, failed_step = False, ""
        start = time.monotonic()
        self._say(f"== job {label}")
        with log_path.open("w", encoding="utf-8") as log:
            for index, step in enumerate(job.get("steps") or []):
                name = (
                    step.get("name") or step.get("uses") or str(step.get("run", "")).split("\n")[0]
                )
                step_env = dict(env_ctx)
                job_status = {"status": "failure" if job_failed else "success"}
                ctx = {**base, "env": step_env, "steps": steps_ctx, "job": job_status}
                status = {"success": not job_failed, "failure": job_failed, "cancelled": False}
                sid = step.get("id") or f"__step{index}"
                try:
                    for k, v in (step.get("env") or {}).items():
                        step_env[k] = to_text(interpolate(v, ctx))
                    run_it = condition(step.get("if"), ctx, status)
                except ExpressionError as exc:
                    raise RehearsalError(f"job {label}, step '{name}': {exc}") from None
                if not run_it:
                    self._say(f"   - {name}: skipped")
                    log.write(f"\n## {name}: skipped (if: {step.get('if')})\n")
                    steps_ctx[sid] = {"outcome": "skipped", "conclusion": "skipped", "outputs": {}}
                    continue
                files = {n: temp / f"{n}-{index}" for n in ("output", "env", "summary")}
                for f in files.values():
                    f.write_text("", encoding="utf-8")
                t0 = time.monotonic()
                log.write(f"\n## {name}\n")
                log.flush()
                try:
                    if "uses" in step:
                        self.steps.action(step, ctx, ws, log)
                        ok = True
                    else:
                        ok = self.steps.shell(job, step, ctx, step_env, ws, files, log, deadline)
                except (RehearsalError, ExpressionError, OSError) as exc:
                    log.write(f"error: {exc}\n")
                    self._say(f"     error: {exc}")
                    ok = False
                outcome = "success" if ok else "failure"
                self._say(f"   - {name}: {outcome} ({time.monotonic() - t0:.1f} s)")
                steps_ctx[sid] = {
                    "outcome": outcome,
                    "conclusion": outcome,
                    "outputs": parse_kv_file(files["output"]),
                }
                env_ctx.update(parse_kv_file(files["env"]))
                text = files["summary"].read_text(encoding="utf-8")
                if text:
                    with summary.open("a", encoding="utf-8") as fh:
                        fh.write(text)
                if not ok and not job_failed:
                    job_failed, failed_step = True, name
        outputs = {}
        ctx = {**base, "env": env_ctx, "steps": steps_ctx}
        for key, value in (job.get("outputs") or {}).items():
            outputs[key] = to_text(interpolate(value, ctx))
        if not self.keep:
            shutil.rmtree(ws, ignore_errors=True)
            shutil.rmtree(temp, ignore_errors=True)
        result = "failure" if job_failed else "success"
        if job_failed:
            self._say(f"   job {label} failed at '{failed_step}'; log: {log_path}")
        return JobResult(
            job_id,
            label,
            result,
            round(time.monotonic() - start, 1),
            outputs,
            str(log_path),
            failed_step,
        )

    # -- report ---------------------------------------------------------------------------------

    def _write_report(self, seconds: float) -> None:
        summaries = sorted((self.out / "summaries").glob("*.md"))
        with (self.out / "summary.md").open("w", encoding="utf-8") as fh:
            for path in summaries:
                fh.write(f"<!-- job {path.stem} -->\n{path.read_text(encoding='utf-8')}\n")
        data = {
            "workflow": str(self.workflow_path),
            "inputs": self.inputs,
            "seconds": round(seconds, 1),
            "jobs": [asdict(r) for r in self.results],
            "artifacts": sorted(p.name for p in (self.out / "artifacts").iterdir()),
        }
        (self.out / "rehearsal.json").write_text(json.dumps(data, indent=2) + "\n")
        self._say(f"\nrehearsal of {self.workflow_path.name}: {seconds:.0f} s")
        for r in self.results:
            extra = f" at '{r.failed_step}'" if r.failed_step else ""
            self._say(f"  {r.result:8} {r.label} ({r.seconds:.0f} s){extra}")
        self._say(
            f"artifacts: {', '.join(data['artifacts']) or 'none'} in {self.out / 'artifacts'}"
        )
        self._say(f"step summaries: {self.out / 'summary.md'}")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; 0 if every job succeeded, 1 if one failed, 2 on unusable input."""
    parser = argparse.ArgumentParser(
        prog="python -m conformance.ci.rehearse",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("workflow", help="the workflow file, e.g. .github/workflows/nightly.yml")
    parser.add_argument("--root", default=".", help="the project folder (default: .)")
    parser.add_argument(
        "--input", action="append", default=[], metavar="NAME=VALUE", help="workflow input"
    )
    parser.add_argument(
        "--sessions",
        default=None,
        help="comma-separated nox sessions: sets the input 'filter' to match exactly these",
    )
    parser.add_argument("--event", default="workflow_dispatch", help="the triggering event")
    parser.add_argument(
        "--event-payload",
        metavar="FILE",
        help='github.event as JSON (a repository_dispatch\'s {"client_payload": ...})',
    )
    parser.add_argument("--out", default=None, help="output folder (default results/rehearsal)")
    parser.add_argument("--keep", action="store_true", help="keep the job workspaces")
    args = parser.parse_args(argv)
    inputs = {}
    for item in args.input:
        name, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--input {item!r}: expected NAME=VALUE")
        inputs[name] = value
    if args.sessions:
        names = [re.escape(s) for s in args.sessions.split(",") if s]
        inputs["filter"] = "^(" + "|".join(names) + ")$"
    root = Path(args.root).resolve()
    try:
        payload = json.loads(Path(args.event_payload).read_text()) if args.event_payload else {}
    except (OSError, ValueError) as exc:
        print(f"error: --event-payload {args.event_payload}: {exc}", file=sys.stderr)
        return 2
    try:
        rehearsal = Rehearsal(
            Path(args.workflow).resolve(),
            root,
            inputs=inputs,
            out=Path(args.out).resolve() if args.out else None,
            keep=args.keep,
            event=args.event,
            payload=payload,
        )
        return rehearsal.run()
    except (RehearsalError, ExpressionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

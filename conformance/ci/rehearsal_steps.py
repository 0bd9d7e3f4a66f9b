"""The steps of a rehearsed workflow job (:mod:`conformance.ci.rehearse`): a ``run:`` script under
its shell, or an emulated action.

A script runs under bash (or the step's, job's or workflow's ``shell``) in the job's workspace, with
``GITHUB_OUTPUT``, ``GITHUB_ENV`` and ``GITHUB_STEP_SUMMARY`` files the job runner reads back
(:func:`parse_kv_file`), the step's environment, and the shims of :func:`write_shims` first on
``PATH``. Emulated actions: ``actions/checkout`` (a copy of the project, without ``.git``, ``.nox``,
``results``, build products), ``actions/setup-python`` (the host python),
``actions/upload-artifact`` / ``actions/download-artifact`` (a local artifact store with their v4
layout: one folder per artifact, ``pattern`` downloads into ``path/<name>/``). Any other action is
an error.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.ci.expressions import interpolate, to_text
from conformance.ci.relay import ACTION, CallbackError, callback
from conformance.ci.sources import iter_files
from conformance.processes import launch

__all__ = ["RehearsalError", "StepRunner", "parse_kv_file", "write_shims"]


class RehearsalError(Exception):
    """A workflow the rehearsal cannot run as written (one-line message)."""


def parse_kv_file(path: Path) -> dict[str, str]:
    """GITHUB_OUTPUT / GITHUB_ENV: ``name=value`` lines and ``name<<DELIM`` blocks."""
    out: dict[str, str] = {}
    if not path.is_file():
        return out
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            block: list[str] = []
            i += 1
            while i < len(lines) and lines[i] != delim:
                block.append(lines[i])
                i += 1
            out[name.strip()] = "\n".join(block)
        elif "=" in line:
            name, value = line.split("=", 1)
            out[name.strip()] = value
        i += 1
    return out


def _search_root(ws: Path, pattern: str) -> Path:
    """Where upload-artifact roots the files of a path: the folders before its first wildcard
    (the hierarchy after it is kept, even for one match), else the folder itself or a file's."""
    parts = Path(pattern).parts
    for i, part in enumerate(parts):
        if any(c in part for c in "*?["):
            return ws.joinpath(*parts[:i])
    path = ws / pattern
    return path if path.is_dir() else path.parent


def write_shims(bindir: Path, root: Path) -> Path:
    """``python`` (this interpreter) and ``nox`` (sharing <root>/.nox) for the steps."""
    bindir.mkdir(parents=True, exist_ok=True)
    py = shlex.quote(sys.executable)
    envdir = shlex.quote(str(root / ".nox"))
    scripts = {
        "python": f'exec {py} "$@"',
        "python3": f'exec {py} "$@"',
        "nox": f'exec {py} -m nox --envdir {envdir} "$@"',
    }
    for name, body in scripts.items():
        path = bindir / name
        path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
        path.chmod(0o755)
    return bindir


@dataclass
class StepRunner:
    """Runs the steps of one rehearsal's jobs."""

    root: Path  # the project (actions/checkout copies it)
    workflow: Mapping[str, Any]  # the parsed workflow (its defaults.run.shell)
    event: str  # the triggering event (GITHUB_EVENT_NAME)
    artifacts: Path  # the local artifact store, one folder per artifact
    bindir: Path  # the shims, first on the steps' PATH
    echo: bool = True  # copy the scripts' output to stdout

    def shell(
        self,
        job: Mapping[str, Any],
        step: Mapping[str, Any],
        ctx: Mapping[str, Any],
        step_env: Mapping[str, str],
        ws: Path,
        files: Mapping[str, Path],
        log: Any,
        deadline: float,
    ) -> bool:
        """Run a ``run:`` step in workspace ``ws`` until ``deadline``; whether it exited 0."""
        script = to_text(interpolate(step["run"], ctx))
        shell = (
            step.get("shell")
            or ((job.get("defaults") or {}).get("run") or {}).get("shell")
            or ((self.workflow.get("defaults") or {}).get("run") or {}).get("shell")
            or "bash"
        )
        path = files["output"].parent / (files["output"].name.replace("output", "script"))
        path.write_text(script + "\n", encoding="utf-8")
        if shell == "bash":
            argv = ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(path)]
        elif shell == "sh":
            argv = ["sh", "-e", str(path)]
        elif shell == "python":
            argv = [sys.executable, str(path)]
        elif "{0}" in shell:
            argv = [a.replace("{0}", str(path)) for a in shlex.split(shell)]
        else:
            raise RehearsalError(f"shell {shell!r} is not rehearsed")
        cwd = ws / step.get("working-directory", ".")
        env = {k: v for k, v in os.environ.items() if not k.startswith("NOX_CURRENT")}
        env.update(step_env)
        env.update(
            {
                "PATH": f"{self.bindir}{os.pathsep}{os.environ.get('PATH', '')}",
                "GITHUB_OUTPUT": str(files["output"]),
                "GITHUB_ENV": str(files["env"]),
                "GITHUB_STEP_SUMMARY": str(files["summary"]),
                "GITHUB_WORKSPACE": str(ws),
                "GITHUB_REPOSITORY": ctx["github"]["repository"],
                "GITHUB_EVENT_NAME": self.event,
                "RUNNER_TEMP": str(files["output"].parent),
                "RUNNER_OS": "Linux",
            }
        )
        log.write(f"$ {script}\n")
        log.flush()
        proc = launch.tool_process(
            argv,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        remaining = max(deadline - time.monotonic(), 1.0)
        timer = threading.Timer(remaining, lambda: os.killpg(proc.pid, signal.SIGTERM))
        timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                if self.echo:
                    sys.stdout.write("     | " + line)
            rc = proc.wait()
        finally:
            timer.cancel()
        log.write(f"(exit status {rc})\n")
        return rc == 0

    def action(self, step: Mapping[str, Any], ctx: Mapping[str, Any], ws: Path, log: Any) -> None:
        """Emulate a ``uses:`` step; :class:`RehearsalError` for an action not emulated."""
        uses = str(step["uses"])
        action = uses.split("@")[0]
        raw_with = step.get("with") or {}
        with_ = {k: to_text(interpolate(v, ctx)) for k, v in raw_with.items()}
        if action == "actions/checkout":
            if with_.get("path") not in (None, "", "."):
                raise RehearsalError("actions/checkout with path: is not rehearsed")
            count = 0
            for rel in iter_files(self.root):
                target = ws / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(self.root / rel, target)
                count += 1
            log.write(f"checkout: copied {count} files of {self.root}\n")
        elif action == "actions/setup-python":
            log.write(f"setup-python: host python {sys.version.split()[0]} ({with_})\n")
        elif action == "actions/upload-artifact":
            self._upload(with_, ws, log)
        elif action == "actions/download-artifact":
            self._download(with_, ws, log)
        elif action == ACTION:  # PyTorch's relay: what it would be sent, written down
            try:
                sent = callback(with_, ctx, self.artifacts.parent / "crcr-callbacks.jsonl")
            except CallbackError as exc:
                raise RehearsalError(str(exc)) from None
            log.write(f"crcr callback: {sent['workflow']['status']} "
                      f"{sent['workflow']['conclusion'] or ''}\n")  # fmt: skip
        else:
            raise RehearsalError(f"action {uses} is not emulated by the rehearsal")

    def _upload(self, with_: Mapping[str, str], ws: Path, log: Any) -> None:
        name = with_.get("name") or "artifact"
        patterns = [p.strip() for p in with_.get("path", "").splitlines() if p.strip()]
        if any(p.startswith("!") for p in patterns):
            raise RehearsalError("upload-artifact exclusions (!pattern) are not rehearsed")
        files: list[Path] = []
        roots: list[Path] = []
        for pattern in patterns:
            found = []
            for match in sorted(glob.glob(str(ws / pattern), recursive=True)):
                path = Path(match)
                if path.is_dir():
                    found += [p for p in path.rglob("*") if p.is_file()]
                elif path.is_file():
                    found.append(path)
            if found:
                files += found
                roots.append(_search_root(ws, pattern))
        dest = self.artifacts / name
        if not files:
            mode = with_.get("if-no-files-found", "warn")
            message = f"upload-artifact {name}: no files found at {', '.join(patterns)}"
            log.write(message + "\n")
            if mode == "error":
                raise RehearsalError(message)
            return
        if dest.exists() and with_.get("overwrite", "false") != "true":
            raise RehearsalError(f"an artifact named {name} exists already (v4 cannot overwrite)")
        shutil.rmtree(dest, ignore_errors=True)
        base = Path(os.path.commonpath([str(r) for r in roots]))
        for f in files:
            target = dest / f.relative_to(base)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target)
        log.write(f"upload-artifact {name}: {len(files)} files from {base}\n")

    def _download(self, with_: Mapping[str, str], ws: Path, log: Any) -> None:
        store = self.artifacts
        target = ws / with_.get("path", ".")
        available = sorted(p.name for p in store.iterdir() if p.is_dir())
        if with_.get("name"):
            if with_["name"] not in available:
                raise RehearsalError(f"download-artifact: no artifact named {with_['name']}")
            chosen, nested = [with_["name"]], False
        else:
            pattern = with_.get("pattern") or "*"
            chosen = [a for a in available if fnmatch.fnmatch(a, pattern)]
            nested = with_.get("merge-multiple", "false") != "true"
        for name in chosen:
            dest = target / name if nested else target
            shutil.copytree(store / name, dest, dirs_exist_ok=True)
        log.write(f"download-artifact: {', '.join(chosen) or 'nothing'} into {target}\n")

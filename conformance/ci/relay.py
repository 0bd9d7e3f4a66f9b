"""PyTorch's Cross-Repository CI Relay callback (the action
`pytorch/test-infra/.github/actions/cross-repo-ci-relay-callback`) as the rehearsal runs it: its
inputs are checked as the action checks them (status, the nightly self-report's delivery-id and
event-type, JSON inputs), and the payload it would POST to the relay is appended to
`<rehearsal>/crcr-callbacks.jsonl` instead."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ACTION = "pytorch/test-infra/.github/actions/cross-repo-ci-relay-callback"
CATEGORIES = ("upstream", "backend", "infra", "flake", "unknown")


class CallbackError(ValueError):
    """A callback step the action would refuse (one line)."""


def _json(with_: Mapping[str, str], name: str, kind: type) -> Any:
    text = (with_.get(name) or "").strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CallbackError(f"{ACTION}: {name} is not valid JSON ({exc})") from None
    if not isinstance(value, kind):
        raise CallbackError(f"{ACTION}: {name} must be a JSON {kind.__name__}")
    return value


def callback(with_: Mapping[str, str], ctx: Mapping[str, Any], out: Path) -> dict[str, Any]:
    """Check the step's inputs and append what the action would send; returns it."""
    status, conclusion = with_.get("status", ""), with_.get("conclusion", "").strip()
    delivery, event_type = with_.get("delivery-id", "").strip(), with_.get("event-type", "").strip()
    if status not in ("in_progress", "completed"):
        raise CallbackError(f"{ACTION}: status must be in_progress or completed, not {status!r}")
    if bool(delivery) != bool(event_type):
        raise CallbackError(f"{ACTION}: delivery-id and event-type go together (nightly mode)")
    if event_type and (event_type not in ("nightly", "periodic") or status != "completed"):
        raise CallbackError(f"{ACTION}: a self-report is nightly or periodic, and completed")
    if status == "completed" and not conclusion:
        raise CallbackError(f"{ACTION}: a completed callback needs its conclusion")
    github = ctx.get("github") or {}
    if event_type:
        payload: dict[str, Any] = {"event_type": event_type, "delivery_id": delivery,
                                   "payload": {"head_sha": delivery}}  # fmt: skip
    else:
        payload = dict((github.get("event") or {}).get("client_payload") or {})
        if not payload:
            raise CallbackError(f"{ACTION}: no client_payload: the relay rejects a callback "
                                 "without its dispatch (rehearse with --event repository_dispatch "
                                 "--event-payload FILE)")  # fmt: skip
    failed = _json(with_, "failed-tests-detail", list) or []
    if any(not isinstance(t, dict) or "name" not in t for t in failed):
        raise CallbackError(f"{ACTION}: each failed-tests-detail entry needs a name")
    verdict = _json(with_, "triage-verdict", dict)
    if verdict is not None and (verdict.get("schema_version") != 1
                                or verdict.get("category") not in CATEGORIES):  # fmt: skip
        raise CallbackError(f"{ACTION}: triage-verdict is not schema_version 1 with a category")
    payload["workflow"] = {
        "status": status,
        "conclusion": conclusion if status == "completed" else None,
        "name": github.get("workflow", ""),
        "job_name": with_.get("job-name") or "",
        "test_results": _json(with_, "test-results", dict),
        "failed_tests_detail": failed[:1000],
        "triage_verdict": verdict,
        "artifact_url": with_.get("artifact-url") or None,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(payload) + "\n")
    return payload

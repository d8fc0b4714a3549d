"""``endpoint``: /health answers, /v1/models lists the served name, and its max_model_len is the expected one."""

from __future__ import annotations

import time
from typing import Any

from forklift.check.session import Session
from forklift.results import CheckResult


def score_models(listing: list[dict[str, Any]], model: str, expected_max_model_len: int | None) -> list[str]:
    """Problems with a /v1/models listing (pure: unit-tested on recorded listings)."""
    ids = [str(m.get("id")) for m in listing]
    entry = next((m for m in listing if m.get("id") == model), None)
    if entry is None:
        return [f"model '{model}' is not served here; /v1/models lists: {', '.join(ids) or 'nothing'}"]
    listed = entry.get("max_model_len")
    if expected_max_model_len is not None and listed is not None and listed != expected_max_model_len:
        return [f"max_model_len is {listed} on the server, expected {expected_max_model_len}"]
    return []


def check_endpoint(s: Session) -> CheckResult:
    t0 = time.monotonic()
    problems: list[str] = []
    warnings: list[str] = []
    health, ev_health = s.get("GET /health", "/health")
    if health.status_code == 404:
        warnings.append("no /health route (not a vLLM server?)")
    elif health.status_code != 200:
        problems.append(f"/health answered HTTP {health.status_code}")
    resp, ev_models = s.get("GET /v1/models", "/v1/models")
    evidence = [ev_health, ev_models]
    listing = s.discovery.listing if resp.status_code != 200 else _data(resp.json())
    model_problems = score_models(listing, s.model, s.target.max_model_len)
    problems += model_problems
    details: dict[str, Any] = {"models": [m.get("id") for m in listing], "max_model_len": s.discovery.max_model_len,
                               "expected_max_model_len": s.target.max_model_len, "version": s.discovery.version}
    fix = None
    if any("not served" in p for p in model_problems):
        names = ", ".join(str(m) for m in details["models"])
        fix = (f"Check the served name: this server serves {names}. Pass --model with one of them, or restart the "
               f"run so its served_name matches.")
    elif model_problems:
        fix = (f"The server runs with max_model_len={s.discovery.max_model_len}. Restart it with the recipe's value "
               f"(`forklift down` then `forklift up`), or expect that value with --max-model-len.")
    elif problems:
        fix = "The engine is unhealthy: see `forklift logs` and `forklift doctor`."
    seconds = time.monotonic() - t0
    if problems:
        return CheckResult("endpoint", "fail", "; ".join(problems), evidence=evidence, fix=fix, seconds=seconds,
                           details=details)
    listed = s.discovery.max_model_len
    summary = f"/health 200; '{s.model}' listed with max_model_len {listed}"
    if s.target.max_model_len is not None:
        summary += " (as expected)"
    if warnings:
        return CheckResult("endpoint", "warn", summary + "; " + "; ".join(warnings), evidence=evidence, seconds=seconds,
                           details=details)
    return CheckResult("endpoint", "ok", summary, evidence=evidence, seconds=seconds, details=details)


def _data(body: Any) -> list[dict[str, Any]]:
    if isinstance(body, dict) and isinstance(body.get("data"), list):
        return [m for m in body["data"] if isinstance(m, dict)]
    return []

"""``speculative`` (``check --full``): the server exports vLLM's spec-decode counters, and on a repetitive prompt
(where any working drafter should score) the mean acceptance length clears a threshold.

The counters are server-wide: a request from someone else during the check is counted too (the evidence says
how many tokens were generated in the window, against the check's own).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import httpx

from forklift.endpoint import Endpoint
from forklift.results import CheckResult, Evidence, Status, excerpt
from forklift.speculative import metrics, workload

CHECK_ID = "speculative"
MIN_ACCEPTANCE_LENGTH = 1.5
"""Tokens per drafted step (bonus token included) a working drafter reaches on a copy prompt; 1.0 means nothing
was accepted. vLLM's own CPU spec-decode tests gate eagle3 / dflash / mtp at 1.5
(tests/v1/e2e/test_cpu_spec_decode.py@0.33)."""
MAX_TOKENS = 128


def _scrape(http: Endpoint, model: str) -> tuple[metrics.Counters | None, Evidence]:
    t0 = time.monotonic()
    try:
        resp = http.get("/metrics")
    except httpx.HTTPError as exc:
        return None, Evidence("GET /metrics", response=f"{type(exc).__name__}: {exc}", seconds=time.monotonic() - t0)
    ev = Evidence("GET /metrics", request={"method": "GET", "path": "/metrics"},
                  response=f"HTTP {resp.status_code}", seconds=time.monotonic() - t0)
    if resp.status_code != 200:
        return None, ev
    try:
        return metrics.parse(resp.text, model), ev
    except ValueError as exc:
        ev.note = f"not Prometheus text: {exc}"
        return None, ev


def _complete(http: Endpoint, model: str, prompt: str, max_tokens: int) -> tuple[dict[str, Any] | None, Evidence]:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    shown = {**body, "prompt": f"{prompt[:120]} ... [{len(prompt)} chars]"}
    t0 = time.monotonic()
    try:
        resp = http.post("/v1/completions", body)
    except httpx.HTTPError as exc:
        return None, Evidence("repetitive prompt", request=shown, response=f"{type(exc).__name__}: {exc}",
                              seconds=time.monotonic() - t0)
    ev = Evidence("repetitive prompt", request=shown, response=f"HTTP {resp.status_code}: {excerpt(resp.text)}",
                  seconds=time.monotonic() - t0)
    if resp.status_code != 200:
        return None, ev
    data: dict[str, Any] = resp.json()
    return data, ev


def judge(stats: Mapping[str, Any], *, threshold: float = MIN_ACCEPTANCE_LENGTH) -> tuple[Status, str, str | None]:
    """(status, summary, fix) for the acceptance over the check's window (pure)."""
    drafts = stats.get("num_drafts") or 0
    length = stats.get("acceptance_length")
    per_pos = ", ".join(f"{p:.2f}" for p in stats.get("per_position_acceptance_rate") or [] if p is not None)
    if not drafts or length is None:
        return ("fail", "no draft was proposed on a repetitive prompt (spec-decode counters did not move)",
                "Check the server log for 'SpecDecoding metrics' lines; --disable-log-stats stops the counters, and "
                "a draft that never matches the target proposes nothing useful.")
    tail = f"mean acceptance length {length:.2f} over {drafts:.0f} drafted steps (per position: {per_pos})"
    if length < threshold:
        return ("fail", f"{tail}, below {threshold:.2f} on a prompt any working drafter copies",
                "The draft does not match the target (wrong checkpoint or quantization), or the layout breaks it "
                "(DCP or PP on the V1 runner): see `forklift plan` notes and `forklift doctor`.")
    return "ok", tail, None


def check_speculative(http: Endpoint, model: str, *, configured: Mapping[str, Any] | None,
                      max_model_len: int | None = None, threshold: float = MIN_ACCEPTANCE_LENGTH) -> CheckResult:
    """``http``: a client on the server's base URL (with its auth header). ``configured``: the recipe's
    ``serve.speculative`` when the run record knows it (None: a URL target, unknown)."""
    t0 = time.monotonic()
    before, ev0 = _scrape(http, model)
    evidence = [ev0]
    if before is None or not before.present:
        if configured:
            return CheckResult(CHECK_ID, "fail", "speculative decoding is configured but /metrics has no "
                               "vllm:spec_decode_* counters", evidence=evidence, seconds=time.monotonic() - t0,
                               fix="Check that the server runs the recipe's --speculative-config (`forklift logs`).")
        return CheckResult(CHECK_ID, "skip", "skipped: the server runs without speculative decoding (no "
                           "vllm:spec_decode_* counters)", evidence=evidence, seconds=time.monotonic() - t0)
    small = max_model_len is not None and max_model_len < 2048
    p = workload.prompt("copy", functions=1 if small else 3, seed=7)  # ~500 / ~1,400 prompt tokens (SmolLM2)
    max_tokens = MAX_TOKENS if max_model_len is None else max(16, min(MAX_TOKENS, max_model_len // 8))
    data, ev1 = _complete(http, model, p.text, max_tokens)
    evidence.append(ev1)
    after, ev2 = _scrape(http, model)
    evidence.append(ev2)
    if data is None or after is None:
        return CheckResult(CHECK_ID, "fail", "the repetitive prompt or the second /metrics scrape failed",
                           evidence=evidence, seconds=time.monotonic() - t0,
                           fix="See the evidence; `forklift status` and `forklift logs` show the server's state.")
    stats = metrics.delta(before, after)
    status, summary, fix = judge(stats, threshold=threshold)
    usage = data.get("usage") or {}
    details = {**stats, "threshold": threshold, "completion_tokens": usage.get("completion_tokens"),
               "configured": dict(configured) if configured else None}
    return CheckResult(CHECK_ID, status, summary, details=details, fix=fix,
                       evidence=evidence, seconds=time.monotonic() - t0)

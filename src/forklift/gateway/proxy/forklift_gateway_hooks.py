"""forklift's hooks inside LiteLLM's proxy: key check, per-key model allow-list and rate limit, the 503 for a
model whose run is down, and the local usage/audit log. Standalone: imports nothing from forklift (it runs in the
gateway's own environment); the files it reads and writes are in FORKLIFT_GATEWAY_DIR:

- ``keys.json``: name -> {sha256, models, rpm, revoked}, written by `forklift gateway key` (read again when it
  changes, so a revoke takes effect on the next request);
- ``health.json``: model -> {run, state, healthy, problems}, written by the gateway's watcher;
- ``audit.jsonl``: one line per request (who, when, model, tokens, status; content only when
  ``FORKLIFT_GATEWAY_LOG_CONTENT=1``), rotated at ``FORKLIFT_GATEWAY_AUDIT_MAX_BYTES``.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from fastapi import HTTPException, Request
from litellm.integrations.custom_logger import CustomLogger
from litellm.proxy._types import UserAPIKeyAuth

DIR = Path(os.environ.get("FORKLIFT_GATEWAY_DIR", "."))
LOG_CONTENT = os.environ.get("FORKLIFT_GATEWAY_LOG_CONTENT") == "1"
MAX_BYTES = int(os.environ.get("FORKLIFT_GATEWAY_AUDIT_MAX_BYTES", str(50 * 1024 * 1024)))
KEEP = 5
# What a non-admin key may call: the OpenAI routes whose model is the body's "model" (LiteLLM also routes
# /openai/deployments/{model}/... and /engines/{model}/... by the model in the path, and serves its admin API: those
# are the admin key's), the model list and the liveness probes.
INFERENCE_ROUTES = frozenset(f"{v}/{r}" for v in ("", "/v1") for r in ("chat/completions", "completions",
                                                                        "responses", "embeddings"))
OPEN_ROUTES = frozenset({"/v1/models", "/models", "/health/liveliness", "/health/liveness", "/health/readiness"})
_lock = threading.Lock()
_cache: dict[str, tuple[float, Any]] = {}
_recent: dict[str, collections.deque[float]] = collections.defaultdict(collections.deque)


def _read(name: str) -> Any:
    p = DIR / name
    try:
        mtime = p.stat().st_mtime_ns
    except FileNotFoundError:
        return {}
    hit = _cache.get(name)
    if hit is not None and hit[0] == mtime:
        return hit[1]
    data = json.loads(p.read_text() or "{}")
    _cache[name] = (mtime, data)
    return data


def audit(entry: dict[str, Any]) -> None:
    """Append one line to audit.jsonl, rotating it (audit.jsonl.1 .. .5) past MAX_BYTES."""
    line = json.dumps({"ts": round(time.time(), 3), **entry}) + "\n"
    p = DIR / "audit.jsonl"
    with _lock:
        if p.exists() and p.stat().st_size + len(line) > MAX_BYTES:
            for i in range(KEEP - 1, 0, -1):
                older = p.with_name(f"audit.jsonl.{i}")
                if older.exists():
                    older.replace(p.with_name(f"audit.jsonl.{i + 1}"))
            p.replace(p.with_name("audit.jsonl.1"))
        # owner-only: under FORKLIFT_GATEWAY_LOG_CONTENT=1 it holds prompts and answers
        with os.fdopen(os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "a") as f:
            f.write(line)


def _refuse(code: int, why: str, key: str | None, model: str | None, route: str) -> HTTPException:
    audit({"key": key, "model": model, "route": route, "status": code, "error": why})
    return HTTPException(status_code=code, detail=why)


def _find(api_key: str) -> tuple[str, dict[str, Any]] | None:
    digest = hashlib.sha256(api_key.encode()).hexdigest()
    admin = (DIR / "admin.sha256")
    if admin.exists() and hmac.compare_digest(admin.read_text().strip(), digest):
        return "forklift-admin", {"models": None, "rpm": None, "admin": True}
    for name, entry in _read("keys.json").items():
        if hmac.compare_digest(str(entry.get("sha256", "")), digest):
            return name, {**entry, "admin": False}
    return None


async def _model_of(request: Request) -> str | None:
    if request.method != "POST":
        return None
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError:
        return None
    model = body.get("model") if isinstance(body, dict) else None
    return str(model) if model is not None else None


async def user_api_key_auth(request: Request, api_key: str) -> UserAPIKeyAuth:
    """LiteLLM's custom_auth: a known, unrevoked key, a model on its list, under its rate, whose run serves."""
    route = request.url.path
    model = await _model_of(request)
    token = api_key.removeprefix("Bearer ").strip() if api_key else ""
    found = _find(token) if token else None
    if found is None:
        raise _refuse(401, "a valid gateway key is required (Authorization: Bearer KEY)", None, model, route)
    name, entry = found
    if entry.get("revoked"):
        raise _refuse(401, f"key {name!r} was revoked", name, model, route)
    allowed = entry.get("models")
    if not entry["admin"]:
        path = route.rstrip("/") or "/"
        if path not in INFERENCE_ROUTES and path not in OPEN_ROUTES:
            raise _refuse(403, f"key {name!r} may call {', '.join(sorted(INFERENCE_ROUTES | OPEN_ROUTES))}, not "
                          f"{route}", name, model, route)
        if "model" in request.query_params:  # LiteLLM prefers ?model= over the body's: one place only
            raise _refuse(400, f"key {name!r}: name the model in the JSON body's \"model\", not in the query "
                          "string", name, model, route)
        if path in INFERENCE_ROUTES and model is None and allowed is not None:
            raise _refuse(400, f"key {name!r} is limited to models {', '.join(allowed)}: name one in the JSON "
                          "body's \"model\"", name, model, route)
    if model is not None and allowed is not None and model not in allowed:
        raise _refuse(403, f"key {name!r} may not use model {model!r} (allowed: {', '.join(allowed)})", name, model,
                      route)
    rpm = entry.get("rpm")
    if rpm:
        now, recent = time.monotonic(), _recent[name]
        while recent and now - recent[0] > 60:
            recent.popleft()
        if len(recent) >= int(rpm):
            raise _refuse(429, f"key {name!r} is over its rate limit ({rpm} requests per minute)", name, model, route)
        recent.append(now)
    health = _read("health.json").get(model) if model is not None else None
    if health is not None and not health.get("healthy", True):
        why = "; ".join(health.get("problems") or []) or "not serving"
        raise _refuse(503, f"model {model!r} is unavailable: run {health.get('run')!r} is {health.get('state')}"
                      f" ({why})", name, model, route)
    return UserAPIKeyAuth(api_key=hashlib.sha256(token.encode()).hexdigest(), key_alias=name, user_id=name,
                          models=list(allowed) if allowed is not None else [])


def _entry(kwargs: dict[str, Any], status: int, error: str | None = None) -> dict[str, Any]:
    slo = kwargs.get("standard_logging_object") or {}
    meta = slo.get("metadata") or {}
    out: dict[str, Any] = {
        "key": meta.get("user_api_key_alias") or meta.get("user_api_key_user_id"),
        "model": slo.get("model_group") or kwargs.get("model"),
        "route": "/v1/chat/completions" if slo.get("call_type") in ("acompletion", "completion")
        else slo.get("call_type"),
        "status": status,
        "prompt_tokens": int(slo.get("prompt_tokens") or 0),
        "completion_tokens": int(slo.get("completion_tokens") or 0),
        "stream": bool(slo.get("stream")),
        "latency_s": round(float(slo.get("response_time") or 0.0), 4),
    }
    if error is not None:
        out["error"] = error[:500]
    if LOG_CONTENT:
        out["messages"] = slo.get("messages")
        out["response"] = slo.get("response")
    return out


class AuditLogger(CustomLogger):  # type: ignore[misc]
    """Every answered or failed request, with the key's name and token counts, into audit.jsonl."""

    async def async_log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
        audit(_entry(kwargs, 200))

    async def async_log_failure_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
        exc = kwargs.get("exception")
        code = int(getattr(exc, "status_code", 500) or 500)
        if code in (401, 403, 429) or (code == 503 and "is unavailable: run" in str(exc)):
            return  # refused by user_api_key_auth, which wrote the line with the key's name
        audit(_entry(kwargs, code, str(exc)))


logger = AuditLogger()

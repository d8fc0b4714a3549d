"""Whom to benchmark: a run record (endpoint, served name, model path, plan) or a bare URL."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import httpx

from forklift import record as records
from forklift.errors import BenchError


@dataclass(frozen=True)
class Roofline:
    """The planner's single-stream decode limit, or why there is none."""

    decode_tok_s: float | None
    source: str


@dataclass(frozen=True)
class Target:
    base_url: str
    model: str
    max_model_len: int | None
    tokenizer: str | None
    """A local path or hub id for transformers; None means ask the server's /tokenize."""
    run_name: str | None = None
    api_key: str | None = None
    roofline: Roofline = Roofline(None, "no run record")

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def _models(base_url: str, headers: dict[str, str], timeout: float) -> list[dict[str, Any]]:
    try:
        resp = httpx.get(f"{base_url}/v1/models", timeout=timeout, headers=headers)
    except httpx.HTTPError as exc:
        raise BenchError(f"{base_url} is unreachable: {type(exc).__name__}: {exc}",
                         fix="Check the URL, or start a deployment with `forklift up`.") from exc
    if resp.status_code != 200:
        raise BenchError(f"{base_url}/v1/models answered HTTP {resp.status_code}: {resp.text[:200]}",
                         fix="Point --url at an OpenAI-compatible server (without /v1).")
    try:
        data = resp.json()["data"]
    except (ValueError, KeyError, TypeError) as exc:
        raise BenchError(f"{base_url}/v1/models did not return a model list",
                         fix="Point --url at an OpenAI-compatible server (without /v1).") from exc
    return [m for m in data if isinstance(m, dict)]


def from_url(url: str, *, model: str | None = None, tokenizer: str | None = None, api_key: str | None = None,
             timeout: float = 10.0) -> Target:
    """Ask the server which models it serves and their context length."""
    base = url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    cards = _models(base, headers, timeout)
    if not cards:
        raise BenchError(f"{base} serves no models", fix="Check the server's startup log.")
    names = [str(c.get("id")) for c in cards]
    if model is None:
        card = cards[0]
    else:
        matching = [c for c in cards if c.get("id") == model]
        if not matching:
            raise BenchError(f"{base} does not serve {model!r} (it serves {', '.join(names)})",
                             fix=f"Pass --model {names[0]}.")
        card = matching[0]
    max_len = card.get("max_model_len")
    return Target(base_url=base, model=str(card["id"]), max_model_len=int(max_len) if max_len else None,
                  tokenizer=tokenizer, api_key=api_key)


def from_record(name: str, *, model: str | None = None, tokenizer: str | None = None, timeout: float = 10.0) -> Target:
    """The run's endpoint and served name; its model path for the tokenizer; the planner's roofline."""
    rec = records.load(name)
    api_key = os.environ.get(rec.api_key_env) if rec.api_key_env else None
    live = from_url(rec.endpoint, model=model or rec.served_name, api_key=api_key, timeout=timeout)
    max_len = live.max_model_len or rec.recipe.serve.max_model_len
    return Target(base_url=live.base_url, model=live.model, max_model_len=max_len,
                  tokenizer=tokenizer or rec.launch.model_path, run_name=rec.name, api_key=api_key,
                  roofline=planned_roofline(rec))


def planned_roofline(rec: records.RunRecord) -> Roofline:
    """``decode_tok_s_single`` from the record's plan, or why there is none (a record never re-plans)."""
    plan = rec.planned
    if plan is None:
        return Roofline(None, f"no plan in the run record: {getattr(rec.plan, 'error', 'unplanned')}")
    value = plan.roofline.decode_tok_s_single
    if value <= 0:
        return Roofline(None, "plan has no decode_tok_s_single")
    return Roofline(value, "run record plan")

"""One connection to the target: the official ``openai`` client for the API (it is what users run, so it is
what the checks exercise), the :class:`forklift.endpoint.Endpoint` for vLLM's own routes and discovery.

Every call returns what came back together with an :class:`Evidence` entry, so checks stay short. A request
that fails becomes evidence of failure; a target that cannot be checked at all raises EndpointError (from
discovery, in :func:`open_session`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
from openai.types.chat import ChatCompletion

from forklift.endpoint import Discovery, Endpoint, Target, sse
from forklift.errors import CheckError
from forklift.results import Evidence, excerpt

DEFAULT_TIMEOUT_S = 180.0


class RequestFailed(Exception):
    """A request inside a check failed; carries the evidence so the check can fail with it."""

    def __init__(self, evidence: Evidence) -> None:
        super().__init__(evidence.response)
        self.evidence = evidence

    @property
    def response(self) -> str:
        return self.evidence.response or ""


@dataclass
class StreamedChat:
    """A streamed chat completion, assembled."""

    content: str = ""
    reasoning: str = ""
    finish_reasons: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict[str, str]] = field(default_factory=dict)
    usage: dict[str, int] | None = None
    chunks: int = 0


def reasoning_field(obj: Any) -> str | None:
    """Which field carried reasoning text, if any (the names ``forklift.endpoint.sse`` reads; the openai client
    keeps them as extras)."""
    extra: dict[str, Any] = getattr(obj, "model_extra", None) or {}
    for key in sse.REASONING_FIELDS:
        value = extra.get(key) if key in extra else getattr(obj, key, None)
        if isinstance(value, str) and value:
            return key
    return None


def _reasoning_of(obj: Any) -> str:
    key = reasoning_field(obj)
    if key is None:
        return ""
    extra: dict[str, Any] = getattr(obj, "model_extra", None) or {}
    return str(extra.get(key) if key in extra else getattr(obj, key))


def message_reasoning(resp: ChatCompletion) -> str:
    return _reasoning_of(resp.choices[0].message) if resp.choices else ""


def _error_text(exc: Exception) -> str:
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {excerpt(exc.response.text)}"
    return f"{type(exc).__name__}: {exc}"


class Session:
    """Requests against one target, each recorded as evidence. Build it with :func:`open_session`."""

    def __init__(self, target: Target, discovery: Discovery, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        if target.model is None:
            raise CheckError("no model to check", fix="Pass --model NAME.")
        self.target = target
        self.discovery = discovery
        self.model: str = target.model
        self.timeout_s = timeout_s
        self.endpoint = Endpoint.of(target, timeout=timeout_s)
        self.client = self.openai_client(target.api_key)

    def openai_client(self, api_key: str | None, *, timeout_s: float | None = None) -> openai.OpenAI:
        """An ``openai.OpenAI`` client for the target, as users build it ("EMPTY" when there is no key)."""
        return openai.OpenAI(base_url=f"{self.target.base_url}/v1", api_key=api_key or "EMPTY",
                             max_retries=0, timeout=timeout_s or self.timeout_s)

    def close(self) -> None:
        self.endpoint.close()
        self.client.close()

    # -- raw routes ---------------------------------------------------------------------------------

    def get(self, label: str, path: str) -> tuple[httpx.Response, Evidence]:
        t0 = time.monotonic()
        resp = self.endpoint.get(path)
        ev = Evidence(label, request={"method": "GET", "path": path},
                      response=f"HTTP {resp.status_code}: {excerpt(resp.text)}", seconds=time.monotonic() - t0)
        return resp, ev

    # -- chat ----------------------------------------------------------------------------------------

    def chat(self, label: str, *, client: openai.OpenAI | None = None,
             **kwargs: Any) -> tuple[ChatCompletion, Evidence]:
        """A non-streamed chat completion; raises :class:`RequestFailed` with the evidence on any error."""
        body = {"model": self.model, **kwargs}
        t0 = time.monotonic()
        try:
            resp = (client or self.client).chat.completions.create(**body)
        except (openai.OpenAIError, httpx.HTTPError) as exc:
            raise RequestFailed(_evidence(label, body, _error_text(exc), t0)) from exc
        return resp, _evidence(label, body, excerpt(_describe(resp)), t0)

    def raw_chat(self, label: str, **kwargs: Any) -> tuple[bytes, Evidence]:
        """A non-streamed chat completion's body as raw bytes (to see what is on the wire, invalid UTF-8
        included); raises :class:`RequestFailed` for a transport error or a status other than 200."""
        body = {"model": self.model, **kwargs}
        t0 = time.monotonic()
        try:
            resp = self.endpoint.post("/v1/chat/completions", body)
        except httpx.HTTPError as exc:
            raise RequestFailed(_evidence(label, body, f"{type(exc).__name__}: {exc}", t0)) from exc
        if resp.status_code != 200:
            raise RequestFailed(_evidence(label, body, f"HTTP {resp.status_code}: {excerpt(resp.text)}", t0))
        return resp.content, _evidence(label, body, excerpt(resp.content.decode("utf-8", "replace")), t0)

    def chat_stream(self, label: str, **kwargs: Any) -> tuple[StreamedChat, Evidence]:
        """A streamed chat completion with usage, assembled from its deltas."""
        body = {"model": self.model, "stream": True, "stream_options": {"include_usage": True}, **kwargs}
        out = StreamedChat()
        t0 = time.monotonic()
        try:
            for chunk in self.client.chat.completions.create(**body):
                out.chunks += 1
                if chunk.usage is not None:
                    out.usage = {"prompt_tokens": chunk.usage.prompt_tokens,
                                 "completion_tokens": chunk.usage.completion_tokens,
                                 "total_tokens": chunk.usage.total_tokens}
                for choice in chunk.choices:
                    delta = choice.delta
                    out.content += delta.content or ""
                    out.reasoning += _reasoning_of(delta)
                    for tc in delta.tool_calls or []:
                        slot = out.tool_calls.setdefault(tc.index, {"name": "", "arguments": ""})
                        if tc.function is not None:
                            slot["name"] += tc.function.name or ""
                            slot["arguments"] += tc.function.arguments or ""
                    if choice.finish_reason:
                        out.finish_reasons.append(choice.finish_reason)
        except (openai.OpenAIError, httpx.HTTPError) as exc:
            raise RequestFailed(_evidence(label, body, _error_text(exc), t0)) from exc
        shown = {"content": out.content, "reasoning": out.reasoning or None, "finish_reasons": out.finish_reasons,
                 "tool_calls": list(out.tool_calls.values()) or None, "usage": out.usage, "chunks": out.chunks}
        text = json.dumps({k: v for k, v in shown.items() if v is not None})
        return out, _evidence(label, body, excerpt(text), t0)


def _evidence(label: str, body: dict[str, Any], response: str, t0: float) -> Evidence:
    return Evidence(label, request=_shown(body), response=response, seconds=time.monotonic() - t0)


def _shown(body: dict[str, Any], limit: int = 300) -> dict[str, Any]:
    """The request as evidence: long message contents are cut (a needle prompt is thousands of tokens)."""
    out = dict(body)
    msgs = out.get("messages")
    if isinstance(msgs, list):
        cut = []
        for m in msgs:
            m2 = dict(m)
            content = m2.get("content")
            if isinstance(content, str) and len(content) > limit:
                half = limit // 2
                m2["content"] = f"{content[:half]} ... [{len(content) - limit} chars] ... {content[-half:]}"
            cut.append(m2)
        out["messages"] = cut
    return out


def _describe(resp: ChatCompletion) -> str:
    if not resp.choices:
        return json.dumps({"choices": []})
    choice = resp.choices[0]
    msg = choice.message
    data: dict[str, Any] = {"content": msg.content, "finish_reason": choice.finish_reason}
    reasoning = _reasoning_of(msg)
    if reasoning:
        data["reasoning"] = reasoning
    if msg.tool_calls:
        fns = [fn for fn in (getattr(tc, "function", None) for tc in msg.tool_calls) if fn is not None]
        data["tool_calls"] = [{"name": fn.name, "arguments": fn.arguments} for fn in fns]
    if resp.usage is not None:
        data["usage"] = {"prompt_tokens": resp.usage.prompt_tokens, "completion_tokens": resp.usage.completion_tokens}
    return json.dumps(data)


def open_session(target: Target, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Session:
    """Discover the target (raises EndpointError when it cannot be checked at all: unreachable, not
    OpenAI-compatible, key refused, model ambiguous) and open a session on it."""
    with Endpoint.of(target) as endpoint:
        found = endpoint.discover(target.model)
    return Session(target.with_model(found.model), found, timeout_s=timeout_s)

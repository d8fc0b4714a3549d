"""One streamed completion over httpx, timed per chunk the way ``vllm bench serve`` times it.

The parser splits the byte stream into server-sent events itself (no line iterator, no per-line
decoding): this is the client's hot loop, measured by ``benchmarks/client_ceiling.py``. What an event
means (a choice, the finish reason, usage, an error, ``[DONE]``) is decided by ``forklift.endpoint.sse``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from forklift.endpoint import sse

# Errors that mean the server (or the path to it) is gone, not that one request was refused.
FATAL_ERRORS: tuple[type[httpx.TransportError], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
)


@dataclass
class StreamOutcome:
    """What the client saw of one streamed request. Times are ``time.perf_counter()`` seconds.

    The generated text is not kept: no metric needs it, and not parsing it is most of the client's speed.
    """

    start: float
    chunk_times: list[float] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    error: str | None = None
    fatal: bool = False
    status: int | None = None
    done: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.chunk_times)

    @property
    def ttft(self) -> float | None:
        return self.chunk_times[0] - self.start if self.chunk_times else None

    @property
    def e2e(self) -> float | None:
        return self.chunk_times[-1] - self.start if self.chunk_times else None


class SseParser:
    """Incremental parser for an OpenAI-style ``data: {...}`` event stream into a StreamOutcome."""

    __slots__ = ("_buf", "_out")

    def __init__(self, out: StreamOutcome) -> None:
        self._buf = b""
        self._out = out

    def feed(self, data: bytes, now: float) -> None:
        """Consume bytes that arrived at ``now``; every complete event in them is stamped ``now``."""
        buf = self._buf + data if self._buf else data
        if b"\n\n" not in buf:
            self._buf = buf
            return
        events = buf.split(b"\n\n")
        self._buf = events.pop()
        for event in events:
            self._event(event, now)

    def close(self, now: float) -> None:
        if self._buf.strip():
            self._event(self._buf, now)
        self._buf = b""

    def _event(self, event: bytes, now: float) -> None:
        # Fast path for vLLM's compact token events: they only need a timestamp; the JSON is left unparsed
        # (the text is not a metric). sse.plain_token_event says when parsing would tell nothing more.
        if sse.plain_token_event(event):
            self._out.chunk_times.append(now)
            return
        for line in event.decode("utf-8", "replace").split("\n"):
            data = sse.payload(line)
            if not data:
                continue  # comments (": ping"), event names, blank lines
            if data == sse.DONE:
                self._out.done = True
                continue
            try:
                chunk = sse.parse(data)
            except sse.BadEvent:
                self._out.error = f"unparseable stream event: {data[:120]!r}"
                continue
            self._chunk(chunk, now)

    def _chunk(self, chunk: sse.Chunk, now: float) -> None:
        out = self._out
        if chunk.choice:
            out.chunk_times.append(now)  # a choice chunk counts even with empty text (vLLM's rule)
        out.finish_reason = chunk.finish_reason or out.finish_reason
        if chunk.usage:
            out.usage = dict(chunk.usage)
        if chunk.error:
            out.error = chunk.error


async def stream_request(client: httpx.AsyncClient, url: str, body: bytes,
                         headers: Mapping[str, str] | None = None) -> StreamOutcome:
    """POST ``body`` (JSON bytes with ``"stream": true``) to ``url`` (relative to the client's base URL) and
    time every chunk.

    Never raises for HTTP or transport problems: they land in ``error`` (``fatal`` for transport errors
    that mean the server is unreachable).
    """
    out = StreamOutcome(start=time.perf_counter())
    parser = SseParser(out)
    perf = time.perf_counter
    try:
        async with client.stream("POST", url, content=body, headers=headers) as resp:
            out.status = resp.status_code
            if resp.status_code != 200:
                detail = (await resp.aread())[:300].decode("utf-8", "replace")
                out.error = f"HTTP {resp.status_code}: {detail}"
                return out
            async for data in resp.aiter_raw():
                parser.feed(data, perf())
            parser.close(perf())
    except FATAL_ERRORS as exc:
        out.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        out.fatal = True
    except httpx.HTTPError as exc:
        out.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if out.error is None and not out.chunk_times:
        out.error = "the stream ended without a token"
    return out


def completion_body(model: str, prompt: str, max_tokens: int, *, ignore_eos: bool = True,
                    extra: Mapping[str, Any] | None = None) -> bytes:
    """The request ``vllm bench serve --backend openai`` sends, as JSON bytes."""
    payload: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "repetition_penalty": 1.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": ignore_eos,
    }
    if extra:
        payload.update(extra)
    return json.dumps(payload).encode()

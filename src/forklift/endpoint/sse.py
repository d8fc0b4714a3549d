"""Server-sent events of an OpenAI-compatible stream: the one set of rules for reading them.

A stream is ``data: {...}`` lines up to ``data: [DONE]``; other lines (``: ping`` comments, ``event:`` names,
blank keep-alives) carry nothing. Each JSON event becomes a :class:`Chunk` by :func:`parse`: whether it carries
a choice (a token event, even with empty text: vLLM's rule for counting chunks), its text and reasoning, the
finish reason, usage and an in-band error.

Two readers share these rules. :func:`chunks` reads decoded lines, one event at a time (chat, readiness,
checks). The benchmark client (``forklift.bench.client``) splits raw bytes itself for speed and skips the JSON
of plain token events when :func:`plain_token_event` says parsing would give nothing but "one more choice".
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from forklift.errors import EndpointError

DONE = "[DONE]"
"""The payload that ends a stream."""
REASONING_FIELDS = ("reasoning", "reasoning_content")
"""Where vLLM puts reasoning text in a delta or message: ``reasoning`` (newer), ``reasoning_content`` (older)."""


class BadEvent(EndpointError):
    """A ``data:`` line whose payload is not a JSON object."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """What one stream event says. ``content`` is a chat delta's content or a completion's text."""

    choice: bool = False
    content: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    usage: Mapping[str, Any] | None = None
    error: str | None = None

    @property
    def text(self) -> str:
        """The visible text of the event: content, else reasoning."""
        return self.content or self.reasoning


def payload(line: str) -> str | None:
    """The payload of a ``data:`` line (stripped), None for any other line."""
    if not line.startswith("data:"):
        return None
    return line[5:].strip()


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _reasoning(delta: Mapping[str, Any]) -> str:
    return next((text for key in REASONING_FIELDS if (text := _str(delta.get(key)))), "")


def _error(value: Any) -> str | None:
    if not value:
        return None
    if isinstance(value, Mapping):
        return str(value.get("message", value))
    return str(value)


def from_object(obj: Mapping[str, Any]) -> Chunk:
    """The Chunk of one decoded event (a chat or completion chunk, a usage-only chunk, an error)."""
    content: list[str] = []
    reasoning: list[str] = []
    finish: str | None = None
    choices = obj.get("choices")
    choices = choices if isinstance(choices, list) else []
    for choice in choices:
        if not isinstance(choice, Mapping):
            continue
        delta = choice.get("delta")
        if isinstance(delta, Mapping):
            content.append(_str(delta.get("content")))
            reasoning.append(_reasoning(delta))
        else:
            content.append(_str(choice.get("text")))
        finish = finish or _str(choice.get("finish_reason")) or None
    usage = obj.get("usage")
    return Chunk(choice=bool(choices), content="".join(content), reasoning="".join(reasoning), finish_reason=finish,
                 usage=usage if isinstance(usage, Mapping) and usage else None, error=_error(obj.get("error")))


def parse(data: str | bytes) -> Chunk:
    """The Chunk of one ``data:`` payload other than ``[DONE]``; raises BadEvent when it is not a JSON object."""
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise BadEvent(f"the server sent a stream event that is not JSON: {data[:120]!r}",
                       fix="Point at an OpenAI-compatible server; `forklift logs` shows the engine side.") from exc
    if not isinstance(obj, Mapping):
        raise BadEvent(f"the server sent a stream event that is not a JSON object: {data[:120]!r}",
                       fix="Point at an OpenAI-compatible server; `forklift logs` shows the engine side.")
    return from_object(obj)


def chunks(lines: Iterable[str]) -> Iterator[Chunk]:
    """The events of a stream, in order, stopping at ``[DONE]``. The caller learns that the stream ended
    without ``[DONE]`` from the iterator running out; see :class:`Reply`."""
    for line in lines:
        data = payload(line)
        if not data:
            continue
        if data == DONE:
            return
        yield parse(data)


def plain_token_event(event: bytes) -> bool:
    """Whether an event (one ``data:`` line, without its blank-line terminator) is a plain token event, one
    that :func:`parse` would turn into a choice with no finish reason, usage or error, so it can be counted
    unparsed. vLLM's compact JSON makes this a substring test; anything unusual takes the parsing path."""
    return (event.startswith(b"data: {") and b"\n" not in event and b'"choices":[{' in event
            and b'"finish_reason":null' in event and b'"usage":{' not in event and b'"error"' not in event)


@dataclass
class Reply:
    """A chat answer, assembled from a stream (or read from one JSON response)."""

    content: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    chunks: int = 0
    done: bool = False
    """The stream ended with ``[DONE]`` (always true for a non-streamed answer)."""

    def add(self, chunk: Chunk) -> None:
        if chunk.error:
            raise EndpointError(f"the server reported an error mid-stream: {chunk.error}",
                                fix="See the engine log (`forklift logs`).")
        self.chunks += chunk.choice
        self.content += chunk.content
        self.reasoning += chunk.reasoning
        self.finish_reason = chunk.finish_reason or self.finish_reason
        if chunk.usage:
            self.usage = dict(chunk.usage)

    @classmethod
    def read(cls, lines: Iterable[str]) -> Reply:
        """A whole stream. ``done`` stays False when it ended without ``[DONE]``."""
        reply = cls()
        for line in lines:
            data = payload(line)
            if data == DONE:
                reply.done = True
                break
            if data:
                reply.add(parse(data))
        return reply

    @classmethod
    def of_response(cls, body: Mapping[str, Any]) -> Reply:
        """A non-streamed chat completion: ``choices[0].message`` read by the same rules as a delta."""
        choices = body.get("choices")
        first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], Mapping) else {}
        message = first.get("message")
        as_delta = {"choices": [{"delta": message if isinstance(message, Mapping) else {},
                                 "finish_reason": first.get("finish_reason")}], "usage": body.get("usage")}
        reply = cls(done=True)
        reply.add(from_object(as_delta))
        return reply

"""Server-sent events of an OpenAI-compatible stream: ``data: {...}`` lines up to ``data: [DONE]``.

This is the line-level reader for callers that handle one event at a time (readiness, chat, checks); the
benchmark client parses raw bytes itself for speed (``forklift.bench.client``) and shares ``delta_text``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any


def events(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """JSON objects of the ``data:`` lines, in order, stopping at ``[DONE]``. Other lines (comments, event
    names, blank keep-alives) are skipped; a data line that is not JSON raises ValueError."""
    for line in lines:
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        if not payload:
            continue
        obj = json.loads(payload)
        if isinstance(obj, dict):
            yield obj


def delta_text(chunk: Mapping[str, Any]) -> str:
    """Text of a chat or completion chunk: content, else reasoning (``reasoning_content`` / ``reasoning``)."""
    out = []
    for choice in chunk.get("choices") or []:
        if not isinstance(choice, Mapping):
            continue
        delta = choice.get("delta")
        if isinstance(delta, Mapping):
            text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
        else:
            text = choice.get("text")
        if text:
            out.append(str(text))
    return "".join(out)

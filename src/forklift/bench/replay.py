"""A stand-in OpenAI server that replays a recorded vLLM completion stream, to calibrate the client.

``python -m forklift.bench.replay --stream FILE.sse --port P [--delay-ms D] [--flush-every K]`` serves
``/v1/completions`` (streamed: the recording's token events, tiled to the request's ``max_tokens``,
then a usage event and ``[DONE]``), ``/v1/models`` and ``/health``. It has no ``/metrics`` and no
tokenizer. ``--die-after N`` makes it exit halfway through stream N+1. Plain asyncio streams,
HTTP/1.1 keep-alive, chunked transfer encoding.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_MAX_TOKENS = re.compile(rb'"max_tokens"\s*:\s*(\d+)')


@dataclass(frozen=True)
class Recording:
    token_events: tuple[bytes, ...]
    """Each ``data: {...}\\n\\n`` event that carries a token, in order."""
    prompt_tokens: int
    model: str

    @classmethod
    def load(cls, path: Path) -> Recording:
        events = [e + b"\n\n" for e in path.read_bytes().split(b"\n\n") if e.strip()]
        tokens: list[bytes] = []
        prompt_tokens = 0
        model = "replay"
        for event in events:
            payload = event.strip().removeprefix(b"data: ")
            if payload == b"[DONE]":
                continue
            obj = json.loads(payload)
            model = str(obj.get("model", model))
            if obj.get("choices"):
                tokens.append(event)
            elif obj.get("usage"):
                prompt_tokens = int(obj["usage"].get("prompt_tokens", 0))
        if not tokens:
            raise ValueError(f"{path}: no token events in the recording")
        return cls(tuple(tokens), prompt_tokens, model)

    def body_events(self, max_tokens: int) -> list[bytes]:
        """Token events tiled to ``max_tokens`` (the recording's last event, with its finish_reason, last)."""
        inner, last = self.token_events[:-1] or self.token_events, self.token_events[-1]
        out = [inner[i % len(inner)] for i in range(max_tokens - 1)]
        out.append(last)
        usage = {"choices": [], "model": self.model, "usage": {
            "prompt_tokens": self.prompt_tokens, "completion_tokens": max_tokens,
            "total_tokens": self.prompt_tokens + max_tokens}}
        out.append(b"data: " + json.dumps(usage).encode() + b"\n\n")
        out.append(b"data: [DONE]\n\n")
        return out


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class ReplayServer:
    def __init__(self, recording: Recording, *, delay_s: float = 0.0, flush_every: int = 0,
                 max_model_len: int = 4096, die_after: int | None = None) -> None:
        self.recording = recording
        self.die_after = die_after
        self.started = 0
        self.active = 0
        self.max_active = 0
        self.delay_s = delay_s
        self.flush_every = flush_every
        self.max_model_len = max_model_len
        self._bodies: dict[int, list[bytes]] = {}

    def _events(self, max_tokens: int) -> list[bytes]:
        if max_tokens not in self._bodies:
            self._bodies[max_tokens] = [_chunk(e) for e in self.recording.body_events(max_tokens)]
        return self._bodies[max_tokens]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                method, path, _ = request_line.split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines if h)}
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                if method == "POST" and path == "/v1/completions":
                    await self._stream(writer, body)
                elif method == "GET" and path == "/v1/models":
                    cards = {"object": "list", "data": [
                        {"id": self.recording.model, "object": "model", "max_model_len": self.max_model_len}]}
                    self._reply(writer, 200, json.dumps(cards).encode())
                elif method == "GET" and path == "/health":
                    self._reply(writer, 200, b"")
                else:
                    self._reply(writer, 404, b'{"error": {"message": "not found"}}')
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    @staticmethod
    def _reply(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
        reason = {200: "OK", 404: "Not Found"}.get(status, "Error")
        writer.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                     % (status, reason.encode(), len(body), body))

    async def _stream(self, writer: asyncio.StreamWriter, body: bytes) -> None:
        match = _MAX_TOKENS.search(body)
        max_tokens = max(1, int(match.group(1))) if match else 16
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        events = self._events(max_tokens)
        self.started += 1
        if self.die_after is not None and self.started > self.die_after:
            # Simulate a crashed server: half a stream, then the process is gone (every connection reset).
            writer.write(b"".join(events[: len(events) // 2]))
            await writer.drain()
            await asyncio.sleep(0.05)
            os._exit(1)
        step = self.flush_every if self.flush_every > 0 else len(events)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            for i in range(0, len(events), step):
                writer.write(b"".join(events[i:i + step]))
                await writer.drain()
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
            writer.write(b"0\r\n\r\n")
        finally:
            self.active -= 1


async def serve(recording: Recording, host: str, port: int, *, delay_s: float = 0.0, flush_every: int = 0,
                max_model_len: int = 4096, die_after: int | None = None) -> None:
    server = ReplayServer(recording, delay_s=delay_s, flush_every=flush_every, max_model_len=max_model_len,
                          die_after=die_after)
    srv = await asyncio.start_server(server.handle, host, port, backlog=1024)
    async with srv:
        await srv.serve_forever()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m forklift.bench.replay", description=__doc__)
    parser.add_argument("--stream", type=Path, required=True, help="recorded SSE body of a streamed completion")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, default=0.0, help="pause after each write")
    parser.add_argument("--flush-every", type=int, default=0, help="events per write (0: the whole stream at once)")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--die-after", type=int, default=None,
                        help="serve N completions, then exit halfway through the next (a server that dies)")
    args = parser.parse_args(argv)
    asyncio.run(serve(Recording.load(args.stream), args.host, args.port, delay_s=args.delay_ms / 1000.0,
                      flush_every=args.flush_every, max_model_len=args.max_model_len, die_after=args.die_after))


if __name__ == "__main__":
    main()

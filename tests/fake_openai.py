"""A small OpenAI-compatible server for check's tests: real HTTP over a real socket on 127.0.0.1, answering
chat completions (plain and streamed, with logprobs and tool calls) from a Python function. A healthy responder
plays a model's recorded answers; a corrupted one injects U+FFFD, loops or answers at random.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """What the fake model answers to one request."""

    content: str = ""
    finish_reason: str = "stop"
    tool_calls: list[tuple[str, str]] = field(default_factory=list)
    """(name, arguments) pairs."""
    raw: bytes | None = None
    """Bytes sent as the content's JSON string, verbatim (to put invalid UTF-8 on the wire)."""
    status: int = 200
    """Another status answers ``{"error": {"message": content}}`` (a refused request)."""


Responder = Callable[[dict[str, Any]], Reply]


def tokens_of(text: str) -> list[str]:
    """The fake's tokens: words with their following space."""
    return re.findall(r"\S+\s*|\s+", text)


def last_user(body: dict[str, Any]) -> str:
    messages = body.get("messages") or []
    return str(next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), ""))


class FakeOpenAI:
    """``with FakeOpenAI(responder) as fake: fake.url`` — the server runs in a thread until the block ends."""

    def __init__(self, responder: Responder, *, model: str = "smollm2", max_model_len: int = 4096,
                 version: str = "0.32.0") -> None:
        self.responder = responder
        self.model = model
        self.max_model_len = max_model_len
        self.version = version
        self.requests: list[dict[str, Any]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path == "/health":
                    self._send(200, b"")
                elif self.path == "/version":
                    self._json({"version": fake.version})
                elif self.path == "/v1/models":
                    self._json({"object": "list", "data": [{"id": fake.model, "object": "model", "owned_by": "vllm",
                                                            "max_model_len": fake.max_model_len}]})
                else:
                    self._send(404, b'{"detail": "Not Found"}')

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path != "/v1/chat/completions":
                    self._send(404, b'{"detail": "Not Found"}')
                    return
                fake.requests.append(body)
                reply = fake.responder(body)
                if reply.status != 200:
                    error = {"error": {"message": reply.content, "type": "BadRequestError", "code": reply.status}}
                    self._send(reply.status, json.dumps(error).encode())
                elif body.get("stream"):
                    self._stream(body, reply)
                else:
                    self._send(200, _completion(fake.model, body, reply), "application/json")

            def _json(self, data: Any) -> None:
                self._send(200, json.dumps(data).encode(), "application/json")

            def _send(self, status: int, payload: bytes, ctype: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _stream(self, body: dict[str, Any], reply: Reply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for chunk in _chunks(fake.model, body, reply):
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

        return Handler


def _usage(body: dict[str, Any], reply: Reply) -> dict[str, int]:
    prompt = sum(len(tokens_of(str(m.get("content") or ""))) for m in body.get("messages") or []) + 5
    completion = max(1, len(tokens_of(reply.content)) + 8 * len(reply.tool_calls))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _tool_calls(reply: Reply) -> list[dict[str, Any]]:
    return [{"id": f"call-{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(reply.tool_calls)]


def _completion(model: str, body: dict[str, Any], reply: Reply) -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": "\0CONTENT\0", "tool_calls": _tool_calls(reply)}
    logprobs = None
    if body.get("logprobs"):
        logprobs = {"content": [{"token": t, "logprob": -0.1, "bytes": list(t.encode()), "top_logprobs": []}
                                for t in tokens_of(reply.content)]}
    data = {"id": "chatcmpl-fake", "object": "chat.completion", "created": 1796016938, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason,
                         "logprobs": logprobs}],
            "usage": _usage(body, reply)}
    content = reply.raw if reply.raw is not None else json.dumps(reply.content, ensure_ascii=False)[1:-1].encode()
    return json.dumps(data, ensure_ascii=False).encode().replace(b"\\u0000CONTENT\\u0000", content)


def _chunks(model: str, body: dict[str, Any], reply: Reply) -> Iterator[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1796016938, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": ""})
    for t in tokens_of(reply.content):
        yield chunk({"content": t})
    for i, call in enumerate(_tool_calls(reply)):
        yield chunk({"tool_calls": [{"index": i, **call}]})
    yield chunk({}, reply.finish_reason)
    if (body.get("stream_options") or {}).get("include_usage"):
        yield {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1796016938, "model": model,
               "choices": [], "usage": _usage(body, reply)}

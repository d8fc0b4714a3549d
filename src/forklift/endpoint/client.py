"""An OpenAI-compatible endpoint over httpx, with an injectable transport (tests pass ``httpx.MockTransport``
for protocol edge cases; everything else talks to a real server)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from forklift.endpoint import sse
from forklift.endpoint.auth import bearer
from forklift.errors import EndpointError


class Endpoint:
    """One server: ``base_url`` without ``/v1``."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, headers=bearer(api_key), timeout=timeout,
                                  transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def healthy(self, timeout: float = 5.0) -> bool:
        """``GET /health`` answered 200."""
        try:
            return self._http.get("/health", timeout=timeout).status_code == 200
        except httpx.HTTPError:
            return False

    def models(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """The model cards of ``GET /v1/models``."""
        try:
            resp = self._http.get("/v1/models", timeout=timeout or self._http.timeout)
        except httpx.HTTPError as exc:
            raise EndpointError(f"{self.base_url} is unreachable: {type(exc).__name__}: {exc}",
                                fix="Check the URL, or start a deployment with `forklift up`.") from exc
        if resp.status_code != 200:
            raise EndpointError(f"{self.base_url}/v1/models answered HTTP {resp.status_code}: {resp.text[:200]}",
                                fix="Point at an OpenAI-compatible server (its base URL, without /v1).")
        try:
            data = resp.json()["data"]
        except (ValueError, KeyError, TypeError) as exc:
            raise EndpointError(f"{self.base_url}/v1/models did not return a model list",
                                fix="Point at an OpenAI-compatible server (its base URL, without /v1).") from exc
        return [m for m in data if isinstance(m, dict)]

    def first_token(self, model: str, *, prompt: str = "Say hello.", max_tokens: int = 8,
                    timeout: float = 120.0) -> str:
        """Stream one greedy chat completion and return its first text (content or reasoning). Raises on any
        failure: HTTP errors as httpx.HTTPStatusError, a stream without text as EndpointError."""
        body: Mapping[str, Any] = {"model": model, "messages": [{"role": "user", "content": prompt}],
                                   "max_tokens": max_tokens, "temperature": 0, "stream": True}
        with self._http.stream("POST", "/v1/chat/completions", json=body, timeout=timeout) as resp:
            resp.raise_for_status()
            for chunk in sse.events(resp.iter_lines()):
                text = sse.delta_text(chunk)
                if text:
                    return text
        raise EndpointError("the server answered but streamed no token",
                            fix="Run `forklift check` to see what the endpoint returns.")

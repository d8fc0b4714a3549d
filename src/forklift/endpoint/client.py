"""An OpenAI-compatible endpoint over httpx, with an injectable transport (tests pass ``httpx.MockTransport``
for protocol edge cases; everything else talks to a real server).

Foreign exceptions are translated here, once: a server that cannot be reached, refuses the key, or answers
something that is not the OpenAI API raises :class:`~forklift.errors.EndpointError` with the fix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from forklift.endpoint import sse
from forklift.endpoint.auth import bearer
from forklift.endpoint.target import Target
from forklift.errors import EndpointError
from forklift.results import excerpt

_OPENAI_FIX = "Pass the server's base URL, the part before /v1 (for example http://HOST:8000)."


@dataclass(frozen=True)
class Discovery:
    """What the server says about itself: its model cards, the model picked, its context, its version."""

    listing: list[dict[str, Any]]
    model: str
    max_model_len: int | None
    """The server's max_model_len for ``model`` (None when it does not list one or does not serve it)."""
    version: str | None

    @property
    def names(self) -> list[str]:
        return [str(m.get("id")) for m in self.listing]

    @property
    def served(self) -> bool:
        return self.model in self.names


class Endpoint:
    """One server: ``base_url`` without ``/v1``. ``where`` and ``reach_fix`` word its errors."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None, where: str | None = None,
                 reach_fix: str | None = None, api_key_env: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.where = where or self.base_url
        self.reach_fix = reach_fix or "Check the URL, or start a deployment with `forklift up`."
        self.api_key_env = api_key_env
        self.has_key = bool(api_key)
        self._headers = bearer(api_key)
        self._http = httpx.Client(base_url=self.base_url, headers=self._headers, timeout=timeout,
                                  transport=transport)

    @classmethod
    def of(cls, target: Target, *, timeout: float = 30.0, transport: httpx.BaseTransport | None = None) -> Endpoint:
        return cls(target.base_url, api_key=target.api_key, timeout=timeout, transport=transport,
                   where=target.where, reach_fix=target.reach_fix, api_key_env=target.api_key_env)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def async_client(self, *, timeout: httpx.Timeout, limits: httpx.Limits,
                     transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
        """An async client for the same server and key (the benchmark's load loop)."""
        return httpx.AsyncClient(base_url=self.base_url, headers=self._headers, timeout=timeout, limits=limits,
                                 transport=transport)

    # -- raw routes: never raise for an HTTP status --------------------------------------------------

    def get(self, path: str, *, timeout: float | None = None) -> httpx.Response:
        """``GET path`` as it comes back; transport errors propagate as httpx errors."""
        return self._http.get(path, timeout=timeout if timeout is not None else self._http.timeout)

    def post(self, path: str, body: Mapping[str, Any]) -> httpx.Response:
        return self._http.post(path, json=dict(body))

    # -- the API ------------------------------------------------------------------------------------

    def healthy(self, timeout: float = 5.0) -> bool:
        """``GET /health`` answered 200."""
        try:
            return self.get("/health", timeout=timeout).status_code == 200
        except httpx.HTTPError:
            return False

    def _unreachable(self, exc: httpx.HTTPError) -> EndpointError:
        return EndpointError(f"cannot reach {self.where}: {type(exc).__name__}: {exc}", fix=self.reach_fix)

    def _refused(self, resp: httpx.Response, path: str) -> EndpointError | None:
        """The error for a 401/403: a key the server refuses, or none sent to a server that needs one."""
        if resp.status_code not in (401, 403):
            return None
        if self.has_key:
            return EndpointError(f"{self.where} refused the API key from ${self.api_key_env} (HTTP {resp.status_code})",
                                 fix=f"Check ${self.api_key_env} holds the key the server was started with.",
                                 status_code=resp.status_code)
        return EndpointError(f"{self.where} requires an API key (HTTP {resp.status_code} on {path})",
                             fix="Pass --api-key-env VAR naming the environment variable that holds the key "
                                 "(a run record takes it from serve.api_key_env).", status_code=resp.status_code)

    def models(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """The model cards of ``GET /v1/models``."""
        try:
            resp = self.get("/v1/models", timeout=timeout)
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from exc
        refused = self._refused(resp, "/v1/models")
        if refused:
            raise refused
        try:
            body = resp.json() if resp.status_code == 200 else None
        except ValueError:
            body = None
        if not (isinstance(body, dict) and isinstance(body.get("data"), list)):
            kind = resp.headers.get("content-type", "?").split(";")[0]
            raise EndpointError(f"{self.where} is not an OpenAI-compatible server: GET /v1/models answered HTTP "
                                f"{resp.status_code} ({kind}): {excerpt(resp.text, 120)!r}", fix=_OPENAI_FIX)
        return [m for m in body["data"] if isinstance(m, dict)]

    def version(self) -> str | None:
        """vLLM's ``/version`` (None when the server has none)."""
        try:
            resp = self.get("/version")
            value = resp.json().get("version") if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        return str(value) if value else None

    def discover(self, model: str | None = None) -> Discovery:
        """Ask the server what it serves and pick the model: the one named, else the only one. A named model that
        is not listed is not an error here (``Discovery.served`` says so); several models and none named is."""
        listing = self.models()
        names = [str(m.get("id")) for m in listing]
        if model is None:
            if len(names) != 1:
                raise EndpointError(f"{self.where} serves {len(names)} models ({', '.join(names) or 'none'}); "
                                    "which one?", fix="Pass --model NAME.")
            model = names[0]
        entry = next((m for m in listing if m.get("id") == model), None)
        listed = entry.get("max_model_len") if entry else None
        return Discovery(listing=listing, model=model, max_model_len=listed if isinstance(listed, int) else None,
                         version=self.version())

    def _raise_for(self, resp: httpx.Response, path: str) -> None:
        refused = self._refused(resp, path)
        if refused:
            raise refused
        if resp.status_code != 200:
            raise EndpointError(f"{self.where}{path} answered HTTP {resp.status_code}: {excerpt(resp.text, 300)}",
                                fix="Check the request against the server's limits; `forklift logs` shows the "
                                    "engine side.", status_code=resp.status_code)

    def chat(self, model: str, messages: Sequence[Mapping[str, Any]], *, stream: bool = True,
             timeout: float | None = None, **params: Any) -> sse.Reply:
        """One chat completion, read with the SSE rules when streamed. Raises EndpointError for a refused request,
        an in-band error, or a stream that ends without ``[DONE]``."""
        body: dict[str, Any] = {"model": model, "messages": list(messages), **params}
        if stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        path = "/v1/chat/completions"
        try:
            with self._http.stream("POST", path, json=body, timeout=timeout or self._http.timeout) as resp:
                if resp.status_code != 200:
                    resp.read()
                    self._raise_for(resp, path)
                reply = sse.Reply.read(resp.iter_lines()) if stream else sse.Reply.of_response(_json(resp.read()))
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from exc
        if not reply.done:
            raise EndpointError(f"{self.where}: the stream ended without [DONE] after {reply.chunks} chunks "
                                f"(finish_reason {reply.finish_reason!r}); the answer may be cut off",
                                fix="The server or a proxy closed the connection: see `forklift logs`.")
        return reply

    def first_token(self, model: str, *, prompt: str = "Say hello.", max_tokens: int = 8,
                    timeout: float = 120.0) -> str:
        """Stream one greedy chat completion and return its first text (content or reasoning). Raises on any
        failure: a refused request or a stream without text as EndpointError, transport errors as httpx errors."""
        body: Mapping[str, Any] = {"model": model, "messages": [{"role": "user", "content": prompt}],
                                   "max_tokens": max_tokens, "temperature": 0, "stream": True}
        path = "/v1/chat/completions"
        with self._http.stream("POST", path, json=body, timeout=timeout) as resp:
            if resp.status_code != 200:
                resp.read()
                self._raise_for(resp, path)
            for chunk in sse.chunks(resp.iter_lines()):
                if chunk.error:
                    raise EndpointError(f"the server reported an error: {chunk.error}",
                                        fix="See the engine log (`forklift logs`).")
                if chunk.text:
                    return chunk.text
        raise EndpointError("the server answered but streamed no token",
                            fix="Run `forklift check` to see what the endpoint returns.")

    def tokenize(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """vLLM's ``POST /tokenize`` (prompt or messages). Raises EndpointError when the server has none."""
        return self._tokenizer_route("/tokenize", body)

    def detokenize(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._tokenizer_route("/detokenize", body)

    def _tokenizer_route(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        try:
            resp = self.post(path, body)
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from exc
        if resp.status_code != 200:
            raise EndpointError(f"{self.where}{path} answered HTTP {resp.status_code}: {excerpt(resp.text, 200)}",
                                fix="This server has no vLLM tokenizer endpoint; pass --tokenizer PATH, or use "
                                    "--prompts FILE.")
        data = _json(resp.content)
        if not isinstance(data, dict):
            raise EndpointError(f"{self.where}{path} did not answer a JSON object", fix=_OPENAI_FIX)
        return data

    def metrics(self, timeout: float = 10.0) -> tuple[str | None, str | None]:
        """``GET /metrics``: (text, None), or (None, why it is unavailable). Never raises."""
        try:
            resp = self.get("/metrics", timeout=timeout)
        except httpx.HTTPError as exc:
            return None, f"GET /metrics failed: {type(exc).__name__}: {exc}"
        if resp.status_code != 200:
            return None, f"GET /metrics answered HTTP {resp.status_code}"
        return resp.text, None


def _json(content: bytes) -> Any:
    try:
        return json.loads(content)
    except ValueError as exc:
        raise EndpointError(f"the server answered with something that is not JSON: {content[:120]!r}",
                            fix=_OPENAI_FIX) from exc

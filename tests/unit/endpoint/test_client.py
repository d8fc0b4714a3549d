"""The Endpoint client against httpx.MockTransport: the protocol's edge cases, without a server."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from forklift.cli.chat import empty_answer_hint, reply_json
from forklift.endpoint import Endpoint, Target
from forklift.endpoint.tokens import ServerTokenizer, tokenizer_for
from forklift.errors import ApiKeyMissingError, EndpointError

Handler = Callable[[httpx.Request], httpx.Response]
MESSAGES = [{"role": "user", "content": "What is 17 * 23?"}]


def sse(*events: Any, done: bool = True) -> bytes:
    body = b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events)
    return body + (b"data: [DONE]\n\n" if done else b"")


def delta(finish: str | None = None, **fields: str) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": fields, "finish_reason": finish}]}


def streaming(body: bytes, seen: list[httpx.Request] | None = None) -> Handler:
    def handle(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})
    return handle


def endpoint(handler: Handler, *, api_key: str | None = None, api_key_env: str | None = None) -> Endpoint:
    target = Target("http://server:8000", model="m", api_key=api_key, api_key_env=api_key_env, run_name="demo")
    return Endpoint.of(target, transport=httpx.MockTransport(handler))


def chat(handler: Handler, **kw: Any) -> Any:
    with endpoint(handler, **kw) as ep:
        return ep.chat("m", MESSAGES, max_tokens=16)


def test_reasoning_only_deltas_give_an_empty_answer_and_the_hint() -> None:
    body = sse(delta(role="assistant", content=""), delta(reasoning="Okay, 17 times"), delta(reasoning=" 23 is"),
               delta("length", reasoning_content=" 391"))
    reply = chat(streaming(body))
    assert (reply.content, reply.reasoning, reply.finish_reason) == ("", "Okay, 17 times 23 is 391", "length")
    hint = empty_answer_hint(reply, 16)
    assert hint is not None and "spent all 16 tokens reasoning" in hint and "--max-tokens" in hint
    data = reply_json("q", reply, hint)
    assert data["reasoning"] == "Okay, 17 times 23 is 391" and data["answer"] == "" and data["hint"] == hint


def test_hint_only_when_the_answer_is_empty_for_a_known_reason() -> None:
    answered = chat(streaming(sse(delta("stop", content="391"))))
    assert empty_answer_hint(answered, 16) is None and "reasoning" not in reply_json("q", answered, None)
    cut = chat(streaming(sse(delta("length", content=""))))
    assert "hit the 16-token limit" in (empty_answer_hint(cut, 16) or "")
    silent = chat(streaming(sse(delta("stop", content=""))))
    assert empty_answer_hint(silent, 16) is None


def test_usage_in_the_last_chunk_and_keepalives() -> None:
    usage = {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}
    body = b": ping\n\n" + sse(delta(content="Hi"), delta("stop", content="!"), {"choices": [], "usage": usage})
    reply = chat(streaming(body))
    assert reply.content == "Hi!" and reply.finish_reason == "stop"
    assert reply.usage == usage
    assert reply.chunks == 2  # the usage-only chunk carries no choice


def test_a_stream_that_ends_without_done_is_an_error() -> None:
    with pytest.raises(EndpointError, match=r"run 'demo' \(http://server:8000\): the stream ended without \[DONE\] "
                                            r"after 1 chunks"):
        chat(streaming(sse(delta(content="Hal"), done=False)))


def test_a_data_line_that_is_not_json() -> None:
    with pytest.raises(EndpointError, match="stream event that is not JSON: '{\"choices\": \\[oops'"):
        chat(streaming(sse(delta(content="a"), b'{"choices": [oops')))


def test_an_error_event_mid_stream() -> None:
    body = sse(delta(content="a"), {"error": {"message": "engine died", "code": 500}})
    with pytest.raises(EndpointError, match="error mid-stream: engine died"):
        chat(streaming(body))


def test_401_without_the_key_and_with_a_wrong_key() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": "Unauthorized"})

    with pytest.raises(EndpointError) as none:
        chat(refuse)
    assert "run 'demo' (http://server:8000) requires an API key (HTTP 401 on /v1/chat/completions)" in str(none.value)
    assert none.value.fix is not None and "--api-key-env" in none.value.fix
    with pytest.raises(EndpointError) as wrong:
        chat(refuse, api_key="nope", api_key_env="FK_KEY")
    assert "refused the API key from $FK_KEY (HTTP 401)" in str(wrong.value)
    assert "nope" not in str(wrong.value) + (wrong.value.fix or "")


def test_the_key_comes_from_the_named_variable_and_is_sent() -> None:
    target = Target.from_url("http://server:8000/v1/", model="m", api_key_env="FK_KEY", environ={"FK_KEY": "s3cret"})
    seen: list[httpx.Request] = []
    with Endpoint.of(target, transport=httpx.MockTransport(streaming(sse(delta("stop", content="ok")), seen))) as ep:
        ep.chat("m", MESSAGES)
    assert seen[0].headers["authorization"] == "Bearer s3cret"
    assert str(seen[0].url) == "http://server:8000/v1/chat/completions"
    sent = json.loads(seen[0].content)
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert "s3cret" not in repr(target) and "s3cret" not in json.dumps(target.describe())
    with pytest.raises(ApiKeyMissingError) as missing:
        Target.from_url("http://server:8000", api_key_env="FK_KEY", environ={})
    assert missing.value.fix == "export FK_KEY=<the key> and run the command again."


def test_non_streamed_answer_reads_reasoning_by_the_same_rules() -> None:
    body = {"choices": [{"index": 0, "finish_reason": "length",
                         "message": {"role": "assistant", "content": None, "reasoning_content": "hmm"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 16, "total_tokens": 19}}
    with endpoint(lambda r: httpx.Response(200, json=body)) as ep:
        reply = ep.chat("m", MESSAGES, stream=False)
    assert (reply.content, reply.reasoning, reply.finish_reason, reply.done) == ("", "hmm", "length", True)
    assert reply.usage == body["usage"]


def test_first_token_takes_reasoning_and_refusals_raise() -> None:
    with endpoint(streaming(sse(delta(role="assistant"), delta(reasoning="Let")))) as ep:
        assert ep.first_token("m") == "Let"
    with endpoint(streaming(sse(delta("stop", content="")))) as ep, pytest.raises(EndpointError, match="no token"):
        ep.first_token("m")
    with endpoint(lambda r: httpx.Response(503, text="loading")) as ep, pytest.raises(EndpointError, match="503"):
        ep.first_token("m")


def _routes(routes: dict[str, httpx.Response]) -> Handler:
    def handle(request: httpx.Request) -> httpx.Response:
        return routes.get(request.url.path, httpx.Response(404, json={"detail": "Not Found"}))
    return handle


def models(*cards: dict[str, Any]) -> httpx.Response:
    return httpx.Response(200, json={"object": "list", "data": list(cards)})


def test_discovery_picks_the_only_model_and_reads_its_context() -> None:
    routes = {"/v1/models": models({"id": "smollm2", "max_model_len": 4096}),
              "/version": httpx.Response(200, json={"version": "0.32.0+cpu"})}
    with Endpoint("http://s", transport=httpx.MockTransport(_routes(routes))) as ep:
        found = ep.discover()
        assert (found.model, found.max_model_len, found.version, found.served) == ("smollm2", 4096, "0.32.0+cpu", True)
        other = ep.discover("not-smollm2")
        assert not other.served and other.max_model_len is None and other.names == ["smollm2"]


def test_discovery_refuses_ambiguity_and_non_openai_servers() -> None:
    two = {"/v1/models": models({"id": "a"}, {"id": "b"})}
    with Endpoint("http://s", transport=httpx.MockTransport(_routes(two))) as ep, \
            pytest.raises(EndpointError, match=r"serves 2 models \(a, b\); which one\?"):
        ep.discover()
    html = {"/v1/models": httpx.Response(200, text="<html>It works!</html>", headers={"content-type": "text/html"})}
    with Endpoint("http://s", transport=httpx.MockTransport(_routes(html))) as ep, \
            pytest.raises(EndpointError, match=r"not an OpenAI-compatible server: GET /v1/models answered HTTP 200 "
                                               r"\(text/html\)"):
        ep.discover()


def test_unreachable_names_the_run_and_the_next_step() -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with endpoint(down) as ep, pytest.raises(EndpointError) as err:
        ep.models()
    assert str(err.value).startswith("cannot reach run 'demo' (http://server:8000): ConnectError")
    assert err.value.fix == "Is it running? `forklift status demo`; start it with `forklift up`."
    with endpoint(down) as ep:
        assert ep.healthy() is False
        assert ep.metrics()[0] is None and "ConnectError" in (ep.metrics()[1] or "")


def _tokenize(requests: list[dict[str, Any]]) -> Handler:
    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        requests.append({"path": request.url.path, **body})
        if request.url.path == "/tokenize" and "messages" in body:
            return httpx.Response(200, json={"count": 17, "tokens": list(range(17))})
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"count": 2, "tokens": [5, 6]})
        return httpx.Response(200, json={"prompt": "he llo"})
    return handle


def test_server_tokenizer_when_no_local_files(tmp_path: Any) -> None:
    sent: list[dict[str, Any]] = []
    target = Target("http://s", model="m", model_path=str(tmp_path / "elsewhere"))
    with Endpoint.of(target, transport=httpx.MockTransport(_tokenize(sent))) as ep:
        tok = tokenizer_for(ep, target, "m")
        assert isinstance(tok, ServerTokenizer) and tok.source == "server /tokenize"
        assert tok.encode("hello", special=True) == [5, 6]
        assert tok.decode([5, 6]) == "he llo"
        assert tok.count_chat([{"role": "user", "content": "hi"}]) == 17
    assert sent[1] == {"path": "/tokenize", "model": "m", "prompt": "hello", "add_special_tokens": True}
    assert sent[3]["add_generation_prompt"] is True
    no_route = Endpoint("http://s", transport=httpx.MockTransport(lambda r: httpx.Response(404)))
    assert tokenizer_for(no_route, target, "m") is None


def test_local_tokenizer_only_when_its_files_are_here(tmp_path: Any) -> None:
    assert Target("http://s", model_path=str(tmp_path)).local_tokenizer is None
    (tmp_path / "tokenizer_config.json").write_text("{}")
    assert Target("http://s", model_path=str(tmp_path)).local_tokenizer == str(tmp_path)
    assert Target("http://s", model_path="/nowhere", tokenizer="org/model").local_tokenizer == "org/model"

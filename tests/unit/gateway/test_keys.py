"""The gateway's key store (hashed, shown once, revocable), its config from run records, usage from the audit log."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from forklift import gateway
from forklift.errors import GatewayError, GatewayKeyError
from forklift.gateway.config import Backend, litellm_config
from forklift.runner import FakeRunner

pytestmark = pytest.mark.unit


def test_a_key_is_shown_once_and_stored_only_as_its_hash() -> None:
    entry, key = gateway.add("alice", models=["small", "big"], rpm=30)
    assert key.startswith("fk-") and len(key) > 40
    stored = gateway.gateway_dir() / "keys.json"
    text = stored.read_text()
    assert key not in text and key[7:] not in text
    assert json.loads(text)["alice"]["sha256"] == hashlib.sha256(key.encode()).hexdigest()
    assert stat.S_IMODE(os.stat(stored).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(gateway.gateway_dir()).st_mode) == 0o700  # the audit log beside it may hold prompts
    assert entry.models == ["big", "small"] and entry.rpm == 30
    loaded = gateway.load_keys()["alice"]
    assert loaded == entry and loaded.shown == key[:7] + "..."


def test_a_name_is_one_live_key_and_revoke_keeps_the_entry() -> None:
    _, first = gateway.add("bob")
    with pytest.raises(GatewayKeyError, match="already exists"):
        gateway.add("bob")
    revoked = gateway.revoke("bob")
    assert revoked.revoked is not None and gateway.load_keys()["bob"].revoked == revoked.revoked
    _, second = gateway.add("bob")  # a revoked name can be given a new key
    assert second != first and gateway.load_keys()["bob"].revoked is None
    with pytest.raises(GatewayKeyError, match="no key named"):
        gateway.revoke("nobody")
    with pytest.raises(GatewayKeyError, match="invalid key name"):
        gateway.add("bad name")


def test_the_proxy_config_maps_served_names_to_runs() -> None:
    found = [Backend("big", "office-big", "http://127.0.0.1:8101", None),
             Backend("small", "office-small", "http://127.0.0.1:8102", "SMALL_KEY")]
    config = litellm_config(found)
    models = {m["model_name"]: m for m in config["model_list"]}
    assert models["big"]["litellm_params"]["api_base"] == "http://127.0.0.1:8101/v1"
    assert models["small"]["litellm_params"]["api_key"] == "os.environ/SMALL_KEY"  # the name, never the key
    assert config["general_settings"]["custom_auth"] == "forklift_gateway_hooks.user_api_key_auth"
    assert config["router_settings"] == {"num_retries": 0, "disable_cooldowns": True}


def test_usage_per_key_reads_the_rotated_audit_log_too(tmp_path: Path) -> None:
    d = gateway.gateway_dir()
    d.mkdir(parents=True, exist_ok=True)
    line = {"key": "alice", "model": "big", "status": 200, "prompt_tokens": 10, "completion_tokens": 4}
    (d / "audit.jsonl.2").write_text(json.dumps({**line, "ts": 1}) + "\n")
    (d / "audit.jsonl.1").write_text(json.dumps({**line, "ts": 2, "model": "small"}) + "\n")
    (d / "audit.jsonl").write_text(json.dumps({**line, "ts": 3, "status": 502, "completion_tokens": 0}) + "\n"
                                   + json.dumps({"ts": 4, "key": None, "status": 401}) + "\n")
    assert [e["ts"] for e in gateway.audit_entries()] == [1, 2, 3, 4]
    found = gateway.usage()
    alice = found["alice"]
    assert (alice.requests, alice.errors, alice.prompt_tokens, alice.completion_tokens) == (3, 1, 30, 8)
    assert alice.models == {"big": 2, "small": 1}
    assert found["(no key)"].errors == 1
    assert gateway.usage(since=3)["alice"].requests == 1


def test_gateway_up_refuses_half_a_tls_pair() -> None:
    with pytest.raises(GatewayError, match="both a certificate and its key"):
        gateway.up(["x"], cert="cert.pem")


def test_gateway_up_leaves_the_pids_the_watcher_wrote(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watcher owns the state file once it is spawned: `up` must not write it again over the proxy pid the
    watcher recorded (the watcher here writes at once, inside spawn: the earliest it could)."""
    from types import SimpleNamespace

    from forklift.gateway import ops
    from forklift.runner.base import Spawned

    monkeypatch.setenv(ops.LITELLM_ENV, "/bin/true")
    monkeypatch.setattr(ops, "load_record", lambda name: SimpleNamespace(name=name, status="ready"))
    monkeypatch.setattr(ops, "backends", lambda records: [Backend("small", "r1", "http://127.0.0.1:9", None)])
    waited: list[int | None] = []
    monkeypatch.setattr(ops, "_wait_ready", lambda state, admin, timeout_s, runner: waited.append(state.watcher_pid))

    class WatcherRunner(FakeRunner):
        def spawn(self, argv: Sequence[str], *, log_path: str, env: Mapping[str, str] | None = None,
                  cwd: str | None = None, secret_env: Mapping[str, str] | None = None) -> Spawned:
            assert list(argv[-2:]) == ["gateway", "serve"]
            state = ops.load_state()  # what `gateway serve` does first: its own pid, then the proxy's
            state.watcher_pid, state.proxy_pid = 4101, 4102
            ops.save_state(state)
            return Spawned("localhost", 4101, "watcher.log")

    state = ops.up(["r1"], port=0, runner=WatcherRunner("localhost"))
    assert waited == [4101]
    assert (state.watcher_pid, state.proxy_pid) == (4101, 4102)
    assert json.loads(ops.state_path().read_text())["proxy_pid"] == 4102


def test_the_watcher_recognises_its_proxy_by_a_long_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a recorded pid is still the proxy is read from its whole command line (the config path sits far
    past 80 columns), also when the environment narrows ps's output (COLUMNS)."""
    import subprocess
    import sys

    from forklift.gateway import ops
    from forklift.runner.local import LocalRunner

    monkeypatch.setenv("COLUMNS", "40")
    word = "/" + "d" * 120 + "/config.yaml"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "--config", word])
    try:
        assert ops._runs_as(LocalRunner(), proc.pid, word)
        assert not ops._runs_as(LocalRunner(), proc.pid, word + "x")
    finally:
        proc.kill()
        proc.wait()


def test_a_name_with_a_trailing_newline_is_refused() -> None:
    with pytest.raises(GatewayKeyError, match="invalid key name"):
        gateway.add("bob\n")
    assert not (gateway.gateway_dir() / "keys.json").exists()


def test_adds_and_revokes_from_many_threads_all_land() -> None:
    from concurrent.futures import ThreadPoolExecutor

    for n in range(8):
        gateway.add(f"user{n}")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: gateway.revoke(f"user{n}") if n < 8 else gateway.add(f"user{n}"), range(16)))
    stored = json.loads((gateway.gateway_dir() / "keys.json").read_text())
    assert len(stored) == 16
    assert all(stored[f"user{n}"]["revoked"] is not None for n in range(8))


def test_usage_skips_a_line_cut_short_and_a_rotated_archive() -> None:
    d = gateway.gateway_dir()
    d.mkdir(parents=True, exist_ok=True)
    (d / "audit.jsonl").write_text('{"key": "alice", "status": 200, "completion_tokens": 3}\n{"key": "ali')
    (d / "audit.jsonl.1.gz").write_bytes(b"\x1f\x8b\x08\x00")
    (d / "audit.jsonl.1").write_text('{"key": "alice", "status": 500}\n')
    used = gateway.usage()
    assert used["alice"].requests == 2 and used["alice"].errors == 1 and used["alice"].completion_tokens == 3

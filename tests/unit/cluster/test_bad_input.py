"""Bad input: each a clear error naming the node, and nothing left running.

The nodes are this machine under other names (HostSim) or a fake ssh client; the engine is a fake
python that answers vLLM's version probe and plays a rank.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from forklift import record as records
from forklift.cluster.up import up
from forklift.errors import EngineStartupError, PreflightError
from forklift.plan import for_launch
from forklift.recipe.schema import Recipe
from forklift.results import CheckResult
from forklift.runner import Runner
from forklift.runner.ssh import SshRunner
from tests.unit.cluster.fakes import HostSim, fake_ssh, fake_vllm, pid_alive, tiny_model, two_node_recipe


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "userhome"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))  # node run dirs land here
    return h


@pytest.fixture
def port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _recipe(tmp_path: Path, python: Path, port: int, *extra: str) -> Recipe:
    return two_node_recipe(tmp_path, python, port, "timeouts.ready_s=60", *extra)


def _failed_hosts(err: PreflightError) -> list[str | None]:
    """The hosts of the failed checks the error carries (CheckResults; errors.py may not name the type)."""
    checks = [c for c in err.failures if isinstance(c, CheckResult)]
    assert len(checks) == len(err.failures)
    return [c.host for c in checks]


def _nothing_started(name: str = "t") -> None:
    assert name not in records.list_names() or not records.load(name).ranks


def test_different_vllm_versions_name_the_node(tmp_path: Path, home: Path, port: int) -> None:
    good, old = fake_vllm(tmp_path), fake_vllm(tmp_path, "0.31.0", "python-old")
    r = _recipe(tmp_path, good, port)
    runners: dict[int, Runner] = {0: HostSim("node-a"), 1: HostSim("node-b", {str(good): str(old)})}
    with pytest.raises(PreflightError) as err:
        up(for_launch(r, force=True), name="t", check_nodes=False, runners=runners)
    msg = str(err.value)
    assert "node-b" in msg and "0.31.0" in msg and "node-a has 0.32.0+cpu" in msg
    assert _failed_hosts(err.value) == ["node-b"]
    _nothing_started()


def test_model_missing_on_one_node(tmp_path: Path, home: Path, port: int) -> None:
    r = _recipe(tmp_path, fake_vllm(tmp_path), port, f"nodes.1.model_path={tmp_path / 'nowhere'}")
    with pytest.raises(PreflightError) as err:
        up(for_launch(r, force=True), name="t", check_nodes=False, runners={0: HostSim("node-a"), 1: HostSim("node-b")})
    assert _failed_hosts(err.value) == ["node-b"]
    assert "model missing" in str(err.value) and "forklift model sync" in (err.value.fix or "")
    _nothing_started()


def test_model_differs_on_one_node(tmp_path: Path, home: Path, port: int) -> None:
    other = tiny_model(tmp_path / "other")
    (other / "config.json").write_text('{"num_hidden_layers": 4, "hidden_size": 1}')
    r = _recipe(tmp_path, fake_vllm(tmp_path), port, f"nodes.1.model_path={other}")
    with pytest.raises(PreflightError, match=r"node-b: model: .*differs.*config\.json"):
        up(for_launch(r, force=True), name="t", check_nodes=False, runners={0: HostSim("node-a"), 1: HostSim("node-b")})


def test_head_port_taken(tmp_path: Path, home: Path, port: int) -> None:
    r = _recipe(tmp_path, fake_vllm(tmp_path), port)
    with socket.socket() as s:
        s.bind(("0.0.0.0", port))
        s.listen()
        with pytest.raises(PreflightError) as err:
            up(for_launch(r, force=True), name="t", check_nodes=False,
               runners={0: HostSim("node-a"), 1: HostSim("node-b")})
    assert f"port {port} is already in use on node-a" in str(err.value)
    _nothing_started()


@pytest.mark.parametrize(("mode", "words"), [("unreachable", "cannot reach"), ("refused", "refused our key")])
def test_unreachable_or_refused_node(tmp_path: Path, home: Path, port: int, monkeypatch: pytest.MonkeyPatch,
                                     mode: str, words: str) -> None:
    bin_dir, _ = fake_ssh(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_SSH_MODE", mode)
    r = _recipe(tmp_path, fake_vllm(tmp_path), port)
    runners: dict[int, Runner] = {0: HostSim("node-a"), 1: SshRunner("root@10.231.0.9", name="node-b")}
    with pytest.raises(PreflightError) as err:
        up(for_launch(r, force=True), name="t", check_nodes=False, runners=runners)
    assert _failed_hosts(err.value) == ["node-b"]
    assert words in str(err.value)
    _nothing_started()


@pytest.fixture
def started() -> Iterator[list[int]]:
    pids: list[int] = []
    yield pids
    leaked = [p for p in pids if pid_alive(p)]
    assert not leaked, f"processes left running: {leaked}"


def _pids(name: str) -> list[int]:
    return [r.pid for r in records.load(name).ranks if r.pid]


def test_rank_that_never_joins(tmp_path: Path, home: Path, port: int, started: list[int]) -> None:
    r = _recipe(tmp_path, fake_vllm(tmp_path), port, "env={FAKE_MODE: never-join}", "timeouts.join_s=3")
    t0 = time.monotonic()
    with pytest.raises(EngineStartupError) as err:
        up(for_launch(r, force=True), name="t", check_nodes=False, runners={0: HostSim("node-a"), 1: HostSim("node-b")})
    started.extend(_pids("t"))
    assert err.value.rank == 1 and err.value.host == "node-b"
    assert "rank 1 on node-b never joined" in str(err.value)
    assert time.monotonic() - t0 < 30
    assert records.load("t").status == "failed" and len(started) == 2


def test_rank_dies_during_startup_fails_fast(tmp_path: Path, home: Path, port: int, started: list[int]) -> None:
    r = _recipe(tmp_path, fake_vllm(tmp_path), port, "env={FAKE_MODE: worker-dies}")
    t0 = time.monotonic()
    with pytest.raises(EngineStartupError) as err:
        up(for_launch(r, force=True), name="t", check_nodes=False, runners={0: HostSim("node-a"), 1: HostSim("node-b")})
    started.extend(_pids("t"))
    assert err.value.rank == 1 and err.value.host == "node-b"
    assert "exited during startup" in str(err.value)
    assert any("Gloo connectFullMesh failed" in line for line in err.value.log_tail)
    assert time.monotonic() - t0 < 30

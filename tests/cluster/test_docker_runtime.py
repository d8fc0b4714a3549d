"""The docker runtime across the namespace cluster: `forklift up` over SSH starts each rank as a container
through its own node's Docker daemon (host network and IPC, model/cache/launcher mounts, named and labelled
with the run id), the bundled model answers with pp=2 across both containers, the API key reaches the engine
without ever being on a command line, logs are read over SSH, and `down` removes both containers by name.

forklift runs in namespace A; node-a (10.231.0.1) and node-b (10.231.0.2) each run sshd and their own dockerd.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import dockerd, netns
from tests.cluster.conftest import remove_node_run_dirs
from tests.cluster.netns import NetCluster
from tests.cluster.test_netns_cluster import MASTER_PORT, _chat, _env, _forklift_argv, forklift

pytestmark = pytest.mark.cluster

PORT = 8000
KEY_VAR = "FORKLIFT_TEST_API_KEY"
DockerNet = tuple[NetCluster, list[dockerd.Daemon]]


@pytest.fixture(scope="module")
def docker_net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerNet]:
    reason = netns.unavailable_reason() or dockerd.unavailable_reason()
    if reason:
        pytest.skip(f"docker nodes unavailable: {reason}")
    tmp: Path = tmp_path_factory.mktemp("dockernodes")
    tag = str(os.getpid() % 100000)
    tags = [f"{tag}a", f"{tag}b"]
    cluster = netns.start(tmp, tag, sshd_env={i: {"DOCKER_HOST": f"unix:///run/fl-dk-{t}.sock"}
                                              for i, t in enumerate(tags)})
    daemons: list[dockerd.Daemon] = []
    try:
        for i, t in enumerate(tags):
            (tmp / t).mkdir()
            daemons.append(dockerd.start(cluster.nodes[i].ns, tmp / t, t))
            dockerd.build_image(daemons[-1])
        yield cluster, daemons
    finally:
        for d in daemons:
            dockerd.stop(d)
        netns.stop(cluster)
        remove_node_run_dirs(tmp / "home" / "runs")


def _cmdlines() -> dict[int, str]:
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
    return out


def _get(net: NetCluster, url: str, key: str | None) -> int:
    code = ("import httpx,sys; h={'Authorization': 'Bearer '+sys.argv[2]} if sys.argv[2] else {}; "
            "print(httpx.get(sys.argv[1], headers=h, timeout=30).status_code)")
    res = subprocess.run(net.exec_argv(0, sys.executable, "-c", code, url, key or ""), capture_output=True, text=True,
                         timeout=60, check=True)
    return int(res.stdout.strip())


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _recipe(net: NetCluster, image: str = dockerd.IMAGE) -> Path:
    path = net.tmp / f"docker-{image.replace('/', '_').replace(':', '_')}.yaml"
    path.write_text(f"""
model: {{source: "bundled:smollm2-135m-instruct", served_name: smollm2}}
runtime:
  kind: docker
  image: {image}
  gpus: null
  python: {sys.executable}
  mounts: {json.dumps(dockerd.python_mounts())}
nodes:
  - {{host: node-a, ssh: root@10.231.0.1, data_ip: 10.231.0.1}}
  - {{host: node-b, ssh: root@10.231.0.2, data_ip: 10.231.0.2}}
parallel: {{pp: 2}}
serve: {{host: 10.231.0.1, port: {PORT}, max_model_len: 2048, cpu_kv_cache_gib: 1, api_key_env: {KEY_VAR}}}
network: {{master_port: {MASTER_PORT}, gloo_socket_ifname: fl0}}
timeouts: {{ready_s: 900}}
""")
    return path


def test_missing_image_is_named_in_preflight(docker_net: DockerNet) -> None:
    net, daemons = docker_net
    daemons[1].docker("tag", dockerd.IMAGE, "forklift-test/only-on-a:0")  # present on node-b only
    res = forklift(net, "up", str(_recipe(net, "forklift-test/only-on-a:0")), "--name", "noimg", "--preflight-only")
    assert res.returncode != 0
    assert "node-a" in res.stderr and "forklift-test/only-on-a:0" in res.stderr and "docker pull" in res.stderr
    assert "node-b: docker image" not in res.stderr


def test_pp2_in_containers_on_two_nodes_serves_with_a_key_and_down_removes_them(docker_net: DockerNet) -> None:
    net, daemons = docker_net
    key = secrets.token_hex(16)
    env = {**_env(net), KEY_VAR: key}
    res = subprocess.run(_forklift_argv(net, "up", str(_recipe(net)), "--name", "dk", "--json"), env=env,
                         capture_output=True, text=True, timeout=1200, check=False)
    assert res.returncode == 0, f"up failed:\n{res.stdout}\n{res.stderr[-4000:]}"
    info = json.loads(res.stdout)
    print(f"\ndocker pp=2 across two nodes ready in {info['ready_s']:.0f} s")
    run_id = json.loads((net.tmp / "home" / "runs" / "dk" / "record.json").read_text())["run_id"]
    ranks = {r["rank"]: r for r in info["ranks"]}
    assert {(r["host"], r["container"]) for r in ranks.values()} == {
        ("node-a", f"forklift-{run_id}-rank0"), ("node-b", f"forklift-{run_id}-rank1")}
    try:
        for i, daemon in enumerate(daemons):  # each container runs under its own node's daemon
            (inspect,) = json.loads(daemon.docker("inspect", ranks[i]["container"]).stdout)
            labels = inspect["Config"]["Labels"]
            assert labels["forklift.run_id"] == run_id and labels["forklift.rank"] == str(i)
            assert inspect["HostConfig"]["NetworkMode"] == "host" and inspect["HostConfig"]["IpcMode"] == "host"
            binds = inspect["HostConfig"]["Binds"]
            assert any(b.endswith(":/opt/forklift/vllm_main.py:ro") for b in binds)
            assert any("smollm2-135m-instruct" in b and b.endswith(":ro") for b in binds)
        # the API key went over ssh's stdin: no command line on any node ever held it, nor the record
        assert not [pid for pid, cmd in _cmdlines().items() if key in cmd]
        assert key not in (net.tmp / "home" / "runs" / "dk" / "record.json").read_text()
        url = f"http://10.231.0.1:{PORT}/v1/models"
        assert _get(net, url, None) == 401 and _get(net, url, "wrong") == 401 and _get(net, url, key) == 200
        assert "4" in _chat(net, "What is 2+2?", api_key=key)
        logs = forklift(net, "logs", "dk", "--rank", "1")
        assert "Worker_PP1" in logs.stdout, logs.stdout[-2000:]  # node-b's container log, read over ssh
    finally:
        down = forklift(net, "down", "dk", "--json")
    assert down.returncode == 0, down.stderr
    assert json.loads(down.stdout)["was_running"] is True
    for daemon in daemons:
        assert daemon.docker("ps", "-aq", "--filter", f"label=forklift.run_id={run_id}").stdout.strip() == ""
    assert not net.listening(0, PORT) and not net.listening(0, MASTER_PORT)
    assert not [r["pid"] for r in ranks.values() if _running(r["pid"])]  # the `docker run` clients are gone
    again = forklift(net, "down", "dk")
    assert again.returncode == 0 and "not running" in again.stdout

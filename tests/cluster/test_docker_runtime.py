"""The docker runtime on a real remote node: `forklift up` over SSH starts the rank as a container through the
node's own Docker daemon (host network and IPC, model/cache/launcher mounts, named and labelled with the run
id), the engine inside answers, logs are read over SSH, and `down` removes the container by name.

forklift runs in namespace A; node-b (namespace B, reached only at 10.231.0.2) runs sshd and dockerd.
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
from tests.cluster.test_netns_cluster import _chat, _env, _forklift_argv, forklift

pytestmark = pytest.mark.cluster

PORT = 8000
KEY_VAR = "FORKLIFT_TEST_API_KEY"


@pytest.fixture(scope="module")
def docker_net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NetCluster, dockerd.Daemon]]:
    reason = netns.unavailable_reason() or dockerd.unavailable_reason()
    if reason:
        pytest.skip(f"docker node unavailable: {reason}")
    tmp: Path = tmp_path_factory.mktemp("dockernode")
    tag = str(os.getpid() % 100000)
    sock = f"/run/fl-dk-{tag}.sock"
    cluster = netns.start(tmp, tag, sshd_env={1: {"DOCKER_HOST": f"unix://{sock}"}})
    daemon = None
    try:
        daemon = dockerd.start(cluster.nodes[1].ns, tmp, tag)
        dockerd.build_image(daemon)
        yield cluster, daemon
    finally:
        if daemon is not None:
            dockerd.stop(daemon)
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
  - {{host: node-b, ssh: root@10.231.0.2, data_ip: 10.231.0.2}}
serve: {{host: 10.231.0.2, port: {PORT}, max_model_len: 2048, cpu_kv_cache_gib: 1, enforce_eager: true,
         api_key_env: {KEY_VAR}}}
timeouts: {{ready_s: 600}}
""")
    return path


def test_missing_image_is_named_in_preflight(docker_net: tuple[NetCluster, dockerd.Daemon]) -> None:
    net, _ = docker_net
    res = forklift(net, "up", str(_recipe(net, "forklift-test/absent:0")), "--name", "noimg", "--preflight-only")
    assert res.returncode != 0
    assert "node-b" in res.stderr and "forklift-test/absent:0" in res.stderr and "docker pull" in res.stderr


def test_docker_rank_on_a_remote_node_serves_and_down_removes_the_container(
        docker_net: tuple[NetCluster, dockerd.Daemon]) -> None:
    net, daemon = docker_net
    key = secrets.token_hex(16)
    env = {**_env(net), KEY_VAR: key}
    res = subprocess.run(_forklift_argv(net, "up", str(_recipe(net)), "--name", "dk", "--json"), env=env,
                         capture_output=True, text=True, timeout=900, check=False)
    assert res.returncode == 0, f"up failed:\n{res.stdout}\n{res.stderr[-4000:]}"
    info = json.loads(res.stdout)
    print(f"\ndocker rank on node-b ready in {info['ready_s']:.0f} s")
    (rank,) = info["ranks"]
    run_id = json.loads((net.tmp / "home" / "runs" / "dk" / "record.json").read_text())["run_id"]
    assert rank["host"] == "node-b" and rank["container"] == f"forklift-{run_id}-rank0"
    try:
        (inspect,) = json.loads(daemon.docker("inspect", rank["container"]).stdout)
        labels = inspect["Config"]["Labels"]
        assert labels["forklift.run_id"] == run_id and labels["forklift.rank"] == "0"
        assert inspect["HostConfig"]["NetworkMode"] == "host" and inspect["HostConfig"]["IpcMode"] == "host"
        binds = inspect["HostConfig"]["Binds"]
        assert any(b.endswith(":/opt/forklift/vllm_main.py:ro") for b in binds)
        assert any("smollm2-135m-instruct" in b and b.endswith(":ro") for b in binds)
        # the API key went over ssh's stdin: no command line on either side ever held it
        assert not [pid for pid, cmd in _cmdlines().items() if key in cmd]
        assert key not in (net.tmp / "home" / "runs" / "dk" / "record.json").read_text()
        url = f"http://10.231.0.2:{PORT}/v1/models"
        assert _get(net, url, None) == 401 and _get(net, url, "wrong") == 401 and _get(net, url, key) == 200
        assert "Paris" in _chat(net, "What is the capital of France?", host="10.231.0.2", api_key=key)
        logs = forklift(net, "logs", "dk", "--rank", "0")
        assert f"Starting vLLM server on http://10.231.0.2:{PORT}" in logs.stdout, logs.stdout[-2000:]
    finally:
        down = forklift(net, "down", "dk", "--json")
    assert down.returncode == 0, down.stderr
    assert json.loads(down.stdout)["was_running"] is True
    assert daemon.docker("ps", "-aq", "--filter", f"label=forklift.run_id={run_id}").stdout.strip() == ""
    assert not net.listening(1, PORT)
    assert not _running(rank["pid"])  # the rank's `docker run` client on node-b is gone too (or a zombie)
    again = forklift(net, "down", "dk")
    assert again.returncode == 0 and "not running" in again.stdout

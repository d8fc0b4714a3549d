"""Ray across the namespace cluster: forklift starts `ray start --head` on node-a and `ray start --address` on
node-b over SSH, waits until `ray status` lists both (a poll, not a sleep), and `forklift down` stops both
Ray sessions by their recorded process groups, nothing of Ray left in either namespace, well inside the grace
period (Ray's own SIGTERM drain is 30 s; the recipe's ray.drain_timeout_s turns it off).

The nodes are labelled gb10 because render refuses Ray on CPU nodes (vLLM-CPU has no Ray executor); no
engine is started here, only Ray. Serving through Ray is proven on the H200 (benchmarks/gpu/).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.netns import NetCluster
from tests.cluster.test_netns_cluster import _env, forklift

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
RAY_PORT = 6390


def _recipe(net: NetCluster) -> Path:
    path = net.tmp / "ray2.yaml"
    path.write_text(f"""
model: {{source: "bundled:smollm2-135m-instruct", served_name: smollm2}}
runtime: {{kind: venv, python: {sys.executable}}}
nodes:
  - {{host: node-a, ssh: root@10.231.0.1, data_ip: 10.231.0.1, hardware: gb10}}
  - {{host: node-b, ssh: root@10.231.0.2, data_ip: 10.231.0.2, hardware: gb10}}
parallel: {{pp: 2, backend: ray}}
serve: {{host: 10.231.0.1, port: 8000}}
ray: {{port: {RAY_PORT}, start_timeout_s: 180}}
timeouts: {{stop_s: 10}}
""")
    return path


def test_ray_head_and_worker_join_over_ssh_and_down_stops_both(net: NetCluster) -> None:
    pytest.importorskip("ray", reason="ray is installed by `make install` (dev extra)")
    probe = subprocess.run(net.exec_argv(0, sys.executable, "-m", "tests.cluster.ray_probe", str(_recipe(net)),
                                         "ray2"), cwd=REPO, env=_env(net), capture_output=True, text=True,
                           timeout=400, check=False)
    try:
        assert probe.returncode == 0, probe.stderr[-3000:]
        info = json.loads(probe.stdout.strip().splitlines()[-1])
        print(f"\nRay cluster of 2 formed in {info['formed_s']} s")
        assert info["nodes"] == 2
        roles = {(r["role"], r["host"]) for r in info["ranks"]}
        assert roles == {("ray-head", "node-a"), ("ray-worker", "node-b")}
        assert info["env"]["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] == "0"
        assert net.foreign_pids(0) and net.foreign_pids(1), "Ray processes run in both namespaces"
        assert net.listening(0, RAY_PORT)
        status = forklift(net, "status", "ray2", "--json")
        assert json.loads(status.stdout)["ranks"][1]["host"] == "node-b"
    finally:
        down = forklift(net, "down", "ray2", "--json")
    assert down.returncode == 0, down.stderr
    result = json.loads(down.stdout)
    assert result["killed"] == [], "a Ray session ignored SIGTERM for the whole grace period"
    for i in (0, 1):
        assert net.foreign_pids(i) == [], f"Ray processes left in {net.nodes[i].ns}"
    assert not net.listening(0, RAY_PORT)

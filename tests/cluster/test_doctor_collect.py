"""`forklift doctor RUN` on a real two-node run (network namespaces, real sshd, vLLM-CPU ranks): it reads every
rank's log and each node's kernel log and memory over SSH, and names the cause of a start that failed because
Gloo was pointed at an interface that does not exist. Only 10.231.0.1 and 10.231.0.2 are ever targeted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.netns import NetCluster

pytestmark = pytest.mark.cluster


def _recipe(net: NetCluster) -> Path:
    path = net.tmp / "doctor-gloo.yaml"
    path.write_text(f"""
model: {{source: "bundled:smollm2-135m-instruct", served_name: smollm2}}
runtime: {{kind: venv, python: {sys.executable}}}
nodes:
  - {{host: node-a, ssh: root@10.231.0.1, data_ip: 10.231.0.1}}
  - {{host: node-b, ssh: root@10.231.0.2, data_ip: 10.231.0.2}}
parallel: {{pp: 2}}
serve: {{host: 10.231.0.1, port: 8000, max_model_len: 2048, cpu_kv_cache_gib: 1, enforce_eager: true}}
network: {{master_port: 29513, gloo_socket_ifname: nosuch0}}
timeouts: {{ready_s: 900, join_s: 300}}
""")
    return path


def forklift(net: NetCluster, *args: str, timeout: float = 1500) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, FORKLIFT_HOME=str(net.tmp / "home"), FORKLIFT_SSH_CONFIG=str(net.ssh_config))
    argv = net.exec_argv(0, sys.executable, "-m", "forklift.cli.main", *args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)


def test_doctor_run_reads_every_node_and_names_the_gloo_interface(net: NetCluster) -> None:
    up = forklift(net, "up", str(_recipe(net)), "--name", "doc-gloo")
    try:
        assert up.returncode != 0, "a missing Gloo interface must fail the start"
        res = forklift(net, "doctor", "doc-gloo", "--json", timeout=300)
        assert res.returncode == 1, res.stderr
        data = json.loads(res.stdout)
        sources = set(data["sources"])
        for host in ("node-a", "node-b"):
            read = set(data["collected"][host])
            assert "memory" in read and {"dmesg", "journalctl -k"} & read, (host, read)
        assert {"node-a rank 0 log", "node-b rank 1 log"} <= sources
        top = data["findings"][0]
        assert top["category"] == "nccl_network_config", top
        assert "network.gloo_socket_ifname" in top["fix"]
        assert any("nosuch0" in e["text"] for e in top["evidence"]), top["evidence"]
        assert data["context"]["nodes"] == 2 and data["context"]["backend"] == "native"
    finally:
        forklift(net, "down", "doc-gloo", timeout=300)

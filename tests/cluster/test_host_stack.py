"""Host-stack drift and a known-bad kernel caught by preflight on the namespace cluster (no vLLM server: preflight
starts nothing).

Both namespaces share this machine's kernel, so node-b is made to report another one the way the host layer reads
it: ``probe`` runs ``uname -r`` on the node through ssh, and node-b's sshd puts a directory first on every session's
PATH (sshd_config SetEnv) whose ``uname`` answers ``-r`` with 7.0.0-1019-nvidia (the DGX Spark kernel that broke
NCCL memory registration) and hands every other call to the real uname. Everything else is real: sshd in each
namespace, the ssh client, the probe's commands (/etc/os-release, ldconfig, nvidia-smi, /sys/class/infiniband),
preflight and the CLI. Node-a answers with this machine's own kernel, so the drift is real data too.

No vLLM starts here, so the module takes its own subnet (10.239.0.0/24) and netns names and can run beside a
module that holds the shared 10.231.0.0/24 cluster.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import netns
from tests.cluster.test_netns_cluster import forklift

pytestmark = pytest.mark.cluster

BAD_KERNEL = "7.0.0-1019-nvidia"
SUBNET = "10.239.0"


def _recipe(net: netns.NetCluster) -> Path:
    path = net.tmp / "stack.yaml"
    path.write_text(f"""
model: {{source: "bundled:smollm2-135m-instruct", served_name: smollm2}}
runtime: {{kind: venv, python: {sys.executable}}}
nodes:
  - {{host: node-a, ssh: root@{SUBNET}.1, data_ip: {SUBNET}.1}}
  - {{host: node-b, ssh: root@{SUBNET}.2, data_ip: {SUBNET}.2}}
parallel: {{pp: 2}}
serve: {{host: {SUBNET}.1, port: 8000, max_model_len: 2048, cpu_kv_cache_gib: 1}}
network: {{master_port: 29517, gloo_socket_ifname: fl0}}
""")
    return path


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[netns.NetCluster]:
    reason = netns.unavailable_reason()
    if reason:
        pytest.skip(f"namespace cluster unavailable: {reason}")
    tmp: Path = tmp_path_factory.mktemp("stackcluster")
    fake = tmp / "node-b-bin"
    fake.mkdir()
    real = next(p for p in ("/usr/bin/uname", "/bin/uname") if Path(p).exists())
    (fake / "uname").write_text(f'#!/bin/sh\n[ "$1" = "-r" ] && [ $# -eq 1 ] && echo {BAD_KERNEL} && exit 0\n'
                                f'exec {real} "$@"\n')
    (fake / "uname").chmod(0o755)
    path = f"{fake}:{os.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin')}"
    cluster = netns.start(tmp, f"s{os.getpid() % 10000}", sshd_env={1: {"PATH": path}}, subnet=SUBNET)
    try:
        yield cluster
    finally:
        netns.stop(cluster)


def test_preflight_warns_on_kernel_drift_and_the_known_bad_kernel_naming_node_b(net: netns.NetCluster) -> None:
    res = forklift(net, "up", str(_recipe(net)), "--name", "stack", "--preflight-only", "--json", timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr  # warnings, not failures: nothing would start anyway
    report = json.loads(res.stdout)
    stacks = report["stacks"]
    assert stacks["node-a"]["kernel"] == platform.release() and stacks["node-b"]["kernel"] == BAD_KERNEL
    assert stacks["node-a"]["os"] == stacks["node-b"]["os"]  # the same /etc/os-release, read on each node
    warns = {(c["id"], c["host"]): c for c in report["checks"] if c["status"] == "warn"}
    drift = warns[("host stack", "node-b")]
    assert f"node-a has {platform.release()}" in drift["summary"] and f"node-b has {BAD_KERNEL}" in drift["summary"]
    bad = warns[("known-bad host stack", "node-b")]
    assert bad["details"]["id"] == "spark-kernel-7.0.0-1019-cma" and "ibv_reg_mr_iova2" in bad["summary"]
    assert "6.17.0-1032-nvidia" in bad["fix"] and "https://" in bad["fix"]
    assert not any(host == "node-a" and "host stack" in cid for cid, host in warns)  # the head matches no entry
    ok = [c for c in report["checks"] if c["id"] == "host stack" and c["status"] == "ok"]
    assert [c["host"] for c in ok] == ["node-a"] and f"kernel {platform.release()}" in ok[0]["summary"]

    text = forklift(net, "up", str(_recipe(net)), "--name", "stack", "--preflight-only", timeout=600)
    assert text.returncode == 0 and "known-bad" in text.stdout and "7.0.0-1019" in text.stdout, text.stdout
    print(f"\n{sys.platform}: node-a {stacks['node-a']}\nnode-b {stacks['node-b']}")

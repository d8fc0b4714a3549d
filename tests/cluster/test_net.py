"""`forklift net` on a real three-node namespace cluster (tests/cluster/net_faults.py): real sshd per node, real
`ip`, sysfs, tc, nftables and iperf3 between the namespaces (2-second runs).

Faults injected: a 200 Mbit/s shaped link (tc tbf), a link with MTU 9000 on one end and 1500 on the other, the
master port dropped by nftables on the head, a data_ip on no interface, interface names that differ per node
(node-c's is lan0), and different NCCL versions (stub libraries through VLLM_NCCL_SO_PATH).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import net_faults, netns
from tests.cluster.netns import NetCluster

pytestmark = pytest.mark.cluster

MASTER_OK = 29521
MASTER_BLOCKED = 29522
NODE = "  - {{host: node-{x}, ssh: root@10.231.0.{n}{rest}}}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    reason = net_faults.unavailable_reason()
    if reason:
        pytest.skip(f"namespace cluster unavailable: {reason}")
    built = net_faults.build(tmp_path_factory.mktemp("netfaults"), f"n{os.getpid() % 10000}")
    try:
        net_faults.block_port(built, 0, MASTER_BLOCKED)
        yield built
    finally:
        netns.stop(built)


def _node(i: int, rest: str = "") -> str:
    return NODE.format(x="abc"[i], n=i + 1, rest=rest)


def _recipe(cluster: NetCluster, name: str, nodes: list[str], *, master_port: int = MASTER_OK,
            network: str = "") -> Path:
    path = cluster.tmp / f"{name}.yaml"
    path.write_text(f"""# net test recipe: {name}
model: {{source: "bundled:smollm2-135m-instruct", served_name: smollm2}}
runtime: {{kind: venv, python: {sys.executable}}}
nodes:
{chr(10).join(nodes)}
parallel: {{pp: {len(nodes)}}}
serve: {{host: 0.0.0.0, port: 8000, max_model_len: 2048, cpu_kv_cache_gib: 1, enforce_eager: true}}  # the API
network: {{master_port: {master_port}, profile: ethernet-1g{network}}}
""")
    return path


def forklift(cluster: NetCluster, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The CLI inside node-a's namespace (the only place every node's address is reachable from)."""
    env = dict(os.environ, FORKLIFT_HOME=str(cluster.tmp / "home"), FORKLIFT_SSH_CONFIG=str(cluster.ssh_config))
    return subprocess.run(cluster.exec_argv(0, sys.executable, "-m", "forklift.cli.main", *args), capture_output=True,
                          text=True, timeout=timeout, env=env, check=False)


def _checks(res: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    data = json.loads(res.stdout)
    checks: list[dict[str, Any]] = data["checks"]
    return checks


def _find(checks: list[dict[str, Any]], status: str, item: str, host: str, *words: str) -> dict[str, Any]:
    for c in checks:
        if c["status"] == status and c["id"] == item and c["host"] == host and all(w in c["summary"] for w in words):
            return c
    shown = "\n".join(f"{c['status']} {c['host']} {c['id']}: {c['summary']}" for c in checks)
    raise AssertionError(f"no {status} {item} on {host} with {words}:\n{shown}")


def test_healthy_paths_pass_on_three_nodes(cluster: NetCluster) -> None:
    path = _recipe(cluster, "healthy", [_node(i, f", data_ip: 10.231.0.{i + 1}") for i in range(3)])
    res = forklift(cluster, "net", "check", str(path), "--json")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    checks = _checks(res)
    assert [c for c in checks if c["status"] == "fail"] == []
    for src, dst, dev in (("node-a", "node-b", "fl0"), ("node-a", "node-c", "fl0"), ("node-c", "node-b", "lan0")):
        _find(checks, "ok", "route", src, f"-> {dst}'s data_ip", f"via {dev}")
    bw = [c for c in checks if c["id"] == "iperf3"]
    assert len(bw) == 3 and all(c["status"] == "ok" and c["details"]["gbit"] > 0.94 for c in bw), bw
    for worker in ("node-b", "node-c"):
        _find(checks, "ok", "port", worker, f"reaches node-a:{MASTER_OK}")
    assert {c["host"] for c in checks if c["id"] == "nccl" and "none" in c["summary"]} == {"node-a", "node-b",
                                                                                             "node-c"}
    derived = json.loads(res.stdout)["derived"]
    assert derived["node-c"]["env"]["NCCL_SOCKET_IFNAME"] == "=lan0"
    assert derived["node-a"]["env"]["GLOO_SOCKET_IFNAME"] == "fl0"


def test_each_injected_fault_is_named(cluster: NetCluster) -> None:
    libs = {code: net_faults.stub_nccl(cluster.tmp / f"nccl-{code}", code) for code in (22809, 23004)}
    assert all(libs.values()), "the NCCL version stubs need a C compiler (gcc is part of the CI machine)"
    nccl = {i: f", env: {{VLLM_NCCL_SO_PATH: {libs[code]}}}"
            for i, code in ((0, 22809), (1, 23004), (2, 22809))}
    nodes = [_node(0, ", data_ip: 10.231.0.1" + nccl[0]),
             _node(1, f", data_ip: {net_faults.shaped_ip(0, 1, 1)}" + nccl[1]),  # on tb01: shaped to 200 Mbit/s
             _node(2, f", data_ip: {net_faults.mtu_ip(0, 2, 2)}" + nccl[2])]  # on mt02: MTU 1500 here, 9000 on a
    path = _recipe(cluster, "faults", nodes, master_port=MASTER_BLOCKED, network=", nccl_socket_ifname: '=fl0'")
    res = forklift(cluster, "net", "check", str(path), "--json")
    assert res.returncode == 1, res.stderr[-3000:]
    checks = _checks(res)

    slow = _find(checks, "fail", "iperf3", "node-a", "node-b 10.231.11.2 via tb01", "degraded")
    assert slow["details"]["gbit"] < 0.3
    mtu = _find(checks, "fail", "mtu", "node-c", "node-a mt02 (9000)", "node-c mt02 (1500)")
    assert "node-c's mt02" in mtu["fix"] and "mtu 9000" in mtu["fix"]
    port = _find(checks, "fail", "port", "node-a", f"node-b cannot reach node-a:{MASTER_BLOCKED}", "timed out")
    assert f"Open TCP {MASTER_BLOCKED} on node-a" in port["fix"]
    _find(checks, "fail", "route", "node-c", "no route to node-b's data_ip 10.231.11.2")
    ifname = _find(checks, "fail", "nccl_socket_ifname", "node-c", "=fl0", "does not select mt02")
    assert "nodes[2].nccl_socket_ifname" in ifname["fix"]
    versions = _find(checks, "fail", "nccl versions", "node-b", "node-a 2.28.9", "node-b 2.30.4")
    assert "node-b" in versions["fix"]


def test_data_ip_on_no_interface_is_refused_by_check_and_up(cluster: NetCluster) -> None:
    path = _recipe(cluster, "ghost", [_node(0, ", data_ip: 10.231.0.1"), _node(1, ", data_ip: 10.231.99.2")])
    res = forklift(cluster, "net", "check", str(path), "--json", "--no-measure")
    assert res.returncode == 1, res.stderr[-3000:]
    found = _find(_checks(res), "fail", "data_ip", "node-b", "10.231.99.2 is on no interface of node-b")
    assert "nodes[1].data_ip: 10.231.0.2" in found["fix"]

    up = forklift(cluster, "up", str(path), "--name", "ghost", "--preflight-only")
    assert up.returncode != 0
    assert "node-b" in up.stderr and "10.231.99.2" in up.stderr and "no interface" in up.stderr


def test_apply_writes_derived_settings_and_render_uses_them(cluster: NetCluster) -> None:
    path = _recipe(cluster, "bare", [_node(i) for i in range(3)])
    before = path.read_text()
    shown = forklift(cluster, "net", "apply", str(path), "--no-measure")
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "+  - {host: node-c, ssh: root@10.231.0.3, data_ip: 10.231.0.3" in shown.stdout
    assert path.read_text() == before  # without --write nothing changes
    dry = forklift(cluster, "net", "apply", str(path), "--no-measure", "--write", "--dry-run")
    assert dry.returncode == 0 and path.read_text() == before

    done = forklift(cluster, "net", "apply", str(path), "--no-measure", "--write")
    assert done.returncode == 0, done.stderr[-3000:]
    text = path.read_text()
    assert text.startswith("# net test recipe: bare") and "# the API" in text  # comments kept
    nodes = yaml.safe_load(text)["nodes"]
    assert [n["data_ip"] for n in nodes] == ["10.231.0.1", "10.231.0.2", "10.231.0.3"]
    assert [n["nccl_socket_ifname"] for n in nodes] == ["=fl0", "=fl0", "=lan0"]
    assert [n["gloo_socket_ifname"] for n in nodes] == ["fl0", "fl0", "lan0"]

    rendered = forklift(cluster, "render", str(path), "--json")
    assert rendered.returncode == 0, rendered.stderr[-3000:]
    ranks = {r["host"]: r for r in json.loads(rendered.stdout)["ranks"]}
    assert ranks["node-c"]["env"]["NCCL_SOCKET_IFNAME"] == "=lan0"
    assert ranks["node-c"]["env"]["GLOO_SOCKET_IFNAME"] == "lan0"
    assert ranks["node-b"]["env"]["NCCL_SOCKET_IFNAME"] == "=fl0"
    assert ranks["node-b"]["env"]["VLLM_HOST_IP"] == "10.231.0.2"
    argv = ranks["node-c"]["argv"]
    assert argv[argv.index("--master-addr") + 1] == "10.231.0.1"

    again = forklift(cluster, "net", "check", str(path), "--json", "--no-measure")
    assert [c for c in _checks(again) if c["status"] == "fail"] == [], again.stdout[-3000:]
    assert forklift(cluster, "net", "apply", str(path), "--no-measure").stdout.strip().endswith(
        "already matches the derived settings")

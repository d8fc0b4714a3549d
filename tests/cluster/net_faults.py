"""A three-node namespace cluster with the network faults ``forklift net check`` must find (root only).

- fl0: the bridge 10.231.0.0/24 every node is on (a switch); node-c's end is renamed ``lan0`` (interface names
  differ per node).
- Per node pair (a, b): ``tb{a}{b}`` on 10.231.1{k}.0/24, shaped to 200 Mbit/s at both ends with ``tc tbf``, and
  ``mt{a}{b}`` on 10.231.2{k}.0/24 with MTU 9000 on a and 1500 on b (k = 1, 2, 3 for the pairs 01, 02, 12).
- ``block_port(cluster, 0, port)``: an nftables table on node-a dropping TCP to that port.
- ``stub_nccl(folder, code)``: a tiny libnccl.so.2 whose ncclGetVersion answers ``code`` (needs a C compiler).

Only addresses created here (10.231.x) are targeted.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.cluster import netns

PAIRS = ((0, 1), (0, 2), (1, 2))
RATE = "200mbit"
NFT_TABLE = "forklift_test"


def _pair_index(a: int, b: int) -> int:
    return PAIRS.index((a, b)) + 1


def shaped_ip(a: int, b: int, node: int) -> str:
    return f"10.231.1{_pair_index(a, b)}.{node + 1}"


def mtu_ip(a: int, b: int, node: int) -> str:
    return f"10.231.2{_pair_index(a, b)}.{node + 1}"


def build(tmp: Path, tag: str) -> netns.NetCluster:
    cluster = netns.start(tmp, tag, n=3)
    try:
        ns_c = cluster.nodes[2].ns
        netns.sh("ip", "-n", ns_c, "link", "set", netns.IFNAME, "down")
        netns.sh("ip", "-n", ns_c, "link", "set", netns.IFNAME, "name", "lan0")
        netns.sh("ip", "-n", ns_c, "link", "set", "lan0", "up")
        for a, b in PAIRS:
            k = _pair_index(a, b)
            name = f"tb{a}{b}"
            netns.add_link(cluster, a, b, 10 + k, tag=tag, name=name)
            for idx in (a, b):
                netns.sh("ip", "netns", "exec", cluster.nodes[idx].ns, "tc", "qdisc", "add", "dev", name, "root",
                         "tbf", "rate", RATE, "burst", "64kb", "latency", "50ms")
            netns.add_link(cluster, a, b, 20 + k, tag=tag, name=f"mt{a}{b}", mtu=(9000, 1500))
    except BaseException:
        netns.stop(cluster)
        raise
    return cluster


def block_port(cluster: netns.NetCluster, index: int, port: int) -> None:
    """Drop inbound TCP to ``port`` in node ``index``'s namespace (nftables)."""
    run = cluster.exec_argv(index, "nft")
    netns.sh(*run, "add", "table", "inet", NFT_TABLE)
    netns.sh(*run, "add", "chain", "inet", NFT_TABLE, "input",
             "{ type filter hook input priority 0 ; policy accept ; }")
    netns.sh(*run, "add", "rule", "inet", NFT_TABLE, "input", "tcp", "dport", str(port), "drop")


def stub_nccl(folder: Path, code: int) -> Path | None:
    """A shared library answering ncclGetVersion with ``code``; None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / "nccl_stub.c"
    src.write_text(f"int ncclGetVersion(int *v) {{ *v = {code}; return 0; }}\n")
    lib = folder / "libnccl.so.2"
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,--build-id", "-o", str(lib), str(src)], check=True)
    return lib


def unavailable_reason() -> str | None:
    reason = netns.unavailable_reason()
    if reason:
        return reason
    for tool in ("iperf3", "nft", "tc"):
        if shutil.which(tool) is None:
            return f"needs {tool} (make system-packages installs iperf3 and nftables)"
    return None

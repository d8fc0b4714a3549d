"""Two GB10 nodes as the gather program would report them, assembled from public captures (tests/data/net):

- HCA names, states, active_mtu and sys_image_guid: parsed from the two ibv_devinfo captures of one pair (node A
  cabled on port 1, node B on port 0; index ids 53062434312 / 53066235706).
- phys_port_name and PCI functions: daqiri PR#108 (enp1s0f0np0 p0 0000:01:00.0, enp1s0f1np1 p1 0000:01:00.1,
  enP2p1s0f0np0 p0 0002:01:00.0; the excerpt is cut before enP2p1s0f1np1, which NVIDIA's connect-two-sparks README
  names the twin of enp1s0f1np1).
- Speeds and MTU: the aitopatom probe (200000 Mb/s and MTU 9000 on every CX-7 netdev, 10000 on enP7s7).
- GID tables: node A's rocep1s0f1 is the gx10-interconnect table (RoCE v2 IPv4 at index 5), node B's rocep1s0f0 the
  "drift" table (index 3 empty, RoCE v2 IPv4 at 4; the peer's address 192.168.100.11 is in that capture too).
  The second-PCIe twins' tables were not captured: they are built here in the common layout (fe80 at 0-1, the
  IPv4 pair at 2-3), which NVIDIA's perf guide shows as GID index 3.
- Addresses: each twin on its own subnet (eugr NETWORKING.md), the management NIC on the LAN.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

from forklift.net import parse
from forklift.net.topology import NodeNet, Route

DATA = Path(__file__).resolve().parents[2] / "data" / "net"
_SSHD = ("  sl  local_address rem_address   st tx_queue rx_queue\n"
         "   0: 00000000:0016 00000000:0000 0A 00000000:00000000\n")  # sshd listening on 22 (/proc/net/tcp)
GUIDS = {"a": "4cbb:4703:002d:1a16", "b": "4821:0b03:0096:04cb"}
PCI = {"enp1s0f0np0": ("p0", "0000:01:00.0", "rocep1s0f0"), "enp1s0f1np1": ("p1", "0000:01:00.1", "rocep1s0f1"),
       "enP2p1s0f0np0": ("p0", "0002:01:00.0", "roceP2p1s0f0"), "enP2p1s0f1np1": ("p1", "0002:01:00.1", "roceP2p1s0f1")}


def _hex_gid(ip: str) -> str:
    packed = ipaddress.IPv6Address(f"::ffff:{ip}").exploded
    return packed


def _tool_table(name: str, ndev: str) -> list[dict[str, Any]]:
    """The gx10-interconnect table rows (`gid N  GID  TYPE ...`), skipping the empty entry."""
    rows = re.findall(r"gid (\d+)\s+([0-9a-f:]{39})\s+(IB/RoCE v1|RoCE v2)", (DATA / name).read_text())
    return [{"index": int(i), "gid": g, "type": t, "ndev": ndev} for i, g, t in rows]


def _drift_table(ndev: str, ip: str) -> list[dict[str, Any]]:
    """The "drift" summary (index 0-1 fe80, 2 v1 IPv4, 3 empty, 4 v2 IPv4): its text has no full fe80 GID."""
    text = (DATA / "gb10-gid-table-drift-index3-empty-index4-v2.SUMMARIZED.txt").read_text()
    assert "index 3  （空）" in text and "index 4  RoCE v2" in text
    return [{"index": 0, "gid": "fe80:0000:0000:0000:722a:d7ff:fe00:0001", "type": "IB/RoCE v1", "ndev": ndev},
            {"index": 1, "gid": "fe80:0000:0000:0000:722a:d7ff:fe00:0001", "type": "RoCE v2", "ndev": ndev},
            {"index": 2, "gid": _hex_gid(ip), "type": "IB/RoCE v1", "ndev": ndev},
            {"index": 4, "gid": _hex_gid(ip), "type": "RoCE v2", "ndev": ndev}]


def _common_table(ndev: str, ip: str | None) -> list[dict[str, Any]]:
    out = [{"index": 0, "gid": "fe80:0000:0000:0000:4ebb:47ff:fe2f:9113", "type": "IB/RoCE v1", "ndev": ndev},
           {"index": 1, "gid": "fe80:0000:0000:0000:4ebb:47ff:fe2f:9113", "type": "RoCE v2", "ndev": ndev}]
    if ip:
        out += [{"index": 2, "gid": _hex_gid(ip), "type": "IB/RoCE v1", "ndev": ndev},
                {"index": 3, "gid": _hex_gid(ip), "type": "RoCE v2", "ndev": ndev}]
    return out


def _ip_addr(addrs: dict[str, str | None], mtu: dict[str, int]) -> str:
    import json

    rows = []
    for i, (name, cidr) in enumerate(addrs.items(), start=2):
        info = [{"family": "inet", "local": cidr.split("/")[0], "prefixlen": int(cidr.split("/")[1]),
                 "scope": "global", "label": name}] if cidr else []
        rows.append({"ifindex": i, "ifname": name, "mtu": mtu.get(name, 1500), "operstate": "UP",
                     "address": f"4c:bb:47:00:00:{i:02x}", "addr_info": info})
    return json.dumps(rows)


def raw(which: str, addrs: dict[str, str | None], gids: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    capture = "gb10-ibv_devinfo-port1-cabled-mtu9000-nodeA.txt" if which == "a" else \
        "gb10-ibv_devinfo-port0-cabled-mtu9000-nodeB.txt"
    ibv_text = (DATA / capture).read_text()
    states = {h: p["ports"][1]["state"] for h, p in parse.ibv_devinfo(ibv_text).items()}
    netdevs: dict[str, Any] = {
        name: {"mtu": "9000", "operstate": "up" if states[hca] == "ACTIVE" else "down", "speed": "200000",
               "phys_port_name": ppn, "device": f"/sys/devices/platform/{pci}", "wireless": False, "hcas": [hca]}
        for name, (ppn, pci, hca) in PCI.items()}
    netdevs["enP7s7"] = {"mtu": "1500", "operstate": "up", "speed": "10000", "device": "/sys/devices/x/0007:01:00.0",
                         "wireless": False, "hcas": []}
    rdma = {hca: {"fw_ver": "28.45.4028", "sys_image_guid": GUIDS[which], "netdevs": [name],
                  "ports": {"1": {"state": "4: ACTIVE" if states[hca] == "ACTIVE" else "1: DOWN",
                                  "rate": "200 Gb/sec (4X HDR)" if states[hca] == "ACTIVE" else "40 Gb/sec (4X QDR)",
                                  "link_layer": "Ethernet", "gids": gids.get(hca, [])}}}
            for name, (_, _, hca) in PCI.items()}
    return {"hostname": f"spark-{which}", "tools": {"ip": "/usr/sbin/ip"},
            "ip_addr": {"rc": 0, "out": _ip_addr(addrs, {n: 9000 for n in PCI}), "err": ""},
            "ip_route_default": {"rc": 0, "out": '[{"dst":"default","gateway":"192.168.1.1","dev":"enP7s7"}]'},
            "netdevs": netdevs, "rdma": rdma, "ibv_devinfo": {"rc": 0, "out": ibv_text}, "proc_net_tcp": _SSHD,
            "nccl": {"status": "found", "how": "libnccl.so.2 after import torch", "code": 22809,
                     "path": "/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2", "build_id": "a7f420a1"}}


def node_a() -> NodeNet:
    addrs = {"enP7s7": "192.168.1.163/24", "enp1s0f0np0": None, "enp1s0f1np1": "192.168.100.10/24",
             "enP2p1s0f0np0": None, "enP2p1s0f1np1": "192.168.101.10/24"}
    gids = {"rocep1s0f1": _tool_table("gb10-gx10-interconnect-gids-ipv4-at-index5.TOOL-OUTPUT.txt", "enp1s0f1np1"),
            "roceP2p1s0f1": _common_table("enP2p1s0f1np1", "192.168.101.10"),
            "rocep1s0f0": _common_table("enp1s0f0np0", None), "roceP2p1s0f0": _common_table("enP2p1s0f0np0", None)}
    return parse.node("spark-a", raw("a", addrs, gids))


def node_b(*, twin_ip: str | None = "192.168.101.11/24") -> NodeNet:
    addrs = {"enP7s7": "192.168.1.164/24", "enp1s0f0np0": "192.168.100.11/24", "enp1s0f1np1": None,
             "enP2p1s0f0np0": twin_ip, "enP2p1s0f1np1": None}
    twin = twin_ip.split("/")[0] if twin_ip else None
    gids = {"rocep1s0f0": _drift_table("enp1s0f0np0", "192.168.100.11"),
            "roceP2p1s0f0": _common_table("enP2p1s0f0np0", twin)}
    return parse.node("spark-b", raw("b", addrs, gids))


def connected_routes(facts: dict[str, NodeNet]) -> list[Route]:
    """What `ip route get` answers between nodes that share subnets (connected routes; no default gateway used)."""
    out = []
    for src, node in facts.items():
        for dst, peer in facts.items():
            if dst == src:
                continue
            for iface in peer.interfaces.values():
                for addr in iface.ipv4:
                    dev = next((i.name for i in node.interfaces.values() for a in i.ipv4
                                if ipaddress.ip_address(addr.ip) in a.network()), None)
                    out.append(Route(src, dst, addr.ip, dev=dev, error=None if dev else "Network is unreachable"))
    return out

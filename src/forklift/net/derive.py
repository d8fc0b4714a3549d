"""Derive each node's data_ip, NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME, NCCL_IB_HCA and RoCE v2 GID indices
from the gathered facts and the routes between nodes. Pure functions.

Rules (sources in the research notes of issue 18):
- data_ip: an IPv4 address every other node routes to directly (no gateway); among those, the fastest link,
  RDMA-capable first, never Wi-Fi, the default-route (management) interface last, equal MTU at both ends, the
  user's current choice on a tie, then interface order. A path measured degraded is avoided.
- NCCL_SOCKET_IFNAME (``=name``, exact) and GLOO_SOCKET_IFNAME: the interface holding the node's data_ip.
- NCCL_IB_HCA (``=a,b``): the ACTIVE RDMA devices on the twins (same ``phys_port_name`` on the same adapter) of
  every interface that routes to a peer, that carry an IPv4 RoCE v2 GID. On GB10 that is both PCIe halves of the
  cabled port, computed per node (cabling may use port 0 on one node and port 1 on the other).
- GID index per HCA: the lowest index whose type is RoCE v2 and whose IPv4-mapped address is on the GID's netdev.
  NCCL >= 2.21.5 finds the same entry itself, so forklift shows it and never sets NCCL_IB_GID_INDEX unasked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from forklift.net.topology import Interface, NodeNet, Route

VIRTUAL_PREFIXES = ("docker", "br-", "virbr", "veth", "cni", "flannel", "cali", "vxlan", "tun", "tap", "lxc")


@dataclass(frozen=True)
class NodeSettings:
    """What one node should use."""

    host: str
    data_ip: str | None = None
    ifname: str | None = None
    ib_hca: tuple[str, ...] = ()
    gid_index: dict[str, int | None] = field(default_factory=dict)
    """Per HCA in ``ib_hca``: the RoCE v2 IPv4 GID index (None: no such entry)."""
    reason: str = ""

    def env(self, *, gid_index: bool = False) -> dict[str, str]:
        """The NCCL / Gloo variables for this node (NCCL_IB_GID_INDEX only when asked and one index fits all)."""
        out: dict[str, str] = {}
        if self.ifname:
            out["NCCL_SOCKET_IFNAME"] = f"={self.ifname}"
            out["GLOO_SOCKET_IFNAME"] = self.ifname
        if self.ib_hca:
            out["NCCL_IB_HCA"] = "=" + ",".join(self.ib_hca)
        index = self.uniform_gid_index
        if gid_index and index is not None:
            out["NCCL_IB_GID_INDEX"] = str(index)
        return out

    @property
    def uniform_gid_index(self) -> int | None:
        values = set(self.gid_index.values())
        return values.pop() if len(values) == 1 and None not in values else None


@dataclass(frozen=True)
class Candidate:
    host: str
    ip: str
    iface: Interface
    score: tuple[int, ...]
    routes: tuple[Route, ...]


def _route_map(routes: Iterable[Route]) -> dict[tuple[str, str], Route]:
    return {(r.src, r.dst_ip): r for r in routes}


def _virtual(iface: Interface) -> bool:
    return iface.name.startswith(VIRTUAL_PREFIXES)


def candidates(host: str, facts: Mapping[str, NodeNet], routes: Iterable[Route], *, current: str | None = None,
               degraded: frozenset[tuple[str, str]] = frozenset()) -> list[Candidate]:
    """Addresses of ``host`` every other node reaches, best first."""
    me = facts[host]
    table = _route_map(routes)
    out: list[Candidate] = []
    for iface in me.interfaces.values():
        if not iface.up:
            continue
        for addr in iface.ipv4:
            if addr.scope not in ("global", "site") or addr.ip.startswith("127."):
                continue
            reach = [table.get((other, addr.ip)) for other in facts if other != host]
            if any(r is None or r.dev is None or r.error for r in reach):
                continue
            found = tuple(r for r in reach if r is not None)
            out.append(Candidate(host, addr.ip, iface, _score(me, iface, addr.ip, found, facts, current, degraded),
                                 found))
    out.sort(key=lambda c: c.iface.pci or f"~{c.iface.name}")  # ties: the first PCIe link (eugr picks enp1...)
    out.sort(key=lambda c: c.score, reverse=True)
    return out


def _score(me: NodeNet, iface: Interface, ip: str, reach: tuple[Route, ...], facts: Mapping[str, NodeNet],
           current: str | None, degraded: frozenset[tuple[str, str]]) -> tuple[int, ...]:
    peer_ifaces = [facts[r.src].interfaces.get(r.dev or "") for r in reach]
    speeds = [i.speed_mbps or 0 for i in [iface, *peer_ifaces] if i is not None] or [0]
    mtus = {i.mtu for i in [iface, *peer_ifaces] if i is not None}
    rdma = any(p.active for h in iface.hcas if h in me.rdma for p in me.rdma[h].ports)
    return (
        int((me.host, ip) not in degraded),
        int(all(r.gateway is None for r in reach)),
        int(not iface.wireless),
        int(not _virtual(iface)),
        int(rdma),
        min(speeds),
        int(iface.name != me.default_dev),
        int(len(mtus) == 1),
        int(ip == current),
    )


def gid_index(node: NodeNet, hca: str) -> int | None:
    """The RoCE v2 GID index NCCL would pick on ``hca``: an IPv4-mapped entry whose address is on its netdev."""
    dev = node.rdma.get(hca)
    if dev is None:
        return None
    for port in dev.ports:
        for gid in sorted(port.gids, key=lambda g: g.index):
            if not gid.roce_v2 or gid.ipv4 is None:
                continue
            netdev = node.interfaces.get(gid.ndev or "")
            if netdev is not None and any(a.ip == gid.ipv4 for a in netdev.addresses):
                return gid.index
    return None


def ib_hcas(node: NodeNet, peer_ifaces: Iterable[str]) -> tuple[str, ...]:
    """ACTIVE HCAs on the twins of the peer-facing interfaces that carry an IPv4 RoCE v2 GID."""
    found: dict[str, str] = {}
    for name in peer_ifaces:
        for twin in node.twins(name):
            for hca in twin.hcas:
                dev = node.rdma.get(hca)
                if dev is not None and any(p.active for p in dev.ports) and gid_index(node, hca) is not None:
                    found[hca] = twin.pci or f"~{hca}"
    return tuple(sorted(found, key=lambda h: (found[h], h)))  # PCI order: the same position on every node


def settings(facts: Mapping[str, NodeNet], routes: Iterable[Route], current: Mapping[str, str | None], *,
             degraded: frozenset[tuple[str, str]] = frozenset()) -> dict[str, NodeSettings]:
    """Per node: the best data_ip (``current`` is the recipe's), its interface, the peer-facing HCAs and their GID
    indices. A node with no address that every peer reaches gets no data_ip (and a reason)."""
    routes = list(routes)
    out: dict[str, NodeSettings] = {}
    chosen: dict[str, str] = {}
    for host in facts:
        ranked = candidates(host, facts, routes, current=current.get(host), degraded=degraded)
        if not ranked:
            out[host] = NodeSettings(host, reason="no IPv4 address of this node is reachable from every other node")
            continue
        best = ranked[0]
        chosen[host] = best.ip
        out[host] = NodeSettings(host, best.ip, best.iface.name, reason=_why(best, ranked))
    table = _route_map(routes)
    for host, node in facts.items():
        if host not in chosen:
            continue
        peer_devs = {r.dev for peer, ip in chosen.items() if peer != host
                     for r in [table.get((host, ip))] if r is not None and r.dev}
        hcas = ib_hcas(node, sorted(peer_devs | {out[host].ifname or ""}))
        out[host] = NodeSettings(host, out[host].data_ip, out[host].ifname, hcas,
                                 {h: gid_index(node, h) for h in hcas}, out[host].reason)
    return out


def _why(best: Candidate, ranked: list[Candidate]) -> str:
    speed = f"{best.iface.speed_mbps // 1000} Gb/s" if best.iface.speed_mbps else "speed unknown"
    others = ", ".join(f"{c.ip} ({c.iface.name})" for c in ranked[1:4])
    return f"{best.ip} on {best.iface.name} ({speed}), reached by every peer" + (f"; also possible: {others}"
                                                                                 if others else "")

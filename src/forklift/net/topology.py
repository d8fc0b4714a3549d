"""What ``forklift net`` knows about nodes and the paths between them: plain frozen dataclasses, JSON-ready."""

from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass, field
from typing import Any, Literal


def to_json(obj: Any) -> Any:
    """Dataclasses, tuples, sets and dicts as JSON-ready data."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        items = sorted(obj) if isinstance(obj, set | frozenset) else obj
        return [to_json(v) for v in items]
    return obj


@dataclass(frozen=True)
class Address:
    ip: str
    prefixlen: int
    scope: str = "global"

    @property
    def version(self) -> int:
        return ipaddress.ip_address(self.ip).version

    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        return ipaddress.ip_interface(f"{self.ip}/{self.prefixlen}").network


@dataclass(frozen=True)
class Interface:
    """One netdev: what sysfs and ``ip -j addr`` say (speed from sysfs, else ethtool)."""

    name: str
    mtu: int | None = None
    operstate: str = "unknown"
    speed_mbps: int | None = None
    speed_source: str | None = None
    addresses: tuple[Address, ...] = ()
    mac: str | None = None
    phys_port_name: str | None = None
    pci: str | None = None
    """The PCI function (domain:bus:dev.fn) the netdev sits on; None for virtual interfaces."""
    hcas: tuple[str, ...] = ()
    """RDMA devices on the same PCI function (``/sys/class/net/IF/device/infiniband``)."""
    wireless: bool = False
    pcie_width: str | None = None
    pcie_speed: str | None = None

    @property
    def ipv4(self) -> list[Address]:
        return [a for a in self.addresses if a.version == 4 and a.scope != "host"]

    @property
    def up(self) -> bool:
        return self.operstate in ("up", "unknown") and self.name != "lo"


@dataclass(frozen=True)
class Gid:
    index: int
    gid: str
    type: str | None = None
    """``RoCE v2`` or ``IB/RoCE v1`` (sysfs gid_attrs/types; None when unreadable)."""
    ndev: str | None = None
    ipv4: str | None = None
    """The IPv4 address embedded in an IPv4-mapped GID (::ffff:a.b.c.d)."""

    @property
    def roce_v2(self) -> bool:
        return (self.type or "").strip().lower() == "roce v2"


@dataclass(frozen=True)
class RdmaPort:
    hca: str
    port: int
    state: str = "UNKNOWN"
    """ACTIVE, DOWN, INIT, ARMED (from ``4: ACTIVE``)."""
    phys_state: str | None = None
    rate_gbit: float | None = None
    link_layer: str | None = None
    gids: tuple[Gid, ...] = ()
    active_mtu: int | None = None
    """From ``ibv_devinfo`` when installed (4096 with netdev MTU 9000, 1024 with 1500)."""

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"


@dataclass(frozen=True)
class RdmaDevice:
    name: str
    netdevs: tuple[str, ...] = ()
    fw_ver: str | None = None
    sys_image_guid: str | None = None
    ports: tuple[RdmaPort, ...] = ()


@dataclass(frozen=True)
class NcclLib:
    """The NCCL library this node's vLLM would load, and what it says its version is."""

    status: Literal["found", "none", "error", "unknown"] = "unknown"
    how: str = ""
    path: str | None = None
    realpath: str | None = None
    version: str | None = None
    code: int | None = None
    build_id: str | None = None
    size: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class NodeNet:
    """One node's network facts."""

    host: str
    hostname: str = ""
    interfaces: dict[str, Interface] = field(default_factory=dict)
    rdma: dict[str, RdmaDevice] = field(default_factory=dict)
    nccl: NcclLib = field(default_factory=NcclLib)
    tools: dict[str, bool] = field(default_factory=dict)
    listening: frozenset[int] = frozenset()
    default_dev: str | None = None
    """The interface of the default route (usually the management or Wi-Fi link)."""
    errors: tuple[str, ...] = ()

    def owner_of(self, ip: str) -> Interface | None:
        """The interface holding address ``ip``."""
        for iface in self.interfaces.values():
            if any(a.ip == ip for a in iface.addresses):
                return iface
        return None

    def twins(self, ifname: str) -> list[Interface]:
        """The netdevs on the same physical port as ``ifname`` (itself included): same ``phys_port_name`` on the
        same adapter (same RDMA sys_image_guid). GB10 shows each CX-7 port as two netdevs, one per PCIe link."""
        me = self.interfaces.get(ifname)
        if me is None or not me.phys_port_name:
            return [me] if me else []
        guid = self._guid(me)
        return [i for i in self.interfaces.values() if i.phys_port_name == me.phys_port_name
                and (i.name == me.name or (guid is not None and self._guid(i) == guid))]

    def _guid(self, iface: Interface) -> str | None:
        for hca in iface.hcas:
            dev = self.rdma.get(hca)
            if dev is not None and dev.sys_image_guid:
                return dev.sys_image_guid
        return None


@dataclass(frozen=True)
class Route:
    """``ip -j route get DST`` on ``src``: which local interface reaches the peer's address."""

    src: str
    dst: str
    dst_ip: str
    dev: str | None = None
    gateway: str | None = None
    prefsrc: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class PortProbe:
    """Timed TCP connects from ``src`` to ``dst``'s ip:port while forklift listened there."""

    src: str
    dst: str
    ip: str
    port: int
    label: str
    ok: bool
    error: str | None = None
    rtt_ms: tuple[float, ...] = ()


@dataclass(frozen=True)
class Bandwidth:
    """One bounded throughput test from ``src`` to ``dst``'s address."""

    src: str
    dst: str
    ip: str
    tool: Literal["iperf3", "ib_write_bw"]
    gbit: float | None = None
    seconds: float | None = None
    streams: int = 1
    device: str | None = None
    retransmits: int | None = None
    error: str | None = None

"""Parsers for what the gather program brings back: sysfs values, ``ip -j``, ``ethtool``, ``ibv_devinfo``,
``iperf3 -J``, ``ib_write_bw``, and NCCL's version code. Pure functions of text; each is tested on real output
(tests/data/net/, every file's source cited there)."""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any

from forklift.host.parse import listening_ports
from forklift.net.topology import Address, Gid, Interface, NcclLib, NodeNet, RdmaDevice, RdmaPort

_IBV_GID = re.compile(r"GID\[\s*(\d+)\]:\s*([0-9a-fA-F:.]+)(?:,\s*(.+))?")
_IBV_KV = re.compile(r"^\s*([a-z_]+):\s*(.*)$")
_IB_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


def port_state(raw: str | None) -> str:
    """sysfs ``4: ACTIVE`` or ibv_devinfo ``PORT_ACTIVE (4)`` -> ``ACTIVE``."""
    if not raw:
        return "UNKNOWN"
    text = raw.strip()
    if ":" in text:
        text = text.split(":", 1)[1]
    text = text.split("(")[0].strip().upper()
    return text.removeprefix("PORT_") or "UNKNOWN"


def rate_gbit(raw: str | None) -> float | None:
    """sysfs ``200 Gb/sec (4X HDR)`` -> 200.0."""
    m = re.match(r"\s*([\d.]+)\s*Gb/sec", raw or "")
    return float(m.group(1)) if m else None


def gid_ipv4(gid: str) -> str | None:
    """The IPv4 address inside an IPv4-mapped GID (``0000:...:ffff:c0a8:640a`` or ``::ffff:192.168.100.10``)."""
    try:
        addr = ipaddress.IPv6Address(gid.strip())
    except ValueError:
        return None
    mapped = addr.ipv4_mapped
    return str(mapped) if mapped is not None else None


def speed_mbps(raw: str | None) -> int | None:
    """sysfs ``speed``: Mb/s, or None when the link is down or the driver does not say (-1, unreadable)."""
    try:
        value = int((raw or "").strip())
    except ValueError:
        return None
    return value if value > 0 else None


def ethtool_speed(text: str) -> int | None:
    """``ethtool IF``'s ``Speed: 200000Mb/s`` -> 200000 (None for ``Unknown!``)."""
    m = re.search(r"^\s*Speed:\s*(\d+)\s*Mb/s", text, re.MULTILINE)
    return int(m.group(1)) if m else None


def ip_addr(text: str) -> dict[str, dict[str, Any]]:
    """``ip -j addr`` -> {ifname: {mtu, operstate, mac, addresses}}."""
    out: dict[str, dict[str, Any]] = {}
    for entry in json.loads(text or "[]"):
        addrs = tuple(Address(a["local"], int(a.get("prefixlen", 32)), str(a.get("scope", "global")))
                      for a in entry.get("addr_info", []) if a.get("family") in ("inet", "inet6") and "local" in a)
        out[entry["ifname"]] = {"mtu": entry.get("mtu"), "operstate": str(entry.get("operstate", "UNKNOWN")).lower(),
                                "mac": entry.get("address"), "addresses": addrs}
    return out


def route_get(text: str) -> dict[str, str | None]:
    """``ip -j route get IP`` -> {dev, gateway, prefsrc, type}."""
    rows = json.loads(text or "[]")
    if not rows:
        return {"dev": None, "gateway": None, "prefsrc": None, "type": None}
    row = rows[0]
    return {"dev": row.get("dev"), "gateway": row.get("gateway"), "prefsrc": row.get("prefsrc"),
            "type": row.get("type")}


def gid_line(line: str) -> tuple[int, str, str | None] | None:
    """One ``ibv_devinfo -v`` GID line -> (index, gid, type or None): ``GID[  3]:  ::ffff:200.0.209.6, RoCE v2``;
    older rdma-core prints eight groups and no type."""
    m = _IBV_GID.search(line)
    if m is None:
        return None
    return int(m.group(1)), m.group(2), m.group(3).strip() if m.group(3) else None


def ibv_devinfo(text: str) -> dict[str, dict[str, Any]]:
    """``ibv_devinfo [-v]`` -> {hca: {fw_ver, sys_image_guid, ports: {n: {state, max_mtu, active_mtu, link_layer,
    gids: [(index, gid, type or None)]}}}}. GIDs appear with ``-v``; newer rdma-core appends ``, RoCE v2`` and
    compresses zeros, older prints eight groups and no type."""
    out: dict[str, dict[str, Any]] = {}
    hca: dict[str, Any] | None = None
    port: dict[str, Any] | None = None
    for line in text.splitlines():
        gid = gid_line(line)
        if gid is not None and port is not None:
            port["gids"].append(gid)
            continue
        kv = _IBV_KV.match(line)
        if not kv:
            continue
        key, value = kv.group(1), kv.group(2).strip()
        if key == "hca_id":
            hca = out.setdefault(value, {"ports": {}})
            port = None
        elif hca is not None and key == "port" and value.isdigit():
            port = hca["ports"].setdefault(int(value), {"gids": []})
        elif port is not None and key in ("state", "link_layer", "phys_state"):
            port[key] = port_state(value) if key == "state" else value
        elif port is not None and key in ("max_mtu", "active_mtu"):
            port[key] = int(value.split()[0]) if value.split() and value.split()[0].isdigit() else None
        elif hca is not None and port is None and key in ("fw_ver", "sys_image_guid", "vendor_part_id", "board_id"):
            hca[key] = value
    return out


def ib_write_bw(text: str) -> dict[str, Any]:
    """An ``ib_write_bw`` client's report -> {gbit (average of the last result row), device, gid_index, mtu,
    qps}. forklift runs it with ``--report_gbits``; a report in MB/sec gives ``mb_per_s`` and no ``gbit``."""
    out: dict[str, Any] = {"gbit": None}
    unit_gbit = "BW average[Gb/sec]" in text
    for line in text.splitlines():
        row = _IB_ROW.match(line)
        if row:
            out["gbit" if unit_gbit else "mb_per_s"] = float(row.group(4))
        for label, key in (("Device", "device"), ("GID index", "gid_index"), ("Mtu", "mtu"),
                           ("Number of qps", "qps"), ("Link type", "link_type")):
            m = re.search(rf"\b{re.escape(label)}\s*:\s*(\S+)", line)
            if m and key not in out:
                out[key] = m.group(1)
    return out


def iperf3(text: str) -> dict[str, Any]:
    """``iperf3 -J`` -> {gbit (received), sent_gbit, retransmits, seconds, streams, error}."""
    try:
        data = json.loads(text)
    except ValueError:
        return {"gbit": None, "error": (text.strip().splitlines() or ["no output"])[-1][:200]}
    if data.get("error"):
        return {"gbit": None, "error": str(data["error"])}
    end = data.get("end", {})
    recv, sent = end.get("sum_received", {}), end.get("sum_sent", {})
    streams = len(data.get("start", {}).get("connected", [])) or 1
    gbit = recv.get("bits_per_second", sent.get("bits_per_second"))
    return {"gbit": gbit / 1e9 if gbit is not None else None,
            "sent_gbit": sent["bits_per_second"] / 1e9 if "bits_per_second" in sent else None,
            "retransmits": sent.get("retransmits"), "seconds": recv.get("seconds", sent.get("seconds")),
            "streams": streams, "error": None}


def nccl_version(code: int) -> str:
    """ncclGetVersion's code -> ``2.28.9`` (major*10000+minor*100+patch since 2.9; major*1000+minor*100+patch
    before, as nccl.h's NCCL_VERSION macro)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def version_tuple(version: str | None) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in (version or "").split("."))
    except ValueError:
        return ()


def nccl_lib(raw: dict[str, Any] | None) -> NcclLib:
    if not raw:
        return NcclLib()
    code = raw.get("code")
    status = raw.get("status", "unknown")
    return NcclLib(status=status if status in ("found", "none", "error") else "unknown", how=str(raw.get("how", "")),
                   path=raw.get("path"), realpath=raw.get("realpath"), code=code,
                   version=nccl_version(int(code)) if isinstance(code, int) and code > 0 else None,
                   build_id=raw.get("build_id"), size=raw.get("size"), error=raw.get("error"))


def _interface(name: str, sysfs: dict[str, Any], ip: dict[str, Any], ethtool_text: str | None) -> Interface:
    speed, source = speed_mbps(sysfs.get("speed")), "sysfs"
    if speed is None and ethtool_text:
        speed, source = ethtool_speed(ethtool_text), "ethtool"
    mtu = ip.get("mtu") or (int(sysfs["mtu"]) if str(sysfs.get("mtu") or "").isdigit() else None)
    device = sysfs.get("device") or ""
    pci = device.rstrip("/").rsplit("/", 1)[-1] if re.search(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d$",
                                                               device) else None
    return Interface(name=name, mtu=mtu, operstate=(ip.get("operstate") or sysfs.get("operstate") or "unknown").lower(),
                     speed_mbps=speed, speed_source=source if speed else None, addresses=ip.get("addresses", ()),
                     mac=ip.get("mac") or sysfs.get("address"), phys_port_name=sysfs.get("phys_port_name") or None,
                     pci=pci, hcas=tuple(sysfs.get("hcas", ())), wireless=bool(sysfs.get("wireless")),
                     pcie_width=sysfs.get("pcie_width"), pcie_speed=sysfs.get("pcie_speed"))


def _rdma_device(name: str, raw: dict[str, Any], ibv: dict[str, Any]) -> RdmaDevice:
    ports = []
    for num, p in sorted(raw.get("ports", {}).items(), key=lambda kv: int(kv[0]) if str(kv[0]).isdigit() else 0):
        gids = tuple(Gid(index=int(g["index"]), gid=g["gid"], type=g.get("type"), ndev=g.get("ndev"),
                         ipv4=gid_ipv4(g["gid"])) for g in p.get("gids", []))
        extra = ibv.get("ports", {}).get(int(num), {})
        ports.append(RdmaPort(hca=name, port=int(num), state=port_state(p.get("state")), phys_state=p.get("phys_state"),
                              rate_gbit=rate_gbit(p.get("rate")), link_layer=p.get("link_layer"), gids=gids,
                              active_mtu=extra.get("active_mtu")))
    return RdmaDevice(name=name, netdevs=tuple(raw.get("netdevs", ())), fw_ver=raw.get("fw_ver"),
                      sys_image_guid=raw.get("sys_image_guid"), ports=tuple(ports))


def node(host: str, raw: dict[str, Any]) -> NodeNet:
    """A NodeNet from the gather program's JSON."""
    errors: list[str] = []
    ip_cmd = raw.get("ip_addr") or {}
    ips: dict[str, dict[str, Any]] = {}
    try:
        ips = ip_addr(ip_cmd.get("out", "")) if ip_cmd.get("rc") == 0 else {}
    except (ValueError, KeyError, TypeError) as exc:
        errors.append(f"ip -j addr: unreadable output ({exc})")
    if ip_cmd and ip_cmd.get("rc") != 0:
        errors.append(f"ip -j addr failed: {str(ip_cmd.get('err', '')).strip()[:200]}")
    sysfs = raw.get("netdevs") or {}
    ethtool = raw.get("ethtool") or {}
    names = sorted(set(sysfs) | set(ips))
    interfaces = {n: _interface(n, sysfs.get(n, {}), ips.get(n, {}),
                                (ethtool.get(n) or {}).get("out")) for n in names}
    ibv_raw = raw.get("ibv_devinfo") or {}
    ibv = ibv_devinfo(ibv_raw.get("out", "")) if ibv_raw.get("rc") == 0 else {}
    rdma = {n: _rdma_device(n, d, ibv.get(n, {})) for n, d in (raw.get("rdma") or {}).items()}
    default = raw.get("ip_route_default") or {}
    try:
        default_dev = route_get(default.get("out", "")).get("dev") if default.get("rc") == 0 else None
    except ValueError:
        default_dev = None
    return NodeNet(host=host, hostname=str(raw.get("hostname", "")), interfaces=interfaces, rdma=rdma,
                   nccl=nccl_lib(raw.get("nccl")), tools={k: bool(v) for k, v in (raw.get("tools") or {}).items()},
                   listening=listening_ports(str(raw.get("proc_net_tcp") or "")), default_dev=default_dev,
                   errors=tuple(errors))

"""Verdicts about the path between two nodes: the route to the peer's data_ip, the MTU at both ends, the head's
ports, and measured bandwidth against the network profile."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from forklift.hardware.profiles import NetworkProfile
from forklift.net.topology import Bandwidth, NodeNet, PortProbe, Route
from forklift.results import CheckResult, Status

DEGRADED = 0.3
"""Below this share of the profile's expected throughput a path is degraded (fail): GB10's broken CX-7 state reads
13 Gb/s against ~100 per rail (NVIDIA/dgx-spark-playbooks PR#108 flags 8-25 Gb/s)."""
SLOW = 0.7
"""Below this share: warn."""


def route(r: Route, data_ip_owner: Mapping[str, str]) -> CheckResult:
    """``r.src`` reaching ``r.dst``'s data_ip (``data_ip_owner``: host -> the interface holding its data_ip)."""
    where = f"{r.dst}'s data_ip {r.dst_ip}"
    if r.error or r.dev is None:
        return CheckResult("route", "fail", f"{r.src} has no route to {where}: {r.error or 'no device'}", host=r.src,
                           fix=f"Put {r.dst}'s data_ip on a network {r.src} is on (or add a route on {r.src}); "
                               "`forklift net check` lists the addresses every node reaches.")
    if r.gateway:
        return CheckResult("route", "warn", f"{r.src} reaches {where} through gateway {r.gateway} on {r.dev}, not a "
                           "direct link", host=r.src,
                           fix=f"Use an address of {r.dst} on a link {r.src} shares (a direct cable or the switch).")
    return CheckResult("route", "ok", f"{r.src} -> {where} via {r.dev}", host=r.src,
                       details={"dev": r.dev, "dst_ip": r.dst_ip, "peer_dev": data_ip_owner.get(r.dst)})


def mtu(r: Route, facts: Mapping[str, NodeNet], peer_dev: str | None) -> CheckResult | None:
    """The MTU of the interface ``r.src`` sends on against the interface holding the peer's address."""
    if r.dev in (None, "lo") or peer_dev is None or r.src not in facts or r.dst not in facts:
        return None  # no route, or both "nodes" on one host (delivered locally)
    mine, theirs = facts[r.src].interfaces.get(r.dev), facts[r.dst].interfaces.get(peer_dev)
    if mine is None or theirs is None or mine.mtu is None or theirs.mtu is None:
        return None
    if mine.mtu != theirs.mtu:
        host, iface, other, other_iface = (r.src, mine, r.dst, theirs) if mine.mtu < theirs.mtu else \
            (r.dst, theirs, r.src, mine)
        return CheckResult(
            "mtu", "fail", f"MTU mismatch on {r.src} {r.dev} ({mine.mtu}) <-> {r.dst} {peer_dev} ({theirs.mtu}): "
            "jumbo frames are dropped and RoCE falls back to the smaller path MTU", host=host,
            fix=f"Set MTU {other_iface.mtu} on {host}'s {iface.name} (as {other}'s {other_iface.name}): `ip link set "
                f"{iface.name} mtu {other_iface.mtu}`, and persist it in netplan/NetworkManager.")
    return CheckResult("mtu", "ok", f"MTU {mine.mtu} on {r.src} {r.dev} and {r.dst} {peer_dev}", host=r.src)


def port_held(head: str, port: int, label: str) -> CheckResult:
    return CheckResult("port", "warn", f"{label} {port} is already in use on {head}: not tested (a deployment "
                       "running?)", fix=f"Stop what listens on {port} on {head}, or pick another port in the recipe.",
                       host=head)


def ports(probes: Sequence[PortProbe]) -> list[CheckResult]:
    """Every worker reached the head's master (and Ray) port while forklift listened there."""
    out: list[CheckResult] = []
    for p in probes:
        target = f"{p.dst}:{p.port} ({p.label}) at {p.ip}"
        if p.ok:
            rtt = f", connect {min(p.rtt_ms):.2f} ms" if p.rtt_ms else ""
            out.append(CheckResult("port", "ok", f"{p.src} reaches {target}{rtt}", host=p.src,
                                   details={"rtt_ms": list(p.rtt_ms)}))
        elif (p.error or "").startswith("not tested"):
            out.append(CheckResult("port", "skip", f"{target}: {p.error}", host=p.dst))
        else:
            how = "timed out (a firewall drops it)" if p.error == "timeout" else f"failed: {p.error}"
            out.append(CheckResult("port", "fail", f"{p.src} cannot reach {target}: {how}", host=p.dst,
                                   fix=f"Open TCP {p.port} on {p.dst} for {p.src} (nft/ufw/iptables), or set "
                                       f"another {'ray.port' if p.label == 'ray port' else 'network.master_port'}."))
    return out


def bandwidth(b: Bandwidth, profile: NetworkProfile, dev: str | None) -> CheckResult:
    """A measured path against the profile's expected figure for that tool."""
    expected = profile.tcp_gbit if b.tool == "iperf3" else profile.rdma_gbit
    path = f"{b.src} -> {b.dst} {b.ip}" + (f" via {dev}" if dev else "")
    details = {"gbit": b.gbit, "expected_gbit": expected, "tool": b.tool, "streams": b.streams,
               "retransmits": b.retransmits, "src": b.src, "dst": b.dst, "ip": b.ip}
    if b.gbit is None:
        return CheckResult(f"{b.tool}", "fail", f"{path}: {b.tool} failed: {b.error}", host=b.src, details=details,
                           fix=f"Check that nothing blocks {b.tool} between {b.src} and {b.dst} (firewall, port).")
    shown = f"{path}: {b.gbit:.2f} Gb/s ({b.tool}, {b.streams} stream(s))"
    if not expected:
        return CheckResult(b.tool, "ok", f"{shown}; the {profile.name} profile has no expected figure", host=b.src,
                           details=details)
    ratio = b.gbit / expected
    if ratio < SLOW:
        status: Status = "fail" if ratio < DEGRADED else "warn"
        word = "degraded" if status == "fail" else "slow"
        return CheckResult(
            b.tool, status, f"{shown}: {word}, {ratio:.0%} of the {expected:g} Gb/s the {profile.name} profile expects",
            host=b.src, details=details,
            fix=f"Check {dev or 'the link'} between {b.src} and {b.dst}: cable, switch port, traffic shaping "
                f"(`tc qdisc show dev {dev or 'IF'}`), or use another link; GB10 CX-7 ports stuck near 13 Gb/s are a "
                "known state (NVIDIA/dgx-spark-playbooks PR#108 and its recovery notes).")
    return CheckResult(b.tool, "ok", f"{shown}, {ratio:.0%} of {expected:g} Gb/s", host=b.src, details=details)

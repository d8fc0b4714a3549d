"""``check(target) -> NetReport``: gather every node's facts, find the routes between nodes, reach the head's ports,
measure each pair, derive the settings and judge all of it. Every step runs on all nodes at once."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from forklift.hardware.profiles import NetworkProfile
from forklift.hardware.profiles import network as network_profile
from forklift.launch.hosts import runners_for
from forklift.net import derive, gather, probe, store
from forklift.net import verdicts_node as vn
from forklift.net import verdicts_pair as vp
from forklift.net.derive import NodeSettings
from forklift.net.target import Target
from forklift.net.topology import Bandwidth, NodeNet, PortProbe, Route, to_json
from forklift.recipe.schema import Recipe
from forklift.results import CheckResult
from forklift.runner import Runner, fan_out
from forklift.runner.ssh import default_ssh_config

EventFn = Callable[[str], None]


def _noop(_: str) -> None:
    return None


@dataclass
class NetReport:
    """Everything ``net check`` found: facts per node, paths per pair, the derived settings and the verdicts."""

    target: str
    profile: str
    nodes: dict[str, NodeNet] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)
    routes: list[Route] = field(default_factory=list)
    data_ips: dict[str, str | None] = field(default_factory=dict)
    """The address each node was measured at: its data_ip when that is on one of its interfaces, else derived."""
    ports: list[PortProbe] = field(default_factory=list)
    bandwidth: list[Bandwidth] = field(default_factory=list)
    derived: dict[str, NodeSettings] = field(default_factory=dict)
    checks: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = to_json({k: getattr(self, k) for k in ("target", "profile", "nodes", "unreachable",
                                                                     "routes", "data_ips", "ports", "bandwidth")})
        out["derived"] = {h: {**to_json(s), "env": s.env()} for h, s in self.derived.items()}
        out["checks"] = [c.to_json() for c in self.checks]
        out["seconds"] = round(self.seconds, 2)
        return out


def _addresses(node: NodeNet, configured: str | None) -> list[str]:
    ips = [a.ip for i in node.interfaces.values() if i.up for a in i.ipv4 if a.scope in ("global", "site")]
    return sorted(set(ips) | ({configured} if configured else set()))


def _effective(recipe: Recipe, facts: Mapping[str, NodeNet],
               derived: Mapping[str, NodeSettings]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for node in recipe.nodes:
        if node.host not in facts:
            continue
        ok = node.data_ip is not None and facts[node.host].owner_of(node.data_ip) is not None
        out[node.host] = node.data_ip if ok else derived[node.host].data_ip
    return out


def _pair_tests(recipe: Recipe, runners: Mapping[int, Runner], facts: Mapping[str, NodeNet],
                ips: Mapping[str, str | None], routes: list[Route]) -> list[Bandwidth]:
    hosts = [n.host for n in recipe.nodes]
    table = {(r.src, r.dst_ip): r for r in routes}
    out: list[Bandwidth] = []
    for round_ in probe.rounds(len(hosts)):
        todo = [(a, b) for a, b in round_ if a in runners and b in runners and ips.get(hosts[b])]
        done = fan_out(((p, p) for p in todo), lambda p: _one_pair(runners, hosts, facts, ips, table, *p))
        out += [bw for p in todo for bw in done.results.get(p, [])]
        out += [Bandwidth(hosts[a], hosts[b], str(ips[hosts[b]]), "iperf3", error=str(exc))
                for (a, b), exc in done.errors.items()]
    return out


def _one_pair(runners: Mapping[int, Runner], hosts: list[str], facts: Mapping[str, NodeNet],
              ips: Mapping[str, str | None], table: Mapping[tuple[str, str], Route], a: int, b: int) -> list[Bandwidth]:
    src, dst, ip = hosts[a], hosts[b], str(ips[hosts[b]])
    route = table.get((src, ip))
    if route is None or route.dev is None:
        return []
    out: list[Bandwidth] = []
    if facts[src].tools.get("iperf3") and facts[dst].tools.get("iperf3"):
        out.append(probe.iperf3(runners, hosts, a, b, ip, facts[dst]))
    pair = _hca_pair(facts[src], route.dev, facts[dst], ip)
    if pair and facts[src].tools.get("ib_write_bw") and facts[dst].tools.get("ib_write_bw"):
        gids = (derive.gid_index(facts[src], pair[0]), derive.gid_index(facts[dst], pair[1]))
        out.append(probe.ib_write_bw(runners, hosts, a, b, ip, pair, gids, facts[dst]))
    return out


def _hca_pair(src: NodeNet, dev: str, dst: NodeNet, ip: str) -> tuple[str, str] | None:
    def active(node: NodeNet, ifname: str | None) -> str | None:
        iface = node.interfaces.get(ifname or "")
        for hca in iface.hcas if iface else ():
            if hca in node.rdma and any(p.active for p in node.rdma[hca].ports):
                return hca
        return None

    owner = dst.owner_of(ip)
    mine, theirs = active(src, dev), active(dst, owner.name if owner else None)
    return (mine, theirs) if mine and theirs else None


def _missing_tools(facts: Mapping[str, NodeNet]) -> list[CheckResult]:
    out = []
    for host, node in facts.items():
        if not node.tools.get("iperf3"):
            out.append(CheckResult("iperf3", "skip", f"iperf3 is not installed on {host}: TCP bandwidth to and from "
                                   "it was not measured", host=host, fix=f"Install it on {host}: apt-get install "
                                   "iperf3"))
        if node.rdma and not node.tools.get("ib_write_bw"):
            out.append(CheckResult("ib_write_bw", "skip", f"perftest is not installed on {host}: RDMA bandwidth was "
                                   "not measured", host=host, fix=f"Install it on {host}: apt-get install perftest"))
    return out


def _node_checks(target: Target, report: NetReport, profile: NetworkProfile) -> list[CheckResult]:
    recipe, ref = target.recipe, target.origin
    out: list[CheckResult] = []
    for i, spec in enumerate(recipe.nodes):
        node = report.nodes.get(spec.host)
        if node is None:
            out.append(CheckResult("reachable", "fail", report.unreachable.get(spec.host, "not reached"),
                                   host=spec.host, fix=f"Check that `ssh {spec.ssh or spec.host} true` works."))
            continue
        settings = report.derived[spec.host]
        out.append(vn.data_ip(recipe, i, node, settings, ref))
        ip = report.data_ips.get(spec.host)
        owner = node.owner_of(ip) if ip else None
        if owner is not None:
            out += vn.link_speed(node, owner.name, profile)
        if len(recipe.nodes) > 1:
            out += vn.socket_ifnames(recipe, i, node, owner.name if owner else settings.ifname, ref)
        out += vn.ib_settings(recipe, i, node, settings, ref)
    return out + vn.nccl_libraries(recipe, report.nodes)


def _pair_checks(report: NetReport, profile: NetworkProfile) -> list[CheckResult]:
    owners = {h: (o.name if (o := report.nodes[h].owner_of(ip)) else "") for h, ip in report.data_ips.items() if ip}
    wanted = {(h, ip) for h, ip in report.data_ips.items() if ip}
    out: list[CheckResult] = []
    for r in report.routes:
        if (r.dst, r.dst_ip) not in wanted:
            continue
        out.append(vp.route(r, owners))
        found = vp.mtu(r, report.nodes, owners.get(r.dst) or None)
        if found is not None and (found.status != "ok" or r.src < r.dst):
            out.append(found)
    out += vp.ports(report.ports)
    devs = {(r.src, r.dst_ip): r.dev for r in report.routes}
    out += [vp.bandwidth(b, profile, devs.get((b.src, b.ip))) for b in report.bandwidth]
    return _dedupe_mtu(out)


def _dedupe_mtu(results: list[CheckResult]) -> list[CheckResult]:
    seen: set[str] = set()
    out = []
    for r in results:
        if r.id == "mtu" and r.status == "fail":
            if r.summary in seen:
                continue
            seen.add(r.summary)
        out.append(r)
    return out


def check(target: Target, *, runners: Mapping[int, Runner] | None = None, measure: bool = True,
          on_event: EventFn = _noop) -> NetReport:
    """Gather, probe, measure, derive and judge. Never raises for a node: unreachable nodes are verdicts."""
    t0 = time.monotonic()
    recipe = target.recipe
    profile = network_profile(recipe.network.profile)
    runners = dict(runners) if runners is not None else runners_for(recipe, ssh_config=default_ssh_config())
    report = NetReport(target.origin, profile.name)
    on_event(f"gathering facts on {len(runners)} node(s)")
    report.nodes, errors = gather.facts(recipe, runners)
    report.unreachable = {h: e.message for h, e in errors.items()}
    index = {n.host: i for i, n in enumerate(recipe.nodes)}
    live = {index[h]: runners[index[h]] for h in report.nodes}
    current = {n.host: n.data_ip for n in recipe.nodes}
    if len(recipe.nodes) < 2:  # one node: no data network, nothing to route, measure or derive
        report.derived = {h: derive.NodeSettings(h, reason="single node") for h in report.nodes}
        report.checks = _node_checks(target, report, profile)
        report.seconds = time.monotonic() - t0
        return report
    on_event("finding the routes between nodes")
    report.routes = gather.routes(recipe, live, {h: _addresses(n, current[h]) for h, n in report.nodes.items()})
    derived = derive.settings(report.nodes, report.routes, current)
    report.data_ips = _effective(recipe, report.nodes, derived)
    if measure and recipe.head.host in report.nodes and report.data_ips.get(recipe.head.host):
        on_event("reaching the head's ports")
        head = report.nodes[recipe.head.host]
        specs = probe.ports_to_test(recipe)
        report.ports = probe.reach_ports(recipe, live, str(report.data_ips[recipe.head.host]), specs, head.listening)
        report.checks += [vp.port_held(recipe.head.host, s.port, s.label) for s in specs if s.port in head.listening]
        on_event("measuring bandwidth between node pairs")
        report.bandwidth = _pair_tests(recipe, live, report.nodes, report.data_ips, report.routes)
        report.checks += _missing_tools(report.nodes)
    bw_checks = [vp.bandwidth(b, profile, None) for b in report.bandwidth]
    degraded = frozenset((c.details["dst"], c.details["ip"]) for c in bw_checks if c.status == "fail")
    report.derived = derive.settings(report.nodes, report.routes, current, degraded=degraded)
    report.checks = _node_checks(target, report, profile) + _pair_checks(report, profile) + report.checks
    store.save([c for c in report.checks if "tool" in c.details])
    report.seconds = time.monotonic() - t0
    return report

"""The fast part of ``net check`` that ``up``'s preflight runs (well under a second per node, nothing measured):
every node holds its data_ip; the head routes to every other node's address, through the interface
NCCL_SOCKET_IFNAME selects when one is set; a path ``net check`` measured degraded, or a link negotiated below
the network profile, is a warning.

``cluster.preflight`` calls ``link_checks`` (net sits below cluster: it reaches nodes through launch.hosts).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from forklift.hardware.profiles import network as network_profile
from forklift.launch.render import node_addr
from forklift.net import parse, store
from forklift.net.nccl_env import matches, rank_env
from forklift.net.topology import NodeNet
from forklift.recipe.schema import Recipe
from forklift.results import CheckResult
from forklift.runner import Runner, fan_out

TIMEOUT_S = 15.0


def _cmd(runner: Runner, argv: list[str]) -> dict[str, object]:
    res = runner.run(argv, timeout=TIMEOUT_S)
    return {"rc": res.returncode, "out": res.stdout, "err": res.stderr}


def _gather(runners: Mapping[int, Runner], peers: list[str]) -> dict[int, dict[str, object]]:
    """``ip -j addr`` on every node; on the head also ``ip -j route get`` per peer and the speed of each route's
    interface (plain argv: no Python needed on the node)."""
    def one(i: int) -> dict[str, object]:
        raw: dict[str, object] = {"ip_addr": _cmd(runners[i], ["ip", "-j", "addr"])}
        if i == 0:
            routes = {ip: _cmd(runners[i], ["ip", "-j", "route", "get", ip]) for ip in peers}
            devs = {str(parse.route_get(str(r["out"])).get("dev")) for r in routes.values() if r["rc"] == 0}
            raw["routes"] = routes
            raw["netdevs"] = {d: {"speed": str(_cmd(runners[i], ["cat", f"/sys/class/net/{d}/speed"])["out"])}
                              for d in sorted(devs) if d and "/" not in d}
        return raw

    done = fan_out(((i, i) for i in runners), one)
    return done.results


def _owner_checks(recipe: Recipe, nodes: Mapping[int, NodeNet]) -> list[CheckResult]:
    out = []
    for i, node in nodes.items():
        spec = recipe.nodes[i]
        if spec.data_ip and node.owner_of(spec.data_ip) is None:
            out.append(CheckResult("data_ip", "fail", f"data_ip {spec.data_ip} is on no interface of {spec.host}",
                                   host=spec.host, fix=f"Fix nodes[{i}].data_ip: `forklift net check` shows the "
                                   "address every node reaches; `forklift net apply --write RECIPE` writes it."))
    return out


def _head_checks(recipe: Recipe, raw: Mapping[str, object], head: NodeNet) -> list[CheckResult]:
    out = []
    env = rank_env(recipe, 0)
    chosen = env.get("NCCL_SOCKET_IFNAME")
    profile = network_profile(recipe.network.profile)
    routes = raw.get("routes") if isinstance(raw.get("routes"), dict) else {}
    assert isinstance(routes, dict)
    for i, spec in enumerate(recipe.nodes[1:], start=1):
        ip = node_addr(spec)
        cmd = routes.get(ip) or {}
        got = parse.route_get(str(cmd.get("out", ""))) if cmd.get("rc") == 0 else {"dev": None}
        where = f"{spec.host}'s address {ip}"
        if not got.get("dev") or got.get("type") in ("unreachable", "prohibit", "blackhole"):
            out.append(CheckResult("data path", "fail", f"the head {recipe.head.host} has no route to {where}: "
                                   f"{str(cmd.get('err', '')).strip() or got.get('type') or 'no route'}",
                                   host=recipe.head.host, fix=f"Fix nodes[{i}].data_ip (`forklift net check` "
                                   "lists the addresses every node reaches)."))
            continue
        dev = str(got["dev"])
        if chosen and not matches(chosen, dev):
            out.append(CheckResult("data path", "fail", f"the head {recipe.head.host} reaches {where} through {dev}, "
                                   f"but NCCL_SOCKET_IFNAME={chosen} does not select {dev}", host=recipe.head.host,
                                   fix=f"Set the head's nccl_socket_ifname to '={dev}' or fix nodes[{i}].data_ip "
                                       "(`forklift net apply --write RECIPE`)."))
            continue
        out.append(CheckResult("data path", "ok", f"{recipe.head.host} -> {where} via {dev}", host=recipe.head.host))
        out += _degraded(recipe.head.host, spec.host, ip, dev, head, profile.link_gbit, profile.name)
    return out


def _degraded(head: str, peer: str, ip: str, dev: str, node: NodeNet, link_gbit: float | None,
              profile: str) -> list[CheckResult]:
    out = []
    for entry in store.recent(head, peer, ip):
        if entry.get("status") in ("fail", "warn"):
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(entry.get("at", 0))))
            out.append(CheckResult("data path", "warn", f"{entry.get('summary')} (net check, {when})", host=head,
                                   fix=f"Run `forklift net check` again; if it stays slow, check {dev} between "
                                       f"{head} and {peer} or use another link."))
    iface = node.interfaces.get(dev)
    if link_gbit and iface is not None and iface.speed_mbps and iface.speed_mbps < link_gbit * 1000:
        out.append(CheckResult("data path", "warn", f"{dev} on {head} negotiated {iface.speed_mbps / 1000:g} Gb/s, the "
                               f"{profile} profile expects {link_gbit:g}", host=head,
                               fix=f"Check the cable and switch port of {dev} (`ethtool {dev}`)."))
    return out


def link_checks(recipe: Recipe, runners: Mapping[int, Runner]) -> list[CheckResult]:
    """Refuse (fail) a data_ip on no interface of its node, or one the head cannot reach through the chosen
    interface; warn on a degraded link. Nothing for a single node."""
    if len(recipe.nodes) < 2 or 0 not in runners:
        return []
    peers = sorted({node_addr(n) for n in recipe.nodes[1:]})
    raw = _gather(runners, peers)
    nodes = {i: parse.node(recipe.nodes[i].host, r) for i, r in raw.items()}
    out = _owner_checks(recipe, nodes)
    if 0 in raw:
        out += _head_checks(recipe, raw[0], nodes[0])
    return out

"""`up`'s fast link checks and `net check`'s flow, with FakeRunners answering `ip -j` and the gather program
(JSON shaped as iproute2 6.1 prints it: tests/data/net/ip-j-*.json)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from forklift import net
from forklift.net import preflight, store
from forklift.recipe import validate
from forklift.recipe.schema import Recipe
from forklift.results import CheckResult
from forklift.runner import FakeRunner
from tests.unit.net import gb10

ADDRS = {"spark-a": {"enP7s7": "192.168.1.163", "enp1s0f1np1": "192.168.100.10"},
         "spark-b": {"enP7s7": "192.168.1.164", "enp1s0f0np0": "192.168.100.11"}}


def ip_addr(host: str) -> str:
    return json.dumps([{"ifindex": i, "ifname": name, "mtu": 9000, "operstate": "UP",
                        "addr_info": [{"family": "inet", "local": ip, "prefixlen": 24, "scope": "global"}]}
                       for i, (name, ip) in enumerate(ADDRS[host].items(), start=2)])


def route(dev: str | None) -> str:
    return json.dumps([{"dst": "x", "dev": dev, "prefsrc": "192.168.100.10", "flags": [], "uid": 0, "cache": []}])


def recipe(b_ip: str = "192.168.100.11", **network: Any) -> Recipe:
    return validate({"model": {"source": "bundled:smollm2-135m-instruct"}, "network": network, "nodes": [
        {"host": "spark-a", "ssh": "me@spark-a", "hardware": "gb10", "data_ip": "192.168.100.10"},
        {"host": "spark-b", "ssh": "me@spark-b", "hardware": "gb10", "data_ip": b_ip}]})


def runners(head_route: str | None = "enp1s0f1np1", *, speed: str = "200000") -> dict[int, FakeRunner]:
    head = FakeRunner("spark-a").on(["ip", "-j", "addr"], stdout=ip_addr("spark-a"))
    if head_route:
        head.on(["ip", "-j", "route", "get"], stdout=route(head_route))
    else:
        head.on(["ip", "-j", "route", "get"], stderr="RTNETLINK answers: Network is unreachable", returncode=2)
    head.on(["cat"], stdout=speed + "\n")
    return {0: head, 1: FakeRunner("spark-b").on(["ip", "-j", "addr"], stdout=ip_addr("spark-b"))}


def only(results: Sequence[CheckResult], status: str) -> list[CheckResult]:
    return [r for r in results if r.status == status]


def test_reachable_data_ip_passes() -> None:
    got = preflight.link_checks(recipe(), runners())
    assert [(r.status, r.summary) for r in got] == [
        ("ok", "spark-a -> spark-b's address 192.168.100.11 via enp1s0f1np1")]


def test_data_ip_on_no_interface_and_no_route_fail() -> None:
    got = preflight.link_checks(recipe("10.9.9.9"), runners(None))
    fails = only(got, "fail")
    assert [(r.host, r.id) for r in fails] == [("spark-b", "data_ip"), ("spark-a", "data path")]
    assert "10.9.9.9 is on no interface of spark-b" in fails[0].summary
    assert "no route to spark-b's address 10.9.9.9" in fails[1].summary and "Network is unreachable" in fails[1].summary


def test_route_through_an_interface_nccl_does_not_select_fails() -> None:
    got = preflight.link_checks(recipe(nccl_socket_ifname="=enP7s7"), runners())
    fail = only(got, "fail")[0]
    assert "through enp1s0f1np1, but NCCL_SOCKET_IFNAME==enP7s7 does not select enp1s0f1np1" in fail.summary


def test_degraded_link_warns_from_net_checks_record_and_sysfs_speed() -> None:
    store.save([CheckResult("iperf3", "fail", "spark-a -> spark-b 192.168.100.11: 12.86 Gb/s: degraded",
                            details={"src": "spark-a", "dst": "spark-b", "ip": "192.168.100.11", "tool": "iperf3",
                                     "gbit": 12.86})])
    got = preflight.link_checks(recipe(), runners(speed="100000"))
    warns = only(got, "warn")
    assert len(warns) == 2 and "12.86 Gb/s: degraded (net check," in warns[0].summary
    assert "negotiated 100 Gb/s" in warns[1].summary and not only(got, "fail")


def test_single_node_has_nothing_to_check() -> None:
    one = validate({"model": {"source": "bundled:smollm2-135m-instruct"}})
    assert preflight.link_checks(one, {0: FakeRunner()}) == []


def _program(raw: dict[str, Any], routes: Mapping[str, str | None]) -> Callable[[Sequence[str]], str]:
    """Answer the gather program's runs: facts, then ``ip route get`` for the addresses it is asked for."""
    def answer(argv: Sequence[str]) -> str:
        args = json.loads(argv[-1])
        out: dict[str, Any] = dict(raw) if args.get("facts", True) else {}
        out["routes"] = {ip: {"rc": 0, "out": route(routes.get(ip)), "err": ""} if routes.get(ip)
                         else {"rc": 2, "out": "", "err": "Network is unreachable"} for ip in args.get("routes", [])}
        out["connects"] = []
        return json.dumps(out)
    return answer


def test_check_flow_on_two_gb10_nodes_without_measuring() -> None:
    a_routes = {"192.168.100.11": "enp1s0f1np1", "192.168.1.164": "enP7s7"}
    b_routes = {"192.168.100.10": "enp1s0f0np0", "192.168.1.163": "enP7s7", "192.168.101.10": None}
    a_raw = gb10.raw("a", {"enP7s7": "192.168.1.163/24", "enp1s0f1np1": "192.168.100.10/24",
                           "enP2p1s0f1np1": "192.168.101.10/24"}, {})
    b_raw = gb10.raw("b", {"enP7s7": "192.168.1.164/24", "enp1s0f0np0": "192.168.100.11/24"}, {})
    fakes = {0: FakeRunner("spark-a").on(lambda argv: True, stdout=_program(a_raw, a_routes)),
             1: FakeRunner("spark-b").on(lambda argv: True, stdout=_program(b_raw, b_routes))}
    target = net.Target(recipe(), "recipe", "r.yaml", None)
    report = net.check(target, runners=fakes, measure=False)
    assert report.unreachable == {}
    assert report.derived["spark-a"].data_ip == "192.168.100.10"  # 192.168.101.10: spark-b has no route to it
    statuses = {(c.host, c.id): c.status for c in report.checks}
    assert statuses[("spark-a", "route")] == "ok" and statuses[("spark-b", "data_ip")] == "ok"
    assert statuses[("spark-b", "nccl")] == "ok"
    data = net.facts(target, runners=fakes, measure=False)
    assert data["derived"]["spark-b"]["env"]["NCCL_SOCKET_IFNAME"] == "=enp1s0f0np0"
    assert data["nodes"]["spark-a"]["interfaces"]["enp1s0f1np1"]["speed_mbps"] == 200000

"""Verdicts name the node, the interface and the change; thresholds come from the network profile."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest

from forklift.hardware.profiles import network
from forklift.net import derive, probe
from forklift.net import verdicts_node as vn
from forklift.net import verdicts_pair as vp
from forklift.net.nccl_env import matches
from forklift.net.topology import Bandwidth, NcclLib, PortProbe, Route
from forklift.recipe import validate
from tests.unit.net import gb10


def recipe(**network: Any) -> Any:
    return validate({"model": {"source": "bundled:smollm2-135m-instruct"}, "network": network, "nodes": [
        {"host": "spark-a", "ssh": "me@spark-a", "hardware": "gb10", "data_ip": "192.168.100.10"},
        {"host": "spark-b", "ssh": "me@spark-b", "hardware": "gb10", "data_ip": "192.168.100.11"}]})


def test_nccl_list_syntax() -> None:
    # NCCL src/misc/utils.cc: prefixes by default, '=' exact, '^' exclude, ':port' suffix ignored for names
    assert matches("enp1s0f1", "enp1s0f1np1") and not matches("=enp1s0f1", "enp1s0f1np1")
    assert matches("=fl0,lan0", "lan0") and not matches("=fl0", "fl01")
    assert not matches("^docker,lo", "docker0") and matches("^docker,lo", "enp1s0f0np0")
    assert not matches("rocep", "roceP2p1s0f1")  # case-sensitive (notes: `rocep` misses the second PCIe twin)
    assert matches("=rocep1s0f1:1,roceP2p1s0f1:1", "roceP2p1s0f1")


def test_nccl_versions_must_agree() -> None:
    a, b = gb10.node_a(), gb10.node_b()
    newer = dataclasses.replace(b, nccl=dataclasses.replace(b.nccl, version="2.30.4", code=23004))
    got = vn.nccl_libraries(recipe(), {"spark-a": a, "spark-b": newer})
    bad = [c for c in got if c.status == "fail"]
    assert len(bad) == 1 and bad[0].host == "spark-b" and "spark-a 2.28.9, spark-b 2.30.4" in bad[0].summary
    assert "Install NCCL 2.28.9 on spark-b" in (bad[0].fix or "")
    # same version, another build (vllm#42354: pip 2.28.9 build a7f420a1... vs DGX OS 2.28.9 build c0db9360...)
    other = dataclasses.replace(b, nccl=dataclasses.replace(b.nccl, build_id="c0db9360",
                                                            path="/usr/lib/aarch64-linux-gnu/libnccl.so.2"))
    warn = [c for c in vn.nccl_libraries(recipe(), {"spark-a": a, "spark-b": other}) if c.status == "warn"]
    assert len(warn) == 1 and "different build" in warn[0].summary and "VLLM_NCCL_SO_PATH" in (warn[0].fix or "")


def test_gpu_node_without_nccl_fails_cpu_node_is_fine() -> None:
    a = gb10.node_a()
    none = dataclasses.replace(a, nccl=NcclLib(status="none", how="torch is not a CUDA build"))
    got = vn.nccl_libraries(recipe(), {"spark-a": none})
    assert got[0].status == "fail" and "no NCCL" in got[0].summary
    cpu = validate({"model": {"source": "bundled:smollm2-135m-instruct"}, "nodes": [{"host": "spark-a"}]})
    assert vn.nccl_libraries(cpu, {"spark-a": none})[0].status == "ok"


def test_forced_gid_index_that_disagrees_fails_old_nccl_warns() -> None:
    a = gb10.node_a()
    facts = {"spark-a": a, "spark-b": gb10.node_b()}
    settings = derive.settings(facts, gb10.connected_routes(facts), {})["spark-a"]
    forced = recipe()
    forced.nodes[0].env = {"NCCL_IB_GID_INDEX": "3"}
    got = vn.gid_verdict(forced, 0, a, settings)
    assert got.status == "fail" and "rocep1s0f1=5" in got.summary and "unset" in (got.fix or "")
    old = dataclasses.replace(a, nccl=dataclasses.replace(a.nccl, version="2.19.3"))
    warned = vn.gid_verdict(recipe(), 0, old, settings)
    assert warned.status == "warn" and "GID index 0" in warned.summary and "Upgrade NCCL" in (warned.fix or "")
    fine = vn.gid_verdict(recipe(), 0, a, settings)
    assert fine.status == "ok" and "never force" in fine.summary


def test_nccl_ib_hca_listing_the_uncabled_port_warns() -> None:
    a = gb10.node_a()
    facts = {"spark-a": a, "spark-b": gb10.node_b()}
    settings = derive.settings(facts, gb10.connected_routes(facts), {})["spark-a"]
    wrong = recipe(nccl_ib_hca="rocep1s0f0,roceP2p1s0f0")  # the head's value pushed to a node cabled on port 1
    got = vn.ib_settings(wrong, 0, a, settings, "r.yaml")
    hca = next(c for c in got if c.id == "nccl_ib_hca")
    assert hca.status == "warn" and "nodes[0].nccl_ib_hca: '=rocep1s0f1,roceP2p1s0f1'" in (hca.fix or "")
    right = recipe(nccl_ib_hca="=rocep1s0f1,roceP2p1s0f1")
    assert next(c for c in vn.ib_settings(right, 0, a, settings, "r.yaml") if c.id == "nccl_ib_hca").status == "ok"


def test_socket_ifname_that_misses_the_data_interface_fails() -> None:
    a = gb10.node_a()
    got = vn.socket_ifnames(recipe(nccl_socket_ifname="enP7s7"), 0, a, "enp1s0f1np1", "r.yaml")
    assert got[0].status == "fail" and "selects enP7s7" in got[0].summary
    assert "nodes[0].nccl_socket_ifname: '=enp1s0f1np1'" in (got[0].fix or "")
    gloo = vn.socket_ifnames(recipe(gloo_socket_ifname="eth9"), 0, a, "enp1s0f1np1", "r.yaml")
    assert gloo[0].status == "fail" and "no such interface" in gloo[0].summary


def test_data_ip_on_no_interface_and_link_speed() -> None:
    a = gb10.node_a()
    r = recipe()
    r.nodes[0].data_ip = "10.9.9.9"
    settings = derive.NodeSettings("spark-a", "192.168.100.10", "enp1s0f1np1")
    got = vn.data_ip(r, 0, a, settings, "r.yaml")
    assert got.status == "fail" and "10.9.9.9 is on no interface of spark-a" in got.summary
    assert "nodes[0].data_ip: 192.168.100.10 (on enp1s0f1np1)" in (got.fix or "")
    slow = dataclasses.replace(a, interfaces={**a.interfaces, "enp1s0f1np1": dataclasses.replace(
        a.interfaces["enp1s0f1np1"], speed_mbps=100000)})  # the switch capture's mis-negotiated 100000Mb/s
    speed = vn.link_speed(slow, "enp1s0f1np1", network("ethernet-200g"))
    assert speed[0].status == "warn" and "negotiated 100 Gb/s" in speed[0].summary


def test_mtu_mismatch_names_the_smaller_end() -> None:
    a, b = gb10.node_a(), gb10.node_b()
    small = dataclasses.replace(b, interfaces={**b.interfaces, "enp1s0f0np0": dataclasses.replace(
        b.interfaces["enp1s0f0np0"], mtu=1500)})
    r = Route("spark-a", "spark-b", "192.168.100.11", dev="enp1s0f1np1")
    got = vp.mtu(r, {"spark-a": a, "spark-b": small}, "enp1s0f0np0")
    assert got is not None and got.status == "fail" and got.host == "spark-b"
    assert "ip link set enp1s0f0np0 mtu 9000" in (got.fix or "")
    same = vp.mtu(r, {"spark-a": a, "spark-b": b}, "enp1s0f0np0")
    assert same is not None and same.status == "ok"


@pytest.mark.parametrize(("gbit", "status"), [(12.86, "fail"), (60.0, "warn"), (104.0, "ok")])
def test_bandwidth_against_the_gb10_profile(gbit: float, status: str) -> None:
    # 12.86 Gb/s: the degraded CX-7 state's TCP figure (dgx-spark-playbooks PR#108); 104: iperf3 -P 4 per rail
    got = vp.bandwidth(Bandwidth("spark-a", "spark-b", "192.168.100.11", "iperf3", gbit=gbit, streams=8),
                       network("ethernet-200g"), "enp1s0f1np1")
    assert got.status == status and got.host == "spark-a"
    if status == "fail":
        assert "degraded" in got.summary and "enp1s0f1np1" in (got.fix or "")
    failed = vp.bandwidth(Bandwidth("a", "b", "1.2.3.4", "iperf3", error="unable to connect"), network("ethernet-1g"),
                          None)
    assert failed.status == "fail" and "unable to connect" in failed.summary


def test_ports_and_routes() -> None:
    probes = [PortProbe("b", "a", "10.0.0.1", 29500, "master port", False, "timeout"),
              PortProbe("c", "a", "10.0.0.1", 29500, "master port", True, None, (0.2, 0.1))]
    got = vp.ports(probes)
    assert got[0].status == "fail" and got[0].host == "a" and "timed out" in got[0].summary
    assert "Open TCP 29500 on a" in (got[0].fix or "")
    assert got[1].status == "ok" and "0.10 ms" in got[1].summary
    assert vp.route(Route("c", "b", "10.1.1.2", error="Network is unreachable"), {}).status == "fail"
    assert vp.route(Route("c", "b", "10.1.1.2", dev="eth0", gateway="10.0.0.254"), {}).status == "warn"


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_rounds_cover_every_pair_once_without_sharing_a_node(n: int) -> None:
    rounds = probe.rounds(n)
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == list(itertools.combinations(range(n), 2))
    assert all(len({x for p in r for x in p}) == 2 * len(r) for r in rounds)

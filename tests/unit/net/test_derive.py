"""Deriving data_ip, NCCL_SOCKET_IFNAME, NCCL_IB_HCA and the GID index on two GB10 nodes built from captures
(tests/unit/net/gb10.py says which capture each value comes from)."""

from __future__ import annotations

from forklift.net import derive
from forklift.net.topology import NodeNet
from tests.unit.net import gb10


def _pair(b: NodeNet | None = None) -> tuple[dict[str, NodeNet], dict[str, derive.NodeSettings]]:
    facts = {"spark-a": gb10.node_a(), "spark-b": b or gb10.node_b()}
    return facts, derive.settings(facts, gb10.connected_routes(facts), {"spark-a": None, "spark-b": None})


def test_twins_pair_by_phys_port_name_not_by_function_number() -> None:
    node = gb10.node_a()
    # daqiri PR#108 / NVIDIA README: enp1s0f1np1 and enP2p1s0f1np1 are one port (p1); f0 and f1 are not twins
    assert sorted(i.name for i in node.twins("enp1s0f1np1")) == ["enP2p1s0f1np1", "enp1s0f1np1"]
    assert sorted(i.name for i in node.twins("enp1s0f0np0")) == ["enP2p1s0f0np0", "enp1s0f0np0"]
    assert node.twins("enP7s7")[0].name == "enP7s7" and len(node.twins("enP7s7")) == 1


def test_gid_index_is_found_per_hca_not_assumed_3() -> None:
    a, b = gb10.node_a(), gb10.node_b()
    assert derive.gid_index(a, "rocep1s0f1") == 5  # gx10-interconnect table: two fe80 pairs take 0-3
    assert derive.gid_index(b, "rocep1s0f0") == 4  # "drift" table: index 3 empty
    assert derive.gid_index(a, "roceP2p1s0f1") == 3
    assert derive.gid_index(a, "rocep1s0f0") is None  # no IPv4 on that netdev


def test_cabling_on_different_ports_gives_per_node_settings() -> None:
    _, got = _pair()
    a, b = got["spark-a"], got["spark-b"]
    # the CX-7 subnet, not the 10 GbE management LAN both nodes also share; the first PCIe twin on a tie
    assert (a.data_ip, a.ifname) == ("192.168.100.10", "enp1s0f1np1")
    assert (b.data_ip, b.ifname) == ("192.168.100.11", "enp1s0f0np0")
    # node A is cabled on port 1, node B on port 0 (the two ibv_devinfo captures): each lists its own twins
    assert a.env()["NCCL_IB_HCA"] == "=rocep1s0f1,roceP2p1s0f1"
    assert b.env()["NCCL_IB_HCA"] == "=rocep1s0f0,roceP2p1s0f0"
    assert a.env()["NCCL_SOCKET_IFNAME"] == "=enp1s0f1np1" and b.env()["GLOO_SOCKET_IFNAME"] == "enp1s0f0np0"
    assert a.gid_index == {"rocep1s0f1": 5, "roceP2p1s0f1": 3}
    assert "NCCL_IB_GID_INDEX" not in a.env(gid_index=True)  # 5 and 3: no single index fits node A


def test_twin_without_ipv4_is_left_out_of_nccl_ib_hca() -> None:
    # gb10-hutch-ip-br-addr.txt: enP2p1s0f1np1 has only fe80, so its HCA has no IPv4 GID
    _, got = _pair(gb10.node_b(twin_ip=None))
    assert got["spark-b"].ib_hca == ("rocep1s0f0",)
    assert got["spark-b"].env(gid_index=True)["NCCL_IB_GID_INDEX"] == "4"


def test_a_degraded_path_is_avoided_and_an_unreachable_node_gets_no_data_ip() -> None:
    facts = {"spark-a": gb10.node_a(), "spark-b": gb10.node_b()}
    routes = gb10.connected_routes(facts)
    got = derive.settings(facts, routes, {}, degraded=frozenset({("spark-b", "192.168.100.11")}))
    assert got["spark-b"].data_ip == "192.168.101.11"  # the other twin's subnet
    cut = [r for r in routes if r.src != "spark-b"]  # spark-b routes to none of spark-a's addresses
    alone = derive.settings(facts, cut, {})
    assert alone["spark-a"].data_ip is None and "reachable" in alone["spark-a"].reason


def test_current_choice_wins_a_tie() -> None:
    facts = {"spark-a": gb10.node_a(), "spark-b": gb10.node_b()}
    got = derive.settings(facts, gb10.connected_routes(facts), {"spark-a": "192.168.101.10"})
    assert got["spark-a"].data_ip == "192.168.101.10"

"""Parsers on real output (tests/data/net/SOURCES.md cites every file)."""

from __future__ import annotations

import re
from pathlib import Path

from forklift.net import parse

DATA = Path(__file__).resolve().parents[2] / "data" / "net"


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_sysfs_rate_and_state_of_gb10_hcas() -> None:
    # gb10-zgx-sysfs-infiniband-rate-state.txt: HP ZGX Nano pair (blog, index id 27283978185)
    text = read("gb10-zgx-sysfs-infiniband-rate-state.txt")
    rows = re.findall(r"^(\S+)\s+(\d+ Gb/sec \([^)]*\))\s+(\d+: \w+)$", text, re.MULTILINE)
    got = {hca: (parse.rate_gbit(rate), parse.port_state(state)) for hca, rate, state in rows}
    assert got == {"rocep1s0f0": (40.0, "DOWN"), "rocep1s0f1": (200.0, "ACTIVE"),
                   "roceP2p1s0f0": (40.0, "DOWN"), "roceP2p1s0f1": (200.0, "ACTIVE")}


def test_ethtool_speed_healthy_and_misnegotiated() -> None:
    # NVIDIA/dgx-spark-playbooks multi-sparks-through-switch README: 100000 before the switch fix, 200000 after
    assert parse.ethtool_speed(read("gb10-playbook-switch-ethtool-speed-100G-misnegotiated.txt")) == 100000
    assert parse.ethtool_speed(read("gb10-playbook-switch-ethtool-speed-200G.txt")) == 200000
    # the ZGX blog's capture (index id 27283978185)
    assert parse.ethtool_speed(read("gb10-zgx-ethtool-speed-and-sysfs-rate.txt")) == 200000
    assert parse.ethtool_speed("\tSpeed: Unknown!\n") is None


def test_sysfs_speed_values_from_a_gb10_probe() -> None:
    # gb10-aitopatom-probe-sysfs-speed-mtu.txt (index id 59657914762): "speed_mbps=200000", "unknown", "?"
    text = read("gb10-aitopatom-probe-sysfs-speed-mtu.txt")
    speeds = dict(re.findall(r"^(\S+) speed_mbps=(\S+)", text, re.MULTILINE))
    parsed = {name: parse.speed_mbps(v) for name, v in speeds.items()}
    assert parsed["enp1s0f1np1"] == 200000 and parsed["enP7s7"] == 10000
    assert parsed["docker0"] is None and parsed["wlP9s9"] is None
    assert parse.speed_mbps("-1") is None


def test_ibv_devinfo_gb10_cabled_on_port_1() -> None:
    # index id 53062434312: f1 HCAs ACTIVE with active_mtu 4096 (MTU 9000), f0 DOWN with 1024
    hcas = parse.ibv_devinfo(read("gb10-ibv_devinfo-port1-cabled-mtu9000-nodeA.txt"))
    assert sorted(hcas) == ["roceP2p1s0f0", "roceP2p1s0f1", "rocep1s0f0", "rocep1s0f1"]
    assert {h: hcas[h]["ports"][1]["state"] for h in hcas} == {
        "rocep1s0f0": "DOWN", "rocep1s0f1": "ACTIVE", "roceP2p1s0f0": "DOWN", "roceP2p1s0f1": "ACTIVE"}
    assert hcas["rocep1s0f1"]["ports"][1]["active_mtu"] == 4096
    assert hcas["rocep1s0f0"]["ports"][1]["active_mtu"] == 1024
    assert {hcas[h]["sys_image_guid"] for h in hcas} == {"4cbb:4703:002d:1a16"}  # one adapter
    assert hcas["rocep1s0f1"]["fw_ver"] == "28.45.4028"


def test_ibv_devinfo_gb10_peer_cabled_on_port_0() -> None:
    # index id 53066235706: the other node of the pair uses port 0
    hcas = parse.ibv_devinfo(read("gb10-ibv_devinfo-port0-cabled-mtu9000-nodeB.txt"))
    active = sorted(h for h in hcas if hcas[h]["ports"][1]["state"] == "ACTIVE")
    assert active == ["roceP2p1s0f0", "rocep1s0f0"]


def test_ibv_devinfo_gid_lines_both_formats() -> None:
    # NVIDIA/nccl#769: newer rdma-core, compressed zeros and a type suffix
    lines = [parse.gid_line(x) for x in read("nccl-issue769-ibv_devinfo-v-gid-table-a100.txt").splitlines()]
    gids = [g for g in lines if g is not None]
    assert [(i, t) for i, _, t in gids] == [(0, "RoCE v1"), (1, "RoCE v2"), (2, "RoCE v1"), (3, "RoCE v2")]
    # the v1 entry (eight groups) and the v2 entry (compressed) carry the same IPv4 address
    assert parse.gid_ipv4(gids[2][1]) == parse.gid_ipv4(gids[3][1]) == "200.0.209.6"
    assert parse.gid_ipv4(gids[1][1]) is None  # fe80 link-local
    # k8s-rdma-shared-dev-plugin#164: older rdma-core, no type, a '**' the poster added
    old = [parse.gid_line(x) for x in read("ibv_devinfo-v-port-roce-25g-k8s164.TRUNCATED.txt").splitlines()]
    assert [g for g in old if g] == [(14, "0000:0000:0000:0000:0000:ffff:c0a8:0606", None),
                                     (15, "0000:0000:0000:0000:0000:ffff:c0a8:0606", None)]
    assert parse.gid_ipv4("0000:0000:0000:0000:0000:ffff:c0a8:0606") == "192.168.6.6"


def test_ibv_devinfo_v_port_block_without_hca_header_is_ignored() -> None:
    # the k8s#164 excerpt starts at `port:` with no hca_id: nothing to attach it to
    assert parse.ibv_devinfo(read("ibv_devinfo-v-port-roce-25g-k8s164.TRUNCATED.txt")) == {}


def test_ib_write_bw_reports() -> None:
    # NVIDIA perf guide: --run_infinitely repeats rows; the last row's average counts
    one = parse.ib_write_bw(read("gb10-playbook-perfguide-ib_write_bw-rocep1s0f0.txt"))
    assert one["gbit"] == 92.57 and one["device"] == "rocep1s0f0" and one["gid_index"] == "3"
    assert one["mtu"] == "1024[B]" and one["qps"] == "1"
    two = parse.ib_write_bw(read("gb10-playbook-perfguide-ib_write_bw-roceP2p1s0f0.txt"))
    assert two["gbit"] == 97.28 and two["device"] == "roceP2p1s0f0"
    # eugr NETWORKING.md: 4 QPs over rdma_cm, no GID index line
    cm = parse.ib_write_bw(read("eugr-networking-ib_write_bw-q4-rdmacm.txt"))
    assert cm["gbit"] == 111.71 and cm["qps"] == "4" and "gid_index" not in cm
    assert parse.ib_write_bw("Couldn't connect to 10.0.0.2:18515")["gbit"] is None


def test_iperf3_json() -> None:
    # captured here: iperf3 3.12 over loopback, 2 streams, 1 s
    got = parse.iperf3(read("iperf3-J-loopback-P2-debian-3.12.json"))
    assert got["error"] is None and got["streams"] == 2 and got["gbit"] > 1 and got["seconds"] > 0.9
    assert isinstance(got["retransmits"], int)
    refused = parse.iperf3(read("iperf3-J-refused-debian-3.12.json"))
    assert refused["gbit"] is None and "Connection refused" in refused["error"]
    assert parse.iperf3("iperf3: error - unable to connect")["error"] == "iperf3: error - unable to connect"


def test_ip_json() -> None:
    addrs = parse.ip_addr(read("ip-j-addr-iproute2-6.1.json"))
    assert addrs["lo"]["addresses"][0].ip == "127.0.0.1" and addrs["lo"]["addresses"][0].scope == "host"
    eth = addrs["eth0"]
    assert eth["mtu"] == 1400 and eth["operstate"] == "up"
    assert [a.ip for a in eth["addresses"] if a.version == 4] == ["192.0.2.2"]
    via = parse.route_get(read("ip-j-route-get-via-gateway-iproute2-6.1.json"))
    assert via == {"dev": "eth0", "gateway": "192.0.2.1", "prefsrc": "192.0.2.2", "type": None}
    assert parse.route_get(read("ip-j-route-get-local-iproute2-6.1.json"))["type"] == "local"


def test_nccl_version_codes() -> None:
    # nccl-tests header on 2x GB10 (dgx-spark-playbooks PR#103): "nccl-library=23102"
    found = re.search(r"nccl-library=(\d+)", read("gb10-playbooks-pr103-all_reduce_perf-mtu9000.TRUNCATED.txt"))
    assert found is not None
    code = int(found.group(1))
    assert parse.nccl_version(code) == "2.31.2"
    assert parse.nccl_version(2708) == "2.7.8"  # before 2.9: major*1000 + minor*100 + patch (nccl.h)
    assert parse.version_tuple("2.21.5") > parse.version_tuple("2.19.3")

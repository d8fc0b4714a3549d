"""Per-node NCCL / Gloo fields (what `net apply` writes where interface names differ) reach each rank's env."""

from __future__ import annotations

from typing import Any

from forklift import recipe as recipes
from tests.helpers import launch_of


def envs(*sets: str) -> dict[str, dict[str, str]]:
    r = recipes.load("default", [
        "nodes=[{host: a, ssh: u@a, data_ip: 10.0.0.1, nccl_socket_ifname: '=enp1s0f1np1', "
        "nccl_ib_hca: '=rocep1s0f1,roceP2p1s0f1'}, {host: b, ssh: u@b, data_ip: 10.0.0.2}]",
        "parallel.pp=2", "network.nccl_socket_ifname='=enp1s0f0np0'", "network.gloo_socket_ifname=enp1s0f0np0", *sets])
    launch: Any = launch_of(r, "/m")
    return {rank.host: rank.env for rank in launch.ranks}


def test_node_value_over_network_value() -> None:
    got = envs()
    assert got["a"]["NCCL_SOCKET_IFNAME"] == "=enp1s0f1np1" and got["b"]["NCCL_SOCKET_IFNAME"] == "=enp1s0f0np0"
    assert got["a"]["NCCL_IB_HCA"] == "=rocep1s0f1,roceP2p1s0f1" and "NCCL_IB_HCA" not in got["b"]
    assert got["a"]["GLOO_SOCKET_IFNAME"] == got["b"]["GLOO_SOCKET_IFNAME"] == "enp1s0f0np0"
    assert "NCCL_IB_GID_INDEX" not in got["a"]  # never set unless a node asks for it


def test_gid_index_only_where_asked_and_node_env_wins() -> None:
    got = envs("nodes.1.nccl_ib_gid_index=4", "nodes.0.env={NCCL_SOCKET_IFNAME: '=eth9'}")
    assert got["b"]["NCCL_IB_GID_INDEX"] == "4" and "NCCL_IB_GID_INDEX" not in got["a"]
    assert got["a"]["NCCL_SOCKET_IFNAME"] == "=eth9"

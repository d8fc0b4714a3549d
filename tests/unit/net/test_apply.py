"""`net apply`: the diff of the data_ip / NCCL fields, comments and layout kept, per-node values only where nodes
differ, the result a valid recipe."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from forklift import net
from forklift.errors import RecipeError
from forklift.net import apply
from forklift.net.derive import NodeSettings
from forklift.recipe import load

RECIPE = """# two sparks
extends: default   # the bundled base
nodes:
  - {host: spark-a, ssh: me@spark-a, hardware: gb10}   # head
  - host: spark-b
    ssh: me@spark-b
    hardware: gb10
network: {master_port: 29501, nccl_socket_ifname: enp1s0f0np0}
"""


def settings(b_if: str = "enp1s0f1np1",
             b_hca: tuple[str, ...] = ("rocep1s0f1", "roceP2p1s0f1")) -> dict[str, NodeSettings]:
    return {"spark-a": NodeSettings("spark-a", "192.168.100.10", "enp1s0f1np1", ("rocep1s0f1", "roceP2p1s0f1"),
                                    {"rocep1s0f1": 5, "roceP2p1s0f1": 3}),
            "spark-b": NodeSettings("spark-b", "192.168.100.11", b_if, b_hca, {h: 4 for h in b_hca})}


def write(tmp_path: Path, text: str = RECIPE) -> Path:
    path = tmp_path / "sparks.yaml"
    path.write_text(text)
    return path


def test_uniform_values_go_to_network_and_comments_stay(tmp_path: Path) -> None:
    path = write(tmp_path)
    change = apply.plan(net.load(str(path)), settings())
    assert change.changed and path.read_text() == RECIPE  # plan never writes
    assert "-network: {master_port: 29501, nccl_socket_ifname: enp1s0f0np0}" in change.diff
    apply.write(change)
    text = path.read_text()
    assert "# two sparks" in text and "# the bundled base" in text and "# head" in text
    assert "  - {host: spark-a, ssh: me@spark-a, hardware: gb10, data_ip: 192.168.100.10}" in text
    recipe = load(str(path))
    assert [n.data_ip for n in recipe.nodes] == ["192.168.100.10", "192.168.100.11"]
    assert recipe.network.nccl_socket_ifname == "=enp1s0f1np1" and recipe.network.gloo_socket_ifname == "enp1s0f1np1"
    assert recipe.network.nccl_ib_hca == "=rocep1s0f1,roceP2p1s0f1"
    assert all(n.nccl_socket_ifname is None and n.nccl_ib_gid_index is None for n in recipe.nodes)
    assert not apply.plan(net.load(str(path)), settings()).changed  # idempotent


def test_values_that_differ_go_to_each_node(tmp_path: Path) -> None:
    path = write(tmp_path)
    apply.write(apply.plan(net.load(str(path)), settings("enp1s0f0np0", ("rocep1s0f0", "roceP2p1s0f0")),
                           gid_index=True))
    recipe = load(str(path))
    assert recipe.network.nccl_socket_ifname is None and recipe.network.nccl_ib_hca is None
    assert [n.nccl_socket_ifname for n in recipe.nodes] == ["=enp1s0f1np1", "=enp1s0f0np0"]
    assert [n.nccl_ib_hca for n in recipe.nodes] == ["=rocep1s0f1,roceP2p1s0f1", "=rocep1s0f0,roceP2p1s0f0"]
    assert [n.nccl_ib_gid_index for n in recipe.nodes] == [None, 4]  # spark-a's HCAs need 5 and 3: none forced
    assert yaml.safe_load(path.read_text())["nodes"][1]["nccl_socket_ifname"] == "=enp1s0f0np0"


def test_nodes_inherited_through_extends_are_written_into_the_file(tmp_path: Path) -> None:
    write(tmp_path)
    child = tmp_path / "child.yaml"
    child.write_text("extends: sparks.yaml\nserve: {port: 8001}\n")
    apply.write(apply.plan(net.load(str(child)), settings()))
    recipe = load(str(child))
    assert [(n.host, n.ssh, n.data_ip) for n in recipe.nodes] == [("spark-a", "me@spark-a", "192.168.100.10"),
                                                                  ("spark-b", "me@spark-b", "192.168.100.11")]
    assert recipe.serve.port == 8001


def test_cluster_file_is_written_and_bundled_recipes_are_refused(tmp_path: Path) -> None:
    cluster = tmp_path / "lab.yaml"
    cluster.write_text("nodes:\n  - {host: spark-a, ssh: me@spark-a}\n  - {host: spark-b, ssh: me@spark-b}\n")
    target = net.load(str(cluster))
    assert target.kind == "cluster" and target.writes == cluster
    apply.write(apply.plan(target, settings()))
    data = yaml.safe_load(cluster.read_text())
    assert data["network"]["nccl_socket_ifname"] == "=enp1s0f1np1" and data["nodes"][1]["data_ip"] == "192.168.100.11"
    with pytest.raises(RecipeError, match="bundled recipe"):
        apply.plan(net.load("default"), settings())


def test_recipe_with_a_cluster_file_writes_the_cluster_file(tmp_path: Path) -> None:
    cluster = tmp_path / "lab.yaml"
    cluster.write_text("nodes:\n  - {host: spark-a, ssh: me@spark-a}\n  - {host: spark-b, ssh: me@spark-b}\n")
    text = f"extends: default\ncluster: {cluster}\n"
    recipe = write(tmp_path, text)
    target = net.load(str(recipe))
    assert target.writes == cluster
    apply.write(apply.plan(target, settings()))
    assert recipe.read_text() == text
    assert yaml.safe_load(cluster.read_text())["nodes"][0]["data_ip"] == "192.168.100.10"

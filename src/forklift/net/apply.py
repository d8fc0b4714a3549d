"""Write the derived settings into the recipe (or the cluster file its nodes come from), keeping comments and
layout (ruamel.yaml round trip). ``plan`` computes the new text and its diff; ``write`` replaces the file.

Per node: ``data_ip``. Interface names and HCAs go to ``network:`` when every node has the same value, else to each
node (``nodes[i].nccl_socket_ifname`` ...), and the section-level key is removed. ``nccl_ib_gid_index`` only when
asked. The new text is validated before it is offered.
"""

from __future__ import annotations

import difflib
import io
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import SingleQuotedScalarString

from forklift.errors import RecipeError
from forklift.net.derive import NodeSettings
from forklift.net.target import Target
from forklift.recipe import cluster_file
from forklift.recipe.deployment import resolve
from forklift.recipe.load import read_text
from forklift.yamlio import round_trip

NODE_KEYS = ("nccl_socket_ifname", "gloo_socket_ifname", "nccl_ib_hca")


@dataclass(frozen=True)
class Change:
    path: Path
    before: str
    after: str

    @property
    def changed(self) -> bool:
        return self.before != self.after

    @property
    def diff(self) -> str:
        return "".join(difflib.unified_diff(self.before.splitlines(keepends=True), self.after.splitlines(keepends=True),
                                            fromfile=str(self.path), tofile=f"{self.path} (net apply)"))


def _scalar(value: str) -> Any:
    return SingleQuotedScalarString(value) if value[:1] in ("=", "^") else value


def _wanted(derived: Mapping[str, NodeSettings], hosts: list[str], gid_index: bool) -> dict[str, list[Any]]:
    """Per key, the value for each node in order (None: leave unset)."""
    per: dict[str, list[Any]] = {k: [] for k in (*NODE_KEYS, "nccl_ib_gid_index", "data_ip")}
    for host in hosts:
        s = derived.get(host, NodeSettings(host))
        env = s.env(gid_index=gid_index)
        per["data_ip"].append(s.data_ip)
        per["nccl_socket_ifname"].append(env.get("NCCL_SOCKET_IFNAME"))
        per["gloo_socket_ifname"].append(env.get("GLOO_SOCKET_IFNAME"))
        per["nccl_ib_hca"].append(env.get("NCCL_IB_HCA"))
        per["nccl_ib_gid_index"].append(int(env["NCCL_IB_GID_INDEX"]) if "NCCL_IB_GID_INDEX" in env else None)
    return per


def _set(mapping: CommentedMap, key: str, value: Any) -> None:
    if value is None:
        mapping.pop(key, None)
    elif mapping.get(key) != value:
        mapping[key] = _scalar(value) if isinstance(value, str) else value


def _edit(doc: CommentedMap, target: Target, per: Mapping[str, list[Any]]) -> None:
    nodes = doc.get("nodes")
    if not isinstance(nodes, CommentedSeq):
        nodes = CommentedSeq([CommentedMap(n.model_dump(exclude_defaults=True)) for n in target.recipe.nodes])
        doc["nodes"] = nodes
    network = doc.get("network")
    if not isinstance(network, CommentedMap):
        network = CommentedMap()
    for i, entry in enumerate(nodes):
        if i < len(per["data_ip"]) and isinstance(entry, CommentedMap) and per["data_ip"][i]:
            _set(entry, "data_ip", per["data_ip"][i])
    for key in NODE_KEYS:
        values = per[key]
        if all(v is None for v in values):
            continue
        uniform = len(set(values)) == 1
        for i, entry in enumerate(nodes):
            if isinstance(entry, CommentedMap) and i < len(values):
                _set(entry, key, None if uniform else values[i])
        if uniform:
            _set(network, key, values[0])
        elif key in network:
            network.pop(key)
        elif getattr(target.recipe.network, key) is not None:
            network[key] = None  # inherited (extends): a per-node value would lose to it
    for i, entry in enumerate(nodes):
        if isinstance(entry, CommentedMap) and per["nccl_ib_gid_index"][i] is not None:
            _set(entry, "nccl_ib_gid_index", per["nccl_ib_gid_index"][i])
    if network and "network" not in doc:
        doc["network"] = network


def _validate(target: Target, path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.stem}.net-apply.{os.getpid()}{path.suffix}")
    tmp.write_text(text)
    try:
        if target.kind == "cluster" or target.writes != Path(target.origin):
            cluster_file.load_cluster(str(tmp))
        else:
            resolve(str(tmp), facts=False)
    finally:
        tmp.unlink(missing_ok=True)


def plan(target: Target, derived: Mapping[str, NodeSettings], *, gid_index: bool = False) -> Change:
    """The file's text with the derived settings in place (not written)."""
    if target.writes is None:
        raise RecipeError(f"{target.origin} is a bundled recipe: forklift does not edit it",
                          fix=f"Write a recipe file with `extends: {target.origin.removeprefix('bundled:')}` and your "
                              "nodes, and pass its path.")
    path = target.writes
    before = read_text(path)
    y = round_trip(before)
    doc = y.load(before) or CommentedMap()
    if not isinstance(doc, CommentedMap):
        raise RecipeError(f"{path}: not a YAML mapping", source=str(path),
                          fix="A recipe or cluster file is a mapping of keys (`forklift recipe show default`).")
    _edit(doc, target, _wanted(derived, [n.host for n in target.recipe.nodes], gid_index))
    out = io.StringIO()
    y.dump(doc, out)
    after = out.getvalue()
    if after != before:
        _validate(target, path, after)
    return Change(path, before, after)


def write(change: Change) -> None:
    """Replace the file atomically (same directory, then rename)."""
    tmp = change.path.with_name(f".{change.path.name}.{os.getpid()}.tmp")
    tmp.write_text(change.after)
    tmp.replace(change.path)

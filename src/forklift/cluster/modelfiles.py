"""Which model files each node needs, and what a node actually has (sizes, config/index hashes).

With pipeline parallelism a node needs only the safetensors shards that hold its layers, plus every
shard with a tensor outside the layers (embeddings, final norm, lm_head) and every non-weight file.
vLLM globs the shards present and skips the ones listed in the index that are not, so a node with
only its shards loads correctly.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forklift.cluster.runner import Runner
from forklift.errors import ModelError
from forklift.launch.layers import node_layer_ranges
from forklift.recipe.schema import Recipe

INDEX = "model.safetensors.index.json"
HASHED = ("config.json", INDEX)
"""Files whose content must be identical on every node (checked by sha256)."""
_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")


@dataclass
class Listing:
    """Top-level files of a model directory on one host."""

    path: str
    sizes: dict[str, int] = field(default_factory=dict)
    hashes: dict[str, str] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes.values())


def local_listing(model_dir: Path) -> Listing:
    out = Listing(str(model_dir))
    for p in sorted(model_dir.iterdir()):
        if p.is_file():
            out.sizes[p.name] = p.stat().st_size
            if p.name in HASHED:
                out.hashes[p.name] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def remote_listing(runner: Runner, path: str, *, timeout: float = 60) -> Listing | None:
    """The listing on a host, or None when the directory does not exist there."""
    res = runner.run(["find", path, "-maxdepth", "1", "-type", "f", "-printf", "%s %P\\n"], timeout=timeout)
    if res.returncode != 0:
        return None
    out = Listing(path)
    for line in res.stdout.splitlines():
        size, _, name = line.partition(" ")
        if size.isdigit() and name:
            out.sizes[name] = int(size)
    present = [f"{path}/{n}" for n in HASHED if n in out.sizes]
    if present:
        sums = runner.run(["sha256sum", *present], timeout=timeout)
        for line in sums.stdout.splitlines():
            digest, _, fname = line.partition("  ")
            out.hashes[fname.rsplit("/", 1)[-1]] = digest
    return out


def num_layers(config: dict[str, Any]) -> int:
    for cfg in (config, config.get("text_config") or {}):
        for key in ("num_hidden_layers", "n_layer", "num_layers"):
            if isinstance(cfg.get(key), int):
                return int(cfg[key])
    raise ModelError("config.json has no num_hidden_layers", fix="Use a standard Hugging Face config.json.")


def needed_files(model_dir: Path, recipe: Recipe, listing: Listing | None = None) -> dict[int, list[str]]:
    """For each node index, the file names it needs (all of them without PP or without an index)."""
    listing = listing or local_listing(model_dir)
    everything = sorted(listing.sizes)
    nnodes = len(recipe.nodes)
    index_path = model_dir / INDEX
    par = recipe.parallel
    if par.pp == 1 or nnodes == 1 or not index_path.is_file():
        return {i: everything for i in range(nnodes)}
    weight_map: dict[str, str] = json.loads(index_path.read_text()).get("weight_map", {})
    config = json.loads((model_dir / "config.json").read_text())
    ranges = node_layer_ranges(num_layers(config), nnodes=nnodes, tp=par.tp, pp=par.pp,
                               partition=par.pp_layer_partition)
    shards = set(weight_map.values())
    shared_files = [f for f in everything if f not in shards]
    shared_shards = {f for t, f in weight_map.items() if not _LAYER_RE.search(t)}
    out: dict[int, list[str]] = {}
    for i, node_ranges in enumerate(ranges):
        mine = set(shared_shards)
        for tensor, shard in weight_map.items():
            m = _LAYER_RE.search(tensor)
            if m and any(lo <= int(m.group(1)) < hi for lo, hi in node_ranges):
                mine.add(shard)
        out[i] = sorted({*shared_files, *(s for s in mine if s in listing.sizes)})
    return out

"""Which model files each node needs, and what a node actually has (sizes, config/index hashes).

The selection itself (shards holding a node's layers plus shared files) is pure and lives in
``forklift.model.files``, where the planner uses it too; this module adds the recipe's node layout
and the listing of a remote host through a Runner.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from forklift.model.files import HASHED, INDEX, Listing, files_per_node, local_listing, num_layers, weight_map
from forklift.plan.layout import node_layer_ranges
from forklift.recipe.schema import Recipe
from forklift.runner import Runner

__all__ = ["HASHED", "INDEX", "Listing", "local_listing", "needed_files", "num_layers", "remote_listing"]


def remote_listing(runner: Runner, path: str, *, timeout: float = 60) -> Listing | None:
    """The listing on a host, or None when the directory does not exist there."""
    res = runner.run(["find", "-L", path, "-maxdepth", "1", "-type", "f", "-printf", "%s %P\\n"], timeout=timeout)
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


def hub_snapshot(runner: Runner, repo_id: str, revision: str | None, hf_home: str) -> str | None:
    """The snapshot folder of a hub id in a host's Hugging Face cache (``HF_HOME/hub``), or None when that
    revision is not there. Read through the Runner, so it works for any node (and for a container's mount)."""
    cache = f"{hf_home.rstrip('/')}/hub/models--{repo_id.replace('/', '--')}"
    rev = revision or "main"
    commit = rev if re.fullmatch(r"[0-9a-f]{40}", rev) else None
    if commit is None:
        res = runner.run(["cat", f"{cache}/refs/{rev}"], timeout=30)
        commit = res.stdout.strip() if res.ok else None
    if not commit:
        return None
    folder = f"{cache}/snapshots/{commit}"
    return folder if runner.run(["test", "-e", f"{folder}/config.json"], timeout=30).ok else None


def needed_files(model_dir: Path, recipe: Recipe, listing: Listing | None = None) -> dict[int, list[str]]:
    """For each node index, the file names it needs (all of them without PP or without an index)."""
    listing = listing or local_listing(model_dir)
    nnodes = len(recipe.nodes)
    par = recipe.parallel
    wmap = weight_map(model_dir) if par.pp > 1 and nnodes > 1 else None
    if wmap is None:
        return {i: sorted(listing.sizes) for i in range(nnodes)}
    config = json.loads((model_dir / "config.json").read_text())
    ranges = node_layer_ranges(num_layers(config), nnodes=nnodes, tp=par.tp, pp=par.pp,
                               partition=par.pp_layer_partition)
    return files_per_node(listing.sizes, wmap, ranges)

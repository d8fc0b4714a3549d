"""Which model files each node needs, and what a node actually has (sizes, config/index hashes).

The selection itself (shards holding a node's layers plus shared files) is pure and lives in
``forklift.model.files``, where the planner uses it too; this module adds the recipe's node layout
and the listing of a remote host through a Runner.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from forklift.model.files import HASHED, INDEX, Listing, files_per_node, local_listing, num_layers, weight_map
from forklift.plan.layout import node_layer_ranges
from forklift.recipe.schema import Recipe
from forklift.runner import Runner

__all__ = ["HASHED", "INDEX", "Listing", "cache_repo_dir", "hub_cache", "hub_snapshot", "index_map",
           "local_listing", "needed_files", "num_layers", "pulled_commit", "read_json", "remote_listing", "selection",
           "snapshot_dir"]


def remote_listing(runner: Runner, path: str, *, timeout: float = 60, hashes: bool = True) -> Listing | None:
    """The listing on a host (sizes; sha256 of config.json and the index unless ``hashes`` is False), or None
    when the directory does not exist there."""
    res = runner.run(["find", "-L", path, "-maxdepth", "1", "-type", "f", "-printf", "%s %P\\n"], timeout=timeout)
    if res.returncode != 0:
        return None
    out = Listing(path)
    for line in res.stdout.splitlines():
        size, _, name = line.partition(" ")
        if size.isdigit() and name:
            out.sizes[name] = int(size)
    present = [f"{path}/{n}" for n in HASHED if n in out.sizes] if hashes else []
    if present:
        sums = runner.run(["sha256sum", *present], timeout=timeout)
        for line in sums.stdout.splitlines():
            digest, _, fname = line.partition("  ")
            out.hashes[fname.rsplit("/", 1)[-1]] = digest
    return out


def hub_cache(runner: Runner, env: Mapping[str, str], home: str) -> str:
    """The Hugging Face hub cache a process on that host uses: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
    ``XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub`` (huggingface_hub's constants.py order),
    each taken from ``env`` (the recipe's and the node's variables) before the host's own environment."""
    res = runner.run(["sh", "-c", 'printf "%s\\n%s\\n%s\\n" "$HF_HUB_CACHE" "$HF_HOME" "$XDG_CACHE_HOME"'],
                     timeout=30)
    host = (res.stdout.split("\n") + ["", "", ""])[:3] if res.ok else ["", "", ""]
    values = [env.get(name) or host[i] for i, name in enumerate(("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"))]

    def absolute(path: str) -> str:
        return f"{home.rstrip('/')}/{path[2:]}" if path.startswith("~/") else path

    if values[0]:
        return absolute(values[0]).rstrip("/")
    if values[1]:
        return absolute(values[1]).rstrip("/") + "/hub"
    if values[2]:
        return absolute(values[2]).rstrip("/") + "/huggingface/hub"
    return f"{home.rstrip('/')}/.cache/huggingface/hub"


def cache_repo_dir(cache: str, repo_id: str) -> str:
    """``models--org--name`` in a hub cache."""
    return f"{cache.rstrip('/')}/models--{repo_id.replace('/', '--')}"


def hub_snapshot(runner: Runner, repo_id: str, revision: str | None, hf_home: str) -> str | None:
    """``snapshot_dir`` in ``HF_HOME/hub``."""
    return snapshot_dir(runner, repo_id, revision, f"{hf_home.rstrip('/')}/hub")


def snapshot_dir(runner: Runner, repo_id: str, revision: str | None, cache: str) -> str | None:
    """The snapshot folder of a hub id in a host's hub cache, or None when that revision is not there. Read
    through the Runner, so it works for any node (and for a container's mount)."""
    repo = cache_repo_dir(cache, repo_id)
    rev = revision or "main"
    commit = rev if re.fullmatch(r"[0-9a-f]{40}", rev) else None
    if commit is None:
        res = runner.run(["cat", f"{repo}/refs/{rev}"], timeout=30)
        commit = res.stdout.strip() if res.ok else None
    if not commit:
        return None
    folder = f"{repo}/snapshots/{commit}"
    return folder if runner.run(["test", "-e", f"{folder}/config.json"], timeout=30).ok else None


def needed_files(model_dir: Path, recipe: Recipe, listing: Listing | None = None) -> dict[int, list[str]]:
    """For each node index, the file names it needs (all of them without PP or without an index)."""
    listing = listing or local_listing(model_dir)
    par = recipe.parallel
    wmap = weight_map(model_dir) if par.pp > 1 and len(recipe.nodes) > 1 else None
    config = json.loads((model_dir / "config.json").read_text()) if wmap is not None else {}
    return selection(recipe, listing.sizes, config, wmap)


def selection(recipe: Recipe, names: Iterable[str], config: Mapping[str, Any],
              wmap: Mapping[str, str] | None) -> dict[int, list[str]]:
    """For each node index, the names out of ``names`` it needs, from config.json's layer count and the index's
    weight map (read from wherever the model is: this machine, a node, or the Hub)."""
    nnodes = len(recipe.nodes)
    par = recipe.parallel
    if wmap is None or par.pp <= 1 or nnodes <= 1:
        return {i: sorted(set(names)) for i in range(nnodes)}
    ranges = node_layer_ranges(num_layers(config), nnodes=nnodes, tp=par.tp, pp=par.pp,
                               partition=par.pp_layer_partition)
    return files_per_node(names, wmap, ranges)


def index_map(index: Mapping[str, Any] | None) -> dict[str, str] | None:
    """The weight map of a parsed model.safetensors.index.json (None without one)."""
    wm = index.get("weight_map") if isinstance(index, Mapping) else None
    return {str(k): str(v) for k, v in wm.items()} if isinstance(wm, dict) else None


_SNAPSHOT_RE = re.compile(r"/snapshots/([0-9a-f]{40})/?$")


def pulled_commit(runner: Runner, path: str) -> str | None:
    """The Hub commit of the weights at path on the host: a snapshot folder's name, or the one in the
    ``.forklift/source.json`` that ``model pull`` leaves in a model directory; None when neither says."""
    m = _SNAPSHOT_RE.search(path)
    if m:
        return m.group(1)
    pin = read_json(runner, f"{path}/.forklift/source.json")
    if isinstance(pin, dict) and re.fullmatch(r"[0-9a-f]{40}", str(pin.get("commit", ""))):
        return str(pin["commit"])
    return None


def read_json(runner: Runner, path: str, *, timeout: float = 60) -> Any:
    """A JSON file on a host, parsed; None when it is missing or not JSON."""
    res = runner.run(["cat", path], timeout=timeout)
    if not res.ok:
        return None
    try:
        return json.loads(res.stdout)
    except ValueError:
        return None

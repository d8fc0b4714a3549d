"""Which files of a model directory each node needs: the pure selection shared by ``plan`` and ``model sync``.

With pipeline parallelism a node needs only the safetensors shards that hold its layers, plus every
shard with a tensor outside the layers (embeddings, final norm, lm_head) and every non-weight file.
vLLM globs the shards present and skips the ones listed in the index that are not, so a node with
only its shards loads correctly. Callers supply the [start, end) layer ranges each node runs
(vLLM's ``get_pp_indices`` split), so the selection itself reads nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forklift.errors import ModelError

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


def num_layers(config: Mapping[str, Any]) -> int:
    for cfg in (config, config.get("text_config") or {}):
        for key in ("num_hidden_layers", "n_layer", "num_layers"):
            if isinstance(cfg.get(key), int):
                return int(cfg[key])
    raise ModelError("config.json has no num_hidden_layers", fix="Use a standard Hugging Face config.json.")


def weight_map(model_dir: Path) -> dict[str, str] | None:
    """Tensor name -> shard file from model.safetensors.index.json; None when there is no index (or no map)."""
    path = model_dir / INDEX
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelError(f"{path}: unreadable: {exc}", fix="Re-download the model's index file.") from exc
    wm = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(wm, dict):
        return None  # nothing to split by: every node takes every file
    return {str(k): str(v) for k, v in wm.items()}


def files_per_node(files: Iterable[str], wmap: Mapping[str, str] | None,
                   node_ranges: Sequence[Sequence[tuple[int, int]]]) -> dict[int, list[str]]:
    """For each node index, the file names it needs out of ``files``.

    ``node_ranges[i]`` lists the [start, end) layer ranges of the PP stages node i runs. Every node gets
    every file when all nodes run the same layers (one node, or no PP across nodes) or when there is no
    index (``wmap`` None). Shards named in the index but absent from ``files`` are skipped, as vLLM skips them.
    """
    everything = sorted(set(files))
    if wmap is None or len({tuple(r) for r in node_ranges}) <= 1:
        return {i: everything for i in range(len(node_ranges))}
    present = set(everything)
    shards = set(wmap.values())
    shared_files = [f for f in everything if f not in shards]
    shared_shards = {f for t, f in wmap.items() if not _LAYER_RE.search(t)}
    out: dict[int, list[str]] = {}
    for i, ranges in enumerate(node_ranges):
        mine = set(shared_shards)
        for tensor, shard in wmap.items():
            m = _LAYER_RE.search(tensor)
            if m and any(lo <= int(m.group(1)) < hi for lo, hi in ranges):
                mine.add(shard)
        out[i] = sorted({*shared_files, *(s for s in mine if s in present)})
    return out

"""The bytes of model files each node needs, from the model directory on this machine.

The same selection as ``forklift model sync`` (``forklift.model.files.files_per_node``), fed with the
plan's own layer split, so the two never disagree. Nothing is guessed: without a local model
directory (or without weights in it) there is no figure, only a note saying why.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from forklift.errors import ModelError
from forklift.model.files import files_per_node, local_listing, weight_map
from forklift.plan.result import ModelFiles, NodeFiles

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def _layers_text(ranges: Sequence[tuple[int, int]]) -> str:
    return ",".join(f"{lo}-{hi - 1}" for lo, hi in ranges)


def model_files(model_dir: Path | None, hosts: Sequence[str], node_ranges: Sequence[Sequence[tuple[int, int]]],
                *, origin: str) -> tuple[ModelFiles | None, list[str]]:
    """Per-node bytes (None when the files are not here) and the notes that go with them.

    ``node_ranges[i]`` holds the [start, end) layer ranges of the PP stages node ``hosts[i]`` runs.
    """
    if model_dir is None or not model_dir.is_dir():
        return None, [f"model files: no local model directory (config from {origin}), so the bytes each node "
                      "needs are not stated; plan where model.source is a local directory (and model.config "
                      "unset) to see them"]
    try:
        listing = local_listing(model_dir)
        wmap = weight_map(model_dir)
    except (OSError, ModelError) as exc:  # the figure is an extra: the rest of the plan stands without it
        return None, [f"model files: cannot read {model_dir} ({exc}); the bytes each node needs are not stated"]
    if not any(name.endswith(WEIGHT_SUFFIXES) for name in listing.sizes):
        return None, [f"model files: {model_dir} holds no weight files; the bytes each node needs are not stated"]
    per_node = files_per_node(listing.sizes, wmap, node_ranges)
    nodes = []
    for i, host in enumerate(hosts):
        names = per_node[i]
        nodes.append(NodeFiles(node=i, host=host, layers=_layers_text(node_ranges[i]),
                               bytes=sum(listing.sizes[n] for n in names), files=len(names),
                               shards=sum(n.endswith(".safetensors") for n in names)))
    notes: list[str] = []
    if wmap is not None:
        absent = sorted(set(wmap.values()) - set(listing.sizes))
        if absent:
            notes.append(f"model files: {len(absent)} shard(s) named in the index are not in {model_dir} "
                         f"(e.g. {absent[0]}); node bytes count only the files present")
    result = ModelFiles(dir=str(model_dir), total_bytes=listing.total_bytes,
                        shards_total=sum(n.endswith(".safetensors") for n in listing.sizes), nodes=nodes)
    return result, notes

"""Which layers each pipeline stage and each node holds: vLLM's ``get_pp_indices`` rule.

vLLM (``vllm/distributed/utils.py``) splits ``n`` layers into ``pp`` stages of ``n // pp`` and gives
the remainder to the stages just before the last one (last-but-one first), unless
``VLLM_PP_LAYER_PARTITION`` lists the sizes. Global ranks are ordered with TP fastest, then PP.
"""

from __future__ import annotations

from collections.abc import Sequence

from forklift.errors import PlanError


def pp_partition(num_layers: int, pp: int, partition: Sequence[int] | None = None) -> list[int]:
    """Layers per stage."""
    if partition:
        if len(partition) != pp or sum(partition) != num_layers:
            raise PlanError(
                f"pp_layer_partition {list(partition)} must have {pp} entries summing to {num_layers}",
                fix="Fix parallel.pp_layer_partition, or remove it to use vLLM's even split.",
            )
        return list(partition)
    if pp > num_layers:
        raise PlanError(f"pp={pp} is more than the model's {num_layers} layers", fix="Lower parallel.pp.")
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    return sizes


def pp_indices(num_layers: int, pp_rank: int, pp: int, partition: Sequence[int] | None = None) -> tuple[int, int]:
    """[start, end) layer indices of stage pp_rank, exactly as vLLM computes them."""
    sizes = pp_partition(num_layers, pp, partition)
    start = sum(sizes[:pp_rank])
    return start, start + sizes[pp_rank]


def node_layer_ranges(num_layers: int, *, nnodes: int, tp: int, pp: int,
                      partition: Sequence[int] | None = None) -> list[list[tuple[int, int]]]:
    """For each node, the [start, end) layer ranges of the PP stages its GPUs run."""
    world = tp * pp
    per_node = max(1, world // nnodes)
    out: list[list[tuple[int, int]]] = []
    for node in range(nnodes):
        stages = sorted({(r // tp) % pp for r in range(node * per_node, min(world, (node + 1) * per_node))})
        out.append([pp_indices(num_layers, s, pp, partition) for s in stages])
    return out

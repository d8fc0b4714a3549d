"""One home for vLLM's layout rules: the PP split, stage ranges, rank -> node placement, and the parallel
checks vLLM makes at startup. ``plan`` uses them to size ranks, ``model sync`` / ``plan`` to pick each node's
shards; nothing else splits layers or places ranks.

vLLM (``vllm/distributed/utils.py:get_pp_indices``) splits ``n`` layers into ``pp`` stages of ``n // pp`` and
gives the remainder to the stages before the last one (last-but-one first), unless ``VLLM_PP_LAYER_PARTITION``
lists the sizes. Global ranks are ordered TP fastest, then PP; with native multi-node each node runs
``world / nnodes`` consecutive ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from forklift.errors import PlanError
from forklift.model.spec import ModelSpec


def pp_partition(num_layers: int, pp: int, partition: Sequence[int] | None = None) -> list[int]:
    """Layers per stage: ``partition`` when given (checked), else vLLM's even split."""
    if partition:
        if len(partition) != pp or sum(partition) != num_layers or min(partition) < 1:
            raise PlanError(
                f"parallel.pp_layer_partition {list(partition)} must have {pp} positive entries summing to "
                f"{num_layers}, the model's decoder layers (vLLM raises the same; MTP layers do not count)",
                fix=f"Make the {pp} entries sum to {num_layers}, or remove it for vLLM's even split.",
            )
        return list(partition)
    if pp > num_layers:
        raise PlanError(f"pp={pp} is larger than the model's {num_layers} layers",
                        fix=f"Use pp <= {num_layers} (one stage per node is usual).")
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):  # the remainder goes to all but the last stage, from the back
        sizes[-i] += 1
    return sizes


def stage_ranges(partition: Sequence[int]) -> list[tuple[int, int]]:
    """[start, end) layer indices of each stage."""
    out, start = [], 0
    for n in partition:
        out.append((start, start + n))
        start += n
    return out


def pp_indices(num_layers: int, pp_rank: int, pp: int, partition: Sequence[int] | None = None) -> tuple[int, int]:
    """[start, end) layer indices of stage ``pp_rank``, exactly as vLLM computes them."""
    return stage_ranges(pp_partition(num_layers, pp, partition))[pp_rank]


@dataclass(frozen=True)
class Placement:
    """Where each global rank runs: TP fastest, then PP; ``per_node`` consecutive ranks per node."""

    tp: int
    pp: int
    nnodes: int
    dp: int = 1  # data-parallel replicas, outermost (each a full tp x pp engine)

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def per_node(self) -> int:
        return max(1, self.world // self.nnodes)

    def node_of(self, rank: int) -> int:
        return min(rank // self.per_node, self.nnodes - 1)

    def stage_of(self, rank: int) -> int:
        return (rank // self.tp) % self.pp

    def dp_of(self, rank: int) -> int:
        return rank // (self.tp * self.pp)

    def ranks_of(self, node: int) -> list[int]:
        return [r for r in range(self.world) if self.node_of(r) == node]

    def stages_of(self, node: int) -> list[int]:
        return sorted({self.stage_of(r) for r in self.ranks_of(node)})


def placement(tp: int, pp: int, nnodes: int, gpus: Sequence[int | None] = (), dp: int = 1) -> Placement:
    """The rank placement, or a PlanError when tp x pp x dp does not spread evenly over the nodes or a node has
    fewer GPUs (``gpus[i]``; None for CPU nodes) than ranks."""
    place = Placement(tp, pp, nnodes, dp)
    if place.world % nnodes:
        raise PlanError(
            f"tp x pp x dp = {place.world} ranks cannot be spread evenly over {nnodes} nodes",
            fix="Make tp x pp x dp a multiple of the number of nodes (usually pp = nodes, tp = GPUs per node).",
        )
    for i, count in enumerate(gpus):
        if count is not None and place.per_node > count:
            raise PlanError(
                f"node {i} has {count} GPU(s) but the layout puts {place.per_node} ranks on it",
                fix=f"Add nodes or lower tp x pp to {count * nnodes}.",
            )
    return place


def node_layer_ranges(num_layers: int, *, nnodes: int, tp: int, pp: int,
                      partition: Sequence[int] | None = None) -> list[list[tuple[int, int]]]:
    """For each node, the [start, end) layer ranges of the PP stages its ranks run."""
    ranges = stage_ranges(pp_partition(num_layers, pp, partition))
    place = Placement(tp, pp, nnodes)
    return [[ranges[s] for s in place.stages_of(node)] for node in range(nnodes)]


def check_parallel(spec: ModelSpec, tp: int, pp: int, dcp: int) -> None:
    """vLLM's own startup checks on the parallel layout, as PlanErrors naming the key and the fix."""
    if spec.num_heads % tp:
        divisors = [d for d in range(1, spec.num_heads + 1) if spec.num_heads % d == 0 and d <= 16]
        raise PlanError(
            f"parallel.tp={tp} does not divide the model's {spec.num_heads} attention heads",
            fix=f"Use a tp that divides {spec.num_heads}: {', '.join(map(str, divisors))}.",
        )
    kv = spec.num_kv_heads
    if spec.attention == "gqa" and (tp % kv if tp > kv else kv % tp):
        raise PlanError(
            f"parallel.tp={tp} and the model's {kv} KV heads do not divide one another",
            fix=f"Use a tp that divides {kv}, or a multiple of {kv}.",
        )
    pp_partition(spec.num_layers, pp)
    check_block_quant(spec, tp)
    if dcp > 1:
        if tp % dcp:
            raise PlanError(f"parallel.dcp={dcp} must divide tp={tp}",
                            fix="Set parallel.dcp to a divisor of parallel.tp.")
        limit = tp if spec.attention == "mla" else max(1, tp // kv)
        if dcp > limit:
            raise PlanError(
                f"parallel.dcp={dcp} is larger than vLLM allows here ({limit}: tp / KV heads for GQA, tp for MLA)",
                fix=f"Use dcp <= {limit}.",
            )


def check_block_quant(spec: ModelSpec, tp: int) -> None:
    """Block-FP8 shapes vLLM needs (0.26: quantization/utils/fp8_utils.py validate_fp8_block_shape at load, and
    per_token_group_quant_fp8 at the first forward, which quantizes each linear input in groups of block_k): the
    dense MLP width per TP rank is both the gate/up output (block_n) and the down_proj input (block_k)."""
    block = spec.quant.weight_block
    all_moe = spec.moe is not None and not spec.moe.first_k_dense and not spec.moe.dense_layers
    if block is None or all_moe or spec.quant.excluded("model.layers.0.mlp.down_proj"):
        return
    block_n, block_k = block
    width = spec.intermediate_size // tp
    for size, name in ((block_k, "group_size (block_k)"), (block_n, "block_n")):
        if width % size:
            good = [t for t in range(1, 17) if spec.intermediate_size % t == 0
                    and (spec.intermediate_size // t) % block_k == 0 and (spec.intermediate_size // t) % block_n == 0]
            raise PlanError(
                f"block-FP8 weights (weight_block_size {list(block)}): the dense MLP width per TP rank "
                f"({spec.intermediate_size} / tp {tp} = {width}) is not a multiple of {name} {size}; vLLM stops at "
                f"load or at the first forward (\"the last dimension of `x` {width} must be divisible by "
                f"`group_size` {block_k}\")",
                fix=("Use parallel.tp in " + ", ".join(map(str, good)) + ", or " if good else "Use ")
                + "a checkpoint whose intermediate_size is a multiple of the block (per-tensor FP8 or BF16).")

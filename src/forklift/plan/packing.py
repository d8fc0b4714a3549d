"""vLLM's block-outermost packing of mixed-page KV cache specs into groups (v1/core/kv_cache_utils.py
``_get_packed_kv_cache_groups`` @0.32.0), as arithmetic over plain spec records, and the bytes one block of the
shared pool takes (``_get_kv_cache_bytes_per_block``, block-outermost branch).

get_kv_cache_groups takes this path when the layers' specs are neither one spec nor one uniform type, the resolved
KV layout is block-outermost (B the outermost dim: DeepSeek-V4's indexer backend admits only BLHNC / BLNHC,
v1/attention/backends/mla/indexer.py supported_kv_cache_layouts) and the pages differ. Only attention specs are
modelled here (no Mamba or circular-buffer buckets, no hidden-state layers): the caller refuses the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from forklift.plan.rounding import cdiv


@dataclass(frozen=True)
class PackSpec:
    """One layer cache spec as the packing reads it: full (FullAttentionSpec / MLAAttentionSpec) or sliding
    (SlidingWindowSpec and subclasses, with its window), its own block size and its page (padded) in bytes."""

    kind: Literal["full", "sliding"]
    block: int
    page: int
    window: int | None = None


def _uniform(specs: list[PackSpec]) -> bool:
    """UniformTypeKVCacheSpecs.is_uniform_type: one block size; every spec full attention (the first spec's
    registered base, FullAttentionSpec), or every spec sliding with the same window
    (SlidingWindowSpec.is_uniform_with_collection)."""
    if len({s.block for s in specs}) > 1:
        return False
    if specs[0].kind == "full":
        return all(s.kind == "full" for s in specs)
    return all(s.kind == "sliding" and s.window == specs[0].window for s in specs)


def approximate_gcd(values: list[int], lower_bound: int) -> int:
    """kv_cache_utils._approximate_gcd: the d in [lower_bound, max(values)] with the least upward padding of the
    values to multiples of d; ties prefer the larger d."""
    low, high = max(1, lower_bound), max(values)
    if low > high:
        return low
    best, best_pad = low, None
    for d in range(low, high + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad < best_pad or (pad == best_pad and d > best):
            best, best_pad = d, pad
    return best


def _by_page(bucket: list[int], specs: list[PackSpec]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i in bucket:
        out.setdefault(specs[i].page, []).append(i)
    return out


def packed_groups(specs: list[PackSpec]) -> list[list[int]] | None:
    """The KV cache groups (indices into ``specs``, in vLLM's order) of _get_packed_kv_cache_groups, or None when
    every spec has one page size (vLLM then returns None and groups otherwise)."""
    if len({s.page for s in specs}) <= 1:
        return None
    buckets: list[list[int]] = []
    for i, spec in enumerate(specs):  # greedy: the first bucket the spec keeps uniform
        for bucket in buckets:
            if _uniform([specs[j] for j in bucket] + [spec]):
                bucket.append(i)
                break
        else:
            buckets.append([i])
    pages = [_by_page(b, specs) for b in buckets]
    balanced = [len({len(v) for v in p.values()}) == 1 for p in pages]
    most = [max(len(v) for v in p.values()) for p in pages]  # get_max_layers_per_page_size
    min_repeats = max((most[k] for k in range(len(buckets)) if balanced[k] and len(pages[k]) > 1), default=0)
    repeats = approximate_gcd([most[k] for k in range(len(buckets)) if balanced[k]], min_repeats) \
        if min_repeats else None

    def groups_for(k: int) -> int:
        return cdiv(most[k], repeats) if balanced[k] and repeats is not None else 1

    def widest(k: int, n: int) -> int:
        return sum(cdiv(len(names), n) * page for page, names in pages[k].items())

    def state_bucket(k: int) -> bool:
        return repeats is None and specs[buckets[k][0]].kind == "sliding"

    anchor = max((widest(k, len(buckets[k]) if state_bucket(k) else groups_for(k)) for k in range(len(buckets))),
                 default=0)
    out: list[list[int]] = []
    for k, bucket in enumerate(buckets):
        n = groups_for(k)
        if anchor and state_bucket(k):
            per_block = max(anchor // specs[bucket[0]].page, 1)
            n = max(n, cdiv(len(bucket), per_block))
        if n == 1:
            out.append(list(bucket))
            continue
        pattern = list(zip(*pages[k].values(), strict=False))  # zip stops at the shortest list, as vLLM's does
        out.extend([i for repeat in pattern[g::n] for i in repeat] for g in range(n))
    return out


def bytes_per_block(specs: list[PackSpec], groups: list[list[int]]) -> int:
    """_get_kv_cache_bytes_per_block (block-outermost): the largest group's summed pages. The lcm of the specs'
    block stride alignments is taken as 1, which holds at block size 256 (the only one planned for DeepSeek-V4,
    plan/csakv.py block_size); another block size changes them (get_block_stride_alignment)."""
    return max(sum(specs[i].page for i in group) for group in groups)

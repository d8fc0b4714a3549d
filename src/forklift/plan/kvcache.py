"""vLLM's KV cache manager, as arithmetic: per-layer cache specs on one worker, the block size (backend preference,
then the hybrid alignment that raises the attention block until one attention page holds a Mamba state, padding
the Mamba page), the grouping of layers into KV cache groups, ``num_blocks``, the blocks one request needs, the
startup check, and the "GPU KV cache size" / "Maximum concurrency" figures exactly as vLLM derives them.

Sources (vLLM 0.26.0 unless noted; research notes kv-and-arch-spec.md sections 2-5, reference code kvcalc.py):
platforms/interface.py ``_align_hybrid_block_size``; v1/core/kv_cache_utils.py ``get_kv_cache_groups``,
``_get_kv_cache_groups_uniform_page_size``, ``get_num_blocks``, ``get_max_concurrency_for_kv_cache_config``,
``get_kv_cache_capacity``, ``_max_memory_usage_bytes_from_groups``; v1/kv_cache_interface.py
``FullAttentionSpec`` / ``SlidingWindowSpec`` / ``MLAAttentionSpec`` / ``MambaSpec`` ``max_memory_usage_bytes``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from math import lcm
from typing import Literal, Protocol

from forklift.errors import PlanError
from forklift.plan.packing import PackSpec, bytes_per_block, packed_groups
from forklift.plan.rounding import cdiv

Kind = Literal["full", "sliding", "mla", "mamba"]


@dataclass(frozen=True)
class LayerKv:
    """One layer's cache on one worker (a vLLM KVCacheSpec): bytes per token for attention kinds, the unpadded
    state bytes per sequence for Mamba-like layers."""

    kind: Kind
    per_token: int = 0
    state: int = 0
    window: int | None = None
    block: int = 0  # a spec that fixes its own block size (DeepSeek-V4's caches: plan/csakv.py); 0: the layout's
    page: int = 0  # with ``block``: its page in bytes, padded (AttentionSpec.page_size_bytes)

    @property
    def key(self) -> tuple[str, int, int, int | None]:
        return (self.kind, self.per_token, self.state, self.window)


@dataclass(frozen=True)
class KvConfig:
    """What the KV manager reads from vLLM's config for one deployment."""

    max_model_len: int
    mnbt: int
    block: int  # after the backend preference (phase 1) or the user's --block-size
    kernel_min_block: int = 16  # smallest kernel block of the first attention backend
    concurrent_batches: int = 2  # max_concurrent_batches (async scheduling, PP=1)
    dcp: int = 1
    num_spec: int = 0
    mamba_mode: Literal["none", "align", "all"] = "none"
    mamba_chunk: int = 256  # "all" mode: the model's mamba chunk size
    mla: bool = False
    mla_hybrid_block_128: bool = False  # 0.33
    ckpt_alignment: int = 1  # 0.33 align mode: prefill checkpoint alignment (GDN FlashInfer: 64)
    ckpt_blocks: int = 0  # 0.33 align mode: extra Mamba block per request
    tokens_formula: Literal["blocks", "concurrency"] = "concurrency"
    check_subtracts_null_block: bool = False


@dataclass(frozen=True)
class Bucket:
    """Layers sharing one spec; split into ``groups`` KV cache groups of ``group_size`` layers (padded)."""

    spec: LayerKv
    layers: int
    groups: int
    block: int = 0
    """This bucket's tokens per block after page unification (0: the layout's block size)."""


@dataclass(frozen=True)
class KvLayout:
    """One worker's KV cache as vLLM lays it out."""

    cfg: KvConfig
    block_size: int
    padded_state: int | None  # the Mamba page after padding (None: no Mamba layers or no padding)
    mamba_block: int
    uniform: bool  # one group (UniformTypeKVCacheSpecs): page = sum of the layers' pages
    buckets: tuple[Bucket, ...]
    group_size: int
    bytes_per_block: int
    bytes_per_token: int  # attention bytes per token summed over the worker's layers (display)
    state_bytes: int = 0  # per-sequence state bytes over the worker's Mamba-like layers (display)
    notes: tuple[str, ...] = field(default=())
    packed: bool = False  # block-outermost packed groups (packed_layout): a bucket is one group of cache specs

    @property
    def n_groups(self) -> int:
        return 1 if self.uniform else sum(b.groups for b in self.buckets)

    def _blocks_for(self, spec: LayerKv, length: int, block: int = 0) -> int:
        bs, c = block or self.block_size, self.cfg
        if spec.kind == "mamba":
            if c.mamba_mode == "all":
                return cdiv(length, self.mamba_block) + c.num_spec
            if c.mamba_mode == "align":
                return 2 + c.num_spec + c.ckpt_blocks
            return 1 + c.num_spec
        if spec.kind == "sliding" and spec.window:
            in_flight = c.concurrent_batches * c.mnbt
            return cdiv(min(spec.window - 1 + in_flight, length), bs) + 1
        return cdiv(cdiv(length, c.dcp), bs)

    def blocks_per_request(self, length: int | None = None) -> int:
        """Blocks one ``length``-token request holds, summed over the KV groups (vLLM's concurrency divisor)."""
        n = length or self.cfg.max_model_len
        if self.uniform:
            return max(self._blocks_for(b.spec, n) for b in self.buckets)
        return sum(b.groups * self._blocks_for(b.spec, n, b.block) for b in self.buckets)

    def needed_bytes(self, length: int | None = None) -> int:
        """Bytes one request needs (the startup check); 0.33 also keeps one null block."""
        extra = self.bytes_per_block if self.cfg.check_subtracts_null_block else 0
        return self.blocks_per_request(length) * self.bytes_per_block + extra

    def num_blocks(self, available: int) -> int:
        return max(0, available // self.bytes_per_block) if self.bytes_per_block else 0

    def concurrency(self, num_blocks: int) -> float:
        per = self.blocks_per_request()
        return num_blocks / per if per else 0.0

    def tokens(self, num_blocks: int) -> int:
        """vLLM's "GPU KV cache size: N tokens" (0.21+: int(concurrency x max_model_len))."""
        if self.cfg.tokens_formula == "blocks":  # the smallest group block (pre-0.21 get_kv_cache_config)
            block = min((b.block or self.block_size for b in self.buckets), default=self.block_size)
            return num_blocks // self.n_groups * block * self.cfg.dcp
        return int(self.concurrency(num_blocks) * self.cfg.max_model_len)


# --------------------------------------------------------------------------------------------- block size


def block_size(layers: list[LayerKv], kv_config: KvConfig) -> tuple[int, int | None, int]:
    """(block size, padded Mamba page, Mamba block size): platforms/interface.py _align_hybrid_block_size.

    The attention block is raised to ``k * ceil(state / (k * attention bytes per token))`` so one attention page
    holds a Mamba state; the Mamba page is padded to the attention page."""
    attn = [x for x in layers if x.kind != "mamba"]
    mamba = [x for x in layers if x.kind == "mamba"]
    bs = kv_config.block
    mamba_block = kv_config.max_model_len
    if not mamba or not attn:
        return bs, None, mamba_block
    a1 = max(x.per_token for x in attn)
    m = max(x.state for x in mamba)
    k = max(kv_config.kernel_min_block, bs)
    if kv_config.mla and kv_config.mla_hybrid_block_128:
        k = max(k, 128)
    if kv_config.mamba_mode == "align":
        k = lcm(k, kv_config.ckpt_alignment)
    if kv_config.mamba_mode == "all":
        chunk = lcm(kv_config.mamba_chunk, k)
        aligned = chunk * cdiv(cdiv(m, a1), chunk)
        mamba_block = aligned
    else:
        aligned = k * cdiv(m, k * a1)
    bs = max(bs, aligned)
    if kv_config.mamba_mode == "align":
        mamba_block = bs
    return bs, (bs * a1 if bs * a1 != m else None), mamba_block


# --------------------------------------------------------------------------------------------- grouping


def _uniform_type(layers: list[LayerKv]) -> bool:
    """UniformTypeKVCacheSpecs.is_uniform_type: every layer full/MLA attention, or every layer the same window."""
    kinds = {x.kind for x in layers}
    if "mamba" in kinds:
        return len({x.key for x in layers}) == 1
    if kinds <= {"full", "mla"}:
        return True
    return kinds == {"sliding"} and len({x.window for x in layers}) == 1


def _group_size(counts: list[int]) -> int:
    """_get_kv_cache_groups_uniform_page_size: the smallest bucket, or the largest when it is < 1.5x the smallest."""
    size = min(counts)
    return max(counts) if max(counts) < 1.5 * size else size


def layout(layers: list[LayerKv], kv_config: KvConfig) -> KvLayout:
    """The worker's KV layout: block size, groups and bytes per block, as vLLM builds them."""
    if not layers:
        raise PlanError("this worker holds no layer with a KV cache or state",
                        fix="Check parallel.pp against the model's layers.")
    if any(x.block for x in layers):
        return packed_layout(layers, kv_config)
    bs, padded, mamba_block = block_size(layers, kv_config)
    pages = [bs * x.per_token if x.kind != "mamba" else (padded or x.state) for x in layers]
    counts = Counter(x.key for x in layers)
    specs = {x.key: x for x in layers}
    per_token = sum(x.per_token for x in layers)
    state = sum(x.state for x in layers)
    if _uniform_type(layers):
        buckets = tuple(Bucket(specs[k], n, 1) for k, n in counts.items())
        return KvLayout(kv_config, bs, padded, mamba_block, True, buckets, len(layers), sum(pages), per_token, state)
    blocks, page, unify_notes = unify_pages(specs, bs, padded)
    size = _group_size(list(counts.values()))
    buckets = tuple(Bucket(specs[k], n, cdiv(n, size), blocks[k]) for k, n in counts.items())
    pad = sum(b.groups * size - b.layers for b in buckets)
    notes = (f"{pad} padding layer(s) in the KV groups (group size {size})",) if pad else ()
    return KvLayout(kv_config, bs, padded, mamba_block, False, buckets, size, page * size, per_token, state,
                    notes + unify_notes)


def packed_layout(layers: list[LayerKv], kv_config: KvConfig) -> KvLayout:
    """Specs with their own block sizes (DeepSeek-V4): vLLM's block-outermost packing (plan/packing.py
    packed_groups, v1/core/kv_cache_utils.py _get_packed_kv_cache_groups @0.32.0) with one block of the pool the
    widest group's pages (_get_kv_cache_bytes_per_block); a request holds, per group, the blocks of its specs
    (UniformTypeKVCacheSpecs.max_memory_usage_bytes: they share one kind, window and block). One page size on every
    spec: one uniform group. A spec without its own block (a separate draft's full-attention KV) takes the layout's."""
    if any(x.kind == "mamba" for x in layers):
        raise PlanError("a linear-attention state beside DeepSeek-V4's packed caches: vLLM's state-bucket split "
                        "(_get_packed_kv_cache_groups) is not modelled", fix="Plan without memory figures.")
    own = [x if x.block else LayerKv(x.kind, x.per_token, window=x.window, block=kv_config.block,
                                     page=kv_config.block * x.per_token) for x in layers]
    specs = [PackSpec("sliding" if x.kind == "sliding" else "full", x.block, x.page, x.window) for x in own]
    groups = packed_groups(specs)
    how = "KV packed block-outermost (_get_packed_kv_cache_groups)"
    if groups is None:  # one page size everywhere: no packing; one group when the specs are one uniform type
        if len({(s.kind, s.block, s.window) for s in specs}) > 1:
            raise PlanError("DeepSeek-V4 specs of one page size but different kinds or blocks: vLLM's "
                            "unify_kv_cache_spec_page_size path for them is not modelled",
                            fix="Plan without memory figures.")
        groups, how = [list(range(len(specs)))], "KV specs all equal (one group, _get_kv_cache_groups_uniform_spec)"
    buckets = tuple(Bucket(own[g[0]], len(g), 1, own[g[0]].block) for g in groups)
    per_block = bytes_per_block(specs, groups)
    note = (f"{how}: {len(groups)} group(s) of blocks {tuple(b.block for b in buckets)}, {per_block:,} bytes per "
            "block",)
    lay = KvLayout(kv_config, kv_config.block, None, kv_config.max_model_len, False, buckets,
                   max(len(g) for g in groups), per_block, 0, 0, note)
    # bytes per token: what one max_model_len request takes of the pool, per token (pool / this = vLLM's tokens)
    per_token = cdiv(lay.blocks_per_request() * per_block, kv_config.max_model_len)
    return replace(lay, bytes_per_token=per_token, packed=True)


def unify_pages(specs: dict[tuple[str, int, int, int | None], LayerKv], bs: int,
                padded: int | None) -> tuple[dict[tuple[str, int, int, int | None], int], int, tuple[str, ...]]:
    """(tokens per block per spec, the common page, notes): v1/core/kv_cache_utils.py unify_kv_cache_spec_page_size
    (0.32.0), which get_kv_cache_groups runs before _get_kv_cache_groups_uniform_page_size when the layers' pages
    differ and the resolved KV layout is not block-outermost (_get_packed_kv_cache_groups returns None: the CPU
    backend's LBHNC, cpu_attn.py supported_kv_cache_layouts; CUDA's default LBNHC, backends/utils.py
    _DEFAULT_LAYOUT_PREFERENCE). The largest page stays; a smaller page that divides it takes ratio x the block
    (replace(block_size=block_size * ratio)); a Mamba page, or a non-MLA attention page that does not divide it, is
    padded to it (page_size_padded) at its own block; an MLA page that does not divide it is NotImplementedError."""
    pages = {k: (padded or x.state) if x.kind == "mamba" else bs * x.per_token for k, x in specs.items()}
    top = max(pages.values())
    blocks: dict[tuple[str, int, int, int | None], int] = {}
    padded_kinds: list[str] = []
    for key, page in pages.items():
        spec = specs[key]
        if page == top or spec.kind == "mamba":
            blocks[key] = bs
        elif top % page == 0:
            blocks[key] = bs * (top // page)
        elif spec.kind != "mla":
            blocks[key] = bs
            padded_kinds.append(spec.kind)
        else:
            raise PlanError(f"KV pages of different sizes on one worker ({sorted(set(pages.values()))} bytes) with an "
                            "MLA page that does not divide the largest: vLLM's unify_kv_cache_spec_page_size raises "
                            "and its full-allocation fallback (_try_get_full_allocation_fallback_groups) is not "
                            "modelled", fix="Plan without memory figures, or use one kv_cache_dtype for every layer.")
    notes: tuple[str, ...] = ()
    if len(set(pages.values())) > 1:
        scaled = sorted({b for b in blocks.values() if b != bs})
        notes = (f"KV pages unified to {top:,} bytes (unify_kv_cache_spec_page_size): block {bs}"
                 + (f", scaled to {', '.join(map(str, scaled))} on the smaller pages" if scaled else "")
                 + (f", {', '.join(sorted(set(padded_kinds)))} pages padded" if padded_kinds else ""),)
    return blocks, top, notes


class NeedsBytes(Protocol):
    def needed_bytes(self, length: int | None = None) -> int: ...


def largest_fitting_len(layouts: Sequence[NeedsBytes], pools: Sequence[int], upper: int) -> int:
    """Largest max_model_len one request fits on every worker (vLLM's binary search)."""

    def fits(n: int) -> bool:
        return all(lay.needed_bytes(n) <= pool for lay, pool in zip(layouts, pools, strict=True))

    if not fits(1):
        return 0
    if fits(upper):
        return upper
    lo, hi = 1, upper
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo

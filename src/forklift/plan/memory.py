"""vLLM's arithmetic: PP split, per-rank weights, KV bytes per token, profile terms, blocks and tokens."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from forklift.model.checkpoint import StoredTensor, read_headers
from forklift.model.quant import QuantScheme, format_bytes
from forklift.model.spec import ModelSpec, Tensor
from forklift.plan import rules

GIB = 2**30
_VOCAB_PAD = 64
_INDEXER_BYTES = 132  # DSA indexer cache: 128 fp8 + 4 B fp32 scale per token
_FP8_DS_MLA_BYTES = 656  # 512 fp8 latent + 4 fp32 scales + 64 bf16 rope


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------------------------- weights


def _divisor(t: Tensor, tp: int, spec: ModelSpec) -> float:
    if t.split in ("col", "row", "expert"):
        return float(tp)
    if t.split == "kv":
        return float(min(tp, spec.num_kv_heads))
    if t.split == "vocab":
        return tp * spec.vocab_size / (cdiv(spec.vocab_size, _VOCAB_PAD * tp) * _VOCAB_PAD * tp)
    return 1.0


@dataclass(frozen=True)
class WeightTable:
    """Per-rank weight bytes per decoder layer, plus what the first and last stages hold besides layers."""

    layer_bytes: list[float]
    layer_active: list[float]  # read per decoded token (top-k of the routed experts)
    layer_params_active: list[float]
    first_extra: float  # embedding
    last_extra: float  # final norm, lm_head (+ MTP when loaded)
    last_active: float
    last_params_active: float
    expert_bytes: list[float]

    def stage(self, start: int, end: int, first: bool, last: bool) -> float:
        return sum(self.layer_bytes[start:end]) + (self.first_extra if first else 0.0) + \
            (self.last_extra if last else 0.0)

    def stage_active(self, start: int, end: int, last: bool) -> float:
        return sum(self.layer_active[start:end]) + (self.last_active if last else 0.0)

    def stage_params_active(self, start: int, end: int, last: bool) -> float:
        return sum(self.layer_params_active[start:end]) + (self.last_params_active if last else 0.0)


def weight_table(spec: ModelSpec, quant: QuantScheme, base: str, tp: int, pp: int, *,
                 include_mtp: bool) -> WeightTable:
    """Weight bytes per rank, by layer, from parameter counts and the storage format of each tensor."""
    fb = format_bytes()
    n = spec.num_layers
    lb, la, lp, ex = [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n
    first = last = last_a = last_p = 0.0
    top_frac = (spec.moe.top_k / spec.moe.n_routed) if spec.moe and spec.moe.n_routed else 1.0
    for t in spec.tensors(include_mtp=include_mtp):
        if t.where == "lm_head" and spec.tie_word_embeddings and pp == 1:
            continue  # one shared tensor
        fmt = quant.format_for(t.module, linear=t.linear, role=t.role, base=base)
        numel = t.numel / _divisor(t, tp, spec)
        nbytes = numel * fb[fmt]
        frac = top_frac if t.role == "experts" else 1.0
        if t.where == "embed":
            first += nbytes
        elif t.layer is None:
            last += nbytes
            if t.where == "lm_head" or t.module == "model.norm":
                last_a += nbytes
                last_p += numel
        else:
            i = t.layer
            lb[i] += nbytes
            la[i] += nbytes * frac
            lp[i] += numel * frac
            if t.role == "experts":
                ex[i] += nbytes
    return WeightTable(lb, la, lp, first, last, last_a, last_p, ex)


def _stored_split(name: str) -> str:
    replicated = ("norm", "e_score_correction_bias", "kv_a_proj", "q_a_proj", "indexer", "router", "sinks")
    if any(r in name for r in replicated) or name.endswith(".gate.weight"):
        return "replicated"
    if ".k_proj" in name or ".v_proj" in name:
        return "kv"
    return "tp"


def stored_stage_bytes(spec: ModelSpec, stored: Sequence[StoredTensor], ranges: list[tuple[int, int]], tp: int,
                       *, include_mtp: bool) -> list[float]:
    """Weight bytes per rank of each stage from safetensors headers (exact stored sizes)."""
    pp = len(ranges)
    out = [0.0] * pp
    names = {t.name for t in stored}
    tied_missing_head = "lm_head.weight" not in names
    for t in stored:
        name = t.name
        stage = pp - 1
        if "embed_tokens" in name:
            stage = 0
        elif ".layers." in name:
            try:
                idx = int(name.split(".layers.", 1)[1].split(".", 1)[0])
            except ValueError:
                idx = 0
            if idx >= spec.num_layers and not include_mtp:
                continue
            stage = next((s for s, (a, b) in enumerate(ranges) if a <= idx < b), pp - 1)
        split = _stored_split(name)
        div = 1.0 if split == "replicated" else float(min(tp, spec.num_kv_heads) if split == "kv" else tp)
        out[stage] += t.nbytes / div
        if "embed_tokens" in name and tied_missing_head and pp > 1:
            out[pp - 1] += t.nbytes / div  # the last stage holds its own copy for lm_head
    return out


def checkpoint_stage_bytes(spec: ModelSpec, model_dir: Path | None, ranges: list[tuple[int, int]], tp: int,
                           *, include_mtp: bool) -> list[float] | None:
    if model_dir is None:
        return None
    stored = read_headers(model_dir)
    if not stored:
        return None
    return stored_stage_bytes(spec, stored, ranges, tp, include_mtp=include_mtp)


# --------------------------------------------------------------------------------------------- KV


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype_bytes: int) -> int:
    return 1 if kv_cache_dtype.startswith("fp8") else model_dtype_bytes


def layer_kv_bytes(spec: ModelSpec, layer_index: int, *, tp: int, kv_cache_dtype: str, model_dtype_bytes: int) -> int:
    """KV bytes per token this worker stores for one layer (vLLM's page size / block size)."""
    b = kv_dtype_bytes(kv_cache_dtype, model_dtype_bytes)
    if spec.mla is not None:
        sparse = spec.indexer is not None
        per = _FP8_DS_MLA_BYTES if sparse and b == 1 else (spec.mla.kv_lora_rank + spec.mla.qk_rope_head_dim) * b
        if spec.indexer is not None and layer_index in spec.indexer.layers:
            per += _INDEXER_BYTES
        return per
    heads = max(1, spec.num_kv_heads // tp)
    return 2 * heads * spec.head_dim * b


@dataclass(frozen=True)
class KvLayout:
    """A worker's KV cache: page bytes per token per group and the grouping vLLM builds."""

    bytes_per_token: int  # all layers on the worker
    group_size: int  # layers sharing one block id (hybrid); 0 = uniform (single group)
    n_groups: int
    layer_bytes: int  # per-layer bytes per token (hybrid: uniform page)
    sliding_groups: int


def kv_layout(spec: ModelSpec, start: int, end: int, *, tp: int, kv_cache_dtype: str, dtype_bytes: int) -> KvLayout:
    per_layer = [layer_kv_bytes(spec, i, tp=tp, kv_cache_dtype=kv_cache_dtype, model_dtype_bytes=dtype_bytes)
                 for i in range(start, end)]
    total = sum(per_layer)
    kinds = [spec.layers[i].attention for i in range(start, end)]
    full, sliding = kinds.count("full"), kinds.count("sliding")
    if full and sliding:
        group = min(full, sliding)
        n_full, n_sliding = cdiv(full, group), cdiv(sliding, group)
        return KvLayout(total, group, n_full + n_sliding, max(per_layer), n_sliding)
    return KvLayout(total, 0, 1, 0, 0)


def num_blocks(pool_bytes: int, layout: KvLayout, block: int) -> int:
    if pool_bytes <= 0 or layout.bytes_per_token == 0:
        return 0
    if layout.group_size:
        return pool_bytes // (layout.layer_bytes * block * layout.group_size)
    return pool_bytes // (layout.bytes_per_token * block)


def blocks_per_request(layout: KvLayout, max_model_len: int, block: int, dcp: int, window: int | None,
                       mnbt: int) -> int:
    """Blocks one max_model_len request holds (summed over KV groups, as vLLM's concurrency figure)."""
    full_blocks = cdiv(cdiv(max_model_len, dcp), block)
    if not layout.group_size:
        return full_blocks
    n_full = layout.n_groups - layout.sliding_groups
    sliding_tokens = min((window or max_model_len) - 1 + mnbt, max_model_len)
    sliding_blocks = cdiv(sliding_tokens, block) + 1
    return n_full * full_blocks + layout.sliding_groups * sliding_blocks


def kv_needed_bytes(layout: KvLayout, max_model_len: int, block: int, dcp: int, window: int | None,
                    mnbt: int) -> int:
    """Bytes one max_model_len request needs on this worker (vLLM's startup check)."""
    if layout.group_size:
        return blocks_per_request(layout, max_model_len, block, dcp, window, mnbt) * layout.layer_bytes * block \
            * layout.group_size
    return cdiv(cdiv(max_model_len, dcp), block) * block * layout.bytes_per_token


def largest_fitting_len(layouts: Sequence[KvLayout], pools: Sequence[int], upper: int, block: int, dcp: int,
                        window: int | None, mnbt: int) -> int:
    """Largest max_model_len whose one request fits on every worker (binary search, like vLLM)."""

    def fits(n: int) -> bool:
        return all(kv_needed_bytes(lay, n, block, dcp, window, mnbt) <= pool for lay, pool in zip(layouts, pools,
                                                                                                    strict=True))

    if not fits(1):
        return 0
    lo, hi = 1, upper
    if fits(hi):
        return hi
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


# --------------------------------------------------------------------------------------------- profile terms


def activation_bytes(spec: ModelSpec, start: int, end: int, *, tp: int, mnbt: int, max_num_seqs: int,
                     last_stage: bool, dtype_bytes: int) -> float:
    """Predicted torch peak increase of vLLM's profile run on one worker (an estimate; calibrate for exact).

    The dummy forward runs ``max_num_batched_tokens`` tokens through the stage; the peak is the largest
    layer's transient buffers plus live hidden states; the last stage adds the dummy sampler's logits.
    """
    est = rules.estimate()
    h = spec.hidden_size
    b = dtype_bytes
    layers = spec.layers[start:end]
    if spec.mla is not None:
        m = spec.mla
        heads = spec.num_heads / tp
        attn = heads * ((m.qk_nope_head_dim + m.qk_rope_head_dim) + (m.qk_nope_head_dim + m.v_head_dim)
                        + m.v_head_dim) * b
    else:
        heads = spec.num_heads / tp
        kv = max(1.0, spec.num_kv_heads / tp)
        attn = ((heads + 2 * kv) * spec.head_dim + heads * spec.head_dim) * b
    mlp = 0.0
    if any(not layer.moe for layer in layers):
        mlp = max(mlp, 3 * spec.intermediate_size / tp * b)
    if spec.moe is not None and any(layer.moe for layer in layers):
        m2 = spec.moe
        inter = m2.intermediate / tp
        routed = m2.top_k * (2 * inter + inter + h) * b
        shared = 3 * m2.n_shared * inter * b
        mlp = max(mlp, routed + shared)
    per_token = float(est["residual_copies"]) * h * b + max(attn, mlp)
    total = float(est["fixed_workspace_gib"]) * GIB + mnbt * per_token
    if last_stage:
        total += max_num_seqs * spec.vocab_size * float(est["sampler_bytes"])
    return total


def capture_sizes(max_num_seqs: int, mnbt: int) -> list[int]:
    """vLLM's default CUDA-graph capture sizes."""
    cap = min(int(rules.estimate()["cudagraph_max_capture_size"]), max_num_seqs * 2, mnbt)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, cap + 1, 16)]
    return [s for s in sizes if s <= cap]


def cudagraph_bytes(max_num_seqs: int, mnbt: int) -> tuple[float, int]:
    """Predicted CUDA-graph estimate (bytes) and number of graphs (PIECEWISE + FULL decode)."""
    piecewise = capture_sizes(max_num_seqs, mnbt)
    full = [s for s in piecewise if s <= max_num_seqs]
    n = len(piecewise) + len(full)
    return n * float(rules.estimate()["cudagraph_mib_per_graph"]) * 2**20, n


def non_torch_bytes(tp: int, pp: int) -> float:
    table: dict[str, float] = rules.estimate()["non_torch_gib"]
    if tp > 1:
        return float(table["tp"]) * GIB
    if pp > 1:
        return float(table["pp"]) * GIB
    return float(table["single"]) * GIB


def gib(x: float) -> float:
    return x / GIB


def round_gib(x: float) -> float:
    return round(x / GIB, 3)


def isclose(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9)

"""Per-rank weight bytes: parameter counts x storage format (TP, PP, DP / expert-parallel shares, MXFP4 padding),
or the checkpoint's safetensors headers when the weights are on this machine."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from forklift.model.checkpoint import StoredTensor, read_headers
from forklift.model.quant import QuantScheme
from forklift.model.spec import ModelSpec, Tensor
from forklift.model.tensors import model_tensors
from forklift.plan.quant_layout import StoredLayout
from forklift.plan.rounding import cdiv, round_up

GIB = 2**30
_VOCAB_PAD = 64


# --------------------------------------------------------------------------------------------- weights


def _divisor(tensor: Tensor, tp: int, spec: ModelSpec) -> float:
    if tensor.split in ("col", "row"):
        return float(tp)
    if tensor.split == "kv":
        return float(tensor.kv_ways(tp, spec.num_kv_heads))
    if tensor.split == "vocab":
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


@dataclass(frozen=True)
class ExpertShare:
    """How one rank holds the routed experts: split ``tp`` ways along the intermediate dim (TP flattened over DP
    without EP), or ``local`` whole experts of ``total`` (EP: fused_moe/config.py FusedMoEParallelConfig.make,
    expert_map_manager.py determine_expert_map gives the first E % ep ranks one more)."""

    tp: int
    local: int | None = None
    total: int | None = None
    mxfp4_pad: tuple[int, int] | None = None  # (hidden, intermediate-per-partition) round-up of the MXFP4 backend
    mxfp4_stored: tuple[int, int, int] | None = None  # Hopper TRITON after swizzling: scale K and M multiples, bias B

    def fraction(self) -> float:
        if self.local is not None and self.total:
            return self.local / self.total
        return 1.0 / self.tp


def _mxfp4_experts(spec: ModelSpec, tensor: Tensor, share: ExpertShare, nbytes_per: float) -> float:
    """gpt-oss MXFP4 experts as the backend allocates them: padded hidden and per-partition intermediate."""
    assert spec.moe is not None and share.mxfp4_pad is not None
    pad_h, pad_i = share.mxfp4_pad
    tp = 1 if share.local is not None else share.tp
    experts = share.local if share.local is not None else spec.moe.n_routed
    hidden = round_up(spec.hidden_size, pad_h)
    inter = round_up(cdiv(spec.moe.intermediate, tp), pad_i)
    if share.mxfp4_stored is not None:  # values 4 bits; each swizzled scale (N rows x K groups of 32) padded
        k_mult, m_mult, bias_bytes = share.mxfp4_stored

        def scales(rows: int, k: int) -> int:
            return round_up(rows, m_mult) * round_up(round_up(k // 32, k_mult), 2)

        if tensor.linear:
            return experts * (3 * hidden * inter / 2 + scales(2 * inter, hidden) + scales(hidden, inter))
        return experts * (2 * inter + hidden) * bias_bytes
    if tensor.linear:
        return experts * 3 * hidden * inter * nbytes_per
    return experts * (2 * inter + hidden) * spec.dtype_bytes


def weight_table(spec: ModelSpec, quant: QuantScheme, base_bytes: float, tp: int, pp: int, *, include_mtp: bool,
                 experts: ExpertShare | None = None, capability: str | None = None) -> WeightTable:
    """Weight bytes per rank, by layer, from parameter counts and the storage format of each tensor: the checkpoint's
    format, or with ``capability`` (a CUDA GPU's) what the kernel vLLM picks there keeps (plan.quant_layout)."""
    share = experts or ExpertShare(tp=tp)
    n = spec.num_layers
    lb, la, lp, ex = [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n
    first = last = last_a = last_p = 0.0
    top_frac = (spec.moe.top_k / spec.moe.n_routed) if spec.moe and spec.moe.n_routed else 1.0
    tensors = model_tensors(spec, include_mtp)
    stored = StoredLayout(spec, quant, tensors, tp=tp, capability=capability, act_bytes=base_bytes) \
        if capability and quant.method != "none" else None
    for t in tensors:
        if t.where == "lm_head" and spec.tie_word_embeddings and pp == 1:
            continue  # one shared tensor
        per = t.dtype_bytes or quant.bytes_for(t.module, linear=t.linear, role=t.role, base_bytes=base_bytes)
        if t.role == "experts":
            numel = t.numel * share.fraction()
            nbytes = _mxfp4_experts(spec, t, share, per) if share.mxfp4_pad and quant.method == "mxfp4" \
                else numel * per
        else:
            numel = t.numel / _divisor(t, tp, spec)
            kernel = stored.tensor_bytes(t) if stored is not None and per != base_bytes else None  # quantized
            nbytes = numel * per if kernel is None else kernel
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


def gib(x: float) -> float:
    return x / GIB


def round_gib(x: float) -> float:
    return round(x / GIB, 3)


def isclose(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9)

"""What a speculative config costs and buys, per rank: draft weights and draft KV (on the last PP stage), the
tokens each step adds to the batch budget, and the decode roofline at a stated acceptance length.

Pure arithmetic over the target's shape and the plan's settings; the planner adds the results at its marked
call sites (``plan/core.py``, ``plan/stage_inputs.py``, ``plan/make.py``, ``plan/notes.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from forklift.recipe.speculative import DRAFTED_METHODS, SpeculativeConfig
from forklift.speculative.shape import ModelShape
from forklift.yamlio import shipped

_OWN_DRAFT = ("draft_model", "eagle", "eagle3", "dflash", "medusa")
"""Methods whose draft is a separate checkpoint (``model``); mtp and dspark default to the target's."""


@dataclass(frozen=True)
class DraftShape:
    """A separate draft checkpoint on this machine: stored bytes and what its KV needs."""

    path: str
    weight_bytes: int
    layers: int
    kv_heads: int
    head_dim: int


def read_draft(model: str | None) -> DraftShape | None:
    """The draft at ``model`` when it is a directory on this machine (config.json + *.safetensors), else None."""
    if not model:
        return None
    path = Path(model).expanduser()
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        return None
    try:
        cfg: dict[str, Any] = json.loads(cfg_file.read_text())
    except (OSError, ValueError):
        return None
    cfg = cfg.get("text_config", cfg) if isinstance(cfg.get("text_config"), dict) else cfg
    heads = int(cfg.get("num_attention_heads") or 1)
    hidden = int(cfg.get("hidden_size") or 0)
    return DraftShape(path=str(path), weight_bytes=sum(f.stat().st_size for f in path.glob("*.safetensors")),
                      layers=int(cfg.get("num_hidden_layers") or 1),
                      kv_heads=int(cfg.get("num_key_value_heads") or heads),
                      head_dim=int(cfg.get("head_dim") or (hidden // heads if hidden else 0)))


@dataclass(frozen=True)
class DraftCost:
    """Per rank of the last PP stage, beyond the target's own weights and KV."""

    method: str
    k: int
    weight_bytes: float
    """Draft weights not in the target's weight table (a separate draft; the embedding copy MTP keeps under PP)."""
    target_like_kv_layers: int
    """Draft layers whose KV is shaped like one of the target's attention layers (MTP)."""
    kv_bytes_per_token: float
    """KV of a separate draft per token, from its config."""
    lookahead_tokens: int
    """KV slots each running request reserves past its tokens (vLLM's num_lookahead_tokens)."""
    notes: list[str] = field(default_factory=list)


def _lookahead(method: str, k: int) -> int:
    """``config/vllm.py:num_lookahead_tokens@0.33``: K for eagle-family / mtp / draft_model, K+1 for dflash."""
    if method in ("dflash", "dspark"):
        return k + 1
    return k if method in ("eagle", "eagle3", "mtp", "draft_model", "medusa") else 0


def draft_cost(model: ModelShape, spec: SpeculativeConfig, *, tp: int, pp: int, dtype_bytes: int,
               draft: DraftShape | None = None) -> DraftCost:
    """Draft weights and KV on each rank of the last stage (vLLM builds the drafter there only:
    ``gpu_model_runner.py:GPUModelRunner.__init__``; its KV joins the same pool, ``kv_cache_interface.py``)."""
    k = spec.num_speculative_tokens
    method = spec.method
    notes: list[str] = []
    if method not in DRAFTED_METHODS:
        return DraftCost(method, k, 0.0, 0, 0.0, 0, ["no draft weights or draft KV (lookup method)"])
    draft_tp = getattr(spec, "draft_tensor_parallel_size", None) or tp
    weights, kv_layers, kv_tok = 0.0, 0, 0.0
    if method == "mtp" and not getattr(spec, "model", None):
        kv_layers = model.mtp_layers
        kv_like = ("KV like one target layer each" if model.family != "deepseek_v4" else  # plan/csakv.py mtp_specs
                   "shared_head.head is the target's lm_head, embed_tokens too at PP 1")
        notes.append(f"{model.mtp_layers} MTP layer(s) on the last stage: weights in the stage's table, {kv_like}")
        if pp > 1:
            weights += model.vocab_size * model.hidden_size * dtype_bytes / tp
            notes.append("under PP the MTP layer keeps its own embedding copy on the last stage "
                         "(spec_decode/eagle/utils.py:maybe_share_target_embed@0.33)")
    elif draft is not None:
        weights = draft.weight_bytes / draft_tp
        kv_tok = 2 * max(1, draft.kv_heads // draft_tp) * draft.head_dim * dtype_bytes * draft.layers
        notes.append(f"draft {draft.path}: {draft.weight_bytes / 2**30:.2f} GiB stored, {draft.layers} layer(s), "
                     f"split over draft TP {draft_tp}")
    elif method in _OWN_DRAFT or getattr(spec, "model", None):
        notes.append(f"draft weights and KV not counted: {getattr(spec, 'model', None) or 'the draft'} is not a "
                     "directory on this machine")
    else:
        notes.append(f"{method} draft inside the target checkpoint: counted only if its tensors are in the "
                     "safetensors the plan reads")
    return DraftCost(method, k, weights, kv_layers, kv_tok, _lookahead(method, k), notes)


@dataclass(frozen=True)
class Budget:
    """Tokens a full decode batch schedules per step with drafts, against max_num_batched_tokens."""

    k: int
    draft_slots: int
    per_request: int
    required: int
    max_num_batched_tokens: int
    max_num_seqs: int

    @property
    def truncates(self) -> bool:
        return self.max_num_batched_tokens < self.required

    @property
    def seqs_that_fit(self) -> int:
        return max(1, self.max_num_batched_tokens // self.per_request)


def draft_slots(spec: SpeculativeConfig) -> int:
    """Extra query rows per request for drafting (``speculative.py:max_num_new_slots_for_drafting@0.33``):
    K-1 for P-EAGLE, 1 for draft_model, K for PARD (draft_model + parallel_drafting), else 0."""
    k = spec.num_speculative_tokens
    parallel = bool(getattr(spec, "parallel_drafting", None))
    if spec.method == "draft_model":
        return k if parallel else 1
    if spec.method in ("eagle", "eagle3") and parallel:
        return k - 1
    return 0


def budget(spec: SpeculativeConfig, *, max_num_seqs: int, max_num_batched_tokens: int) -> Budget:
    """Every decoding request schedules 1 + K tokens (+ draft slots); drafts beyond the budget are sliced off
    (``v1/core/sched/scheduler.py:Scheduler.schedule@0.33``)."""
    k = spec.num_speculative_tokens
    slots = draft_slots(spec)
    per = 1 + k + slots
    return Budget(k, slots, per, max_num_seqs * per, max_num_batched_tokens, max_num_seqs)


@cache
def acceptance_table() -> dict[str, dict[str, Any]]:
    loaded: dict[str, dict[str, Any]] = shipped("forklift.speculative", "acceptance.yaml") or {}
    return loaded


@dataclass(frozen=True)
class SpecRoofline:
    """Single-stream decode with drafts: each step reads the target once plus K draft passes, and yields the mean
    acceptance length in tokens."""

    base_tok_s: float
    k: int
    draft_gb_per_step: float
    break_even_length: float
    """Tokens per step at which speculation only pays for its drafts."""
    assumed_length: float | None
    assumption: str | None
    tok_s_at_assumed: float | None


def roofline(spec: SpeculativeConfig, *, base_tok_s: float, draft_bytes_per_token: float,
             bandwidth_gbs: float) -> SpecRoofline:
    """``base_tok_s``: the plan's single-stream bound without drafts (one step = one token). A step with drafts
    takes 1/base + K x draft bytes / bandwidth and yields the mean acceptance length (AL) tokens."""
    k = spec.num_speculative_tokens
    t_base = 1.0 / base_tok_s if base_tok_s > 0 else 0.0
    t_draft = k * draft_bytes_per_token / (bandwidth_gbs * 1e9) if bandwidth_gbs > 0 else 0.0
    step = t_base + t_draft
    even = step / t_base if t_base else 0.0
    entry = acceptance_table().get(spec.method)
    length = min(float(entry["length"]), k + 1.0) if entry else None
    source = None
    if entry:
        source = f"{entry['source']} (K={entry['k']})" + (f"; capped at K+1={k + 1}" if length == k + 1.0 else "")
    return SpecRoofline(base_tok_s=base_tok_s, k=k, draft_gb_per_step=round(k * draft_bytes_per_token / 1e9, 3),
                        break_even_length=round(even, 3), assumed_length=length, assumption=source,
                        tok_s_at_assumed=round(length / step, 2) if length and step else None)

"""The Plan: immutable, JSON-ready. What will happen in memory and time, before anything loads."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from forklift.recipe.deployment import Deployment


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RankPlan(_Frozen):
    """One vLLM worker (one GPU, or one CPU process)."""

    rank: int
    host: str
    hardware: str
    pp_stage: int
    tp_rank: int
    layers: int
    layer_start: int
    layer_end: int
    total_gib: float
    requested_gib: float
    weights_gib: float
    activation_gib: float
    cudagraph_gib: float
    cudagraph_subtracted: bool
    non_torch_gib: float
    kv_pool_gib: float
    kv_bytes_per_token: int
    num_blocks: int
    kv_needed_gib: float


class Advice(_Frozen):
    """One step of the ladder, with its predicted effect (from re-planning with the change)."""

    action: str
    set: list[str]
    effect: str
    kv_pool_gib: float
    kv_tokens: int
    fits: bool


class Roofline(_Frozen):
    decode_tok_s_single: float
    decode_tok_s_aggregate: float
    concurrency: int
    prefill_tok_s: float
    active_gb_per_token: float
    critical_path_gb: float
    network_s_per_token: float
    decode_context: int


class NodeFiles(_Frozen):
    """The model files one node needs: with PP only the shards holding its layers, plus the shared files."""

    node: int
    host: str
    layers: str
    """The node's layer ranges, inclusive, e.g. "0-25" or "0-14,15-29"."""
    bytes: int
    files: int
    shards: int
    """Safetensors files among ``files``."""


class ModelFiles(_Frozen):
    """Bytes of model files per node, from the model directory on this machine (what ``model sync`` copies)."""

    dir: str
    total_bytes: int
    shards_total: int
    nodes: list[NodeFiles]


class Decisions(_Frozen):
    """What the plan decided that reaches the vLLM argv through the plan (``render`` reads these, never the
    recipe's copy): the layer split, an explicit KV budget, and the advice ``--apply`` took."""

    pp_layer_partition: list[int] | None = None
    """Sent as VLLM_PP_LAYER_PARTITION (None: vLLM's even split)."""
    kv_cache_memory_bytes: int | None = None
    """Sent as --kv-cache-memory-bytes (None: vLLM profiles and sizes the pool itself)."""
    applied: list[str] = Field(default_factory=list)
    """--set items taken from the plan's advice with --apply (already in the plan's deployment)."""


class ProbeUse(_Frozen):
    """The closest ``forklift probe`` of this model on this hardware: which, when, what differs, what was used."""

    key: str
    path: str
    measured_at: str
    hosts: list[str]
    hardware: list[str]
    vllm_build: str
    used: list[str]
    """What the plan took from it: 'terms' (activation, non-torch, CUDA graphs), 'weights', 'pool', 'kv_tokens'.
    Empty: a setting that changes those differs, so the plan only shows it."""
    differs: list[str]
    measured: dict[str, float | int | None]
    """The probe's own figures: kv_tokens, kv_pool_gib, kv_bytes_per_token, and per-rank maxima of the terms."""
    estimated_kv_tokens: int
    """What the estimator alone predicts (no probe, no calibration), to compare with."""


class TermBand(_Frozen):
    """One term of the smallest rank: what the plan says and how far it may be off."""

    term: str
    planned_gib: float
    band_gib: float
    basis: Literal["verified", "unverified", "probe", "gb10", "set"]
    key: str
    """What the band is verified under: the quantization method (weights), the model family (activation, CUDA
    graphs) or the layout (non-torch)."""
    why: str


class Interval(_Frozen):
    """The smallest rank's KV pool and headroom (pool minus one max_model_len request) as ranges, and the terms."""

    kv_pool_gib: tuple[float, float]
    margin_gib: tuple[float, float]
    terms: list[TermBand]


class Unplanned(_Frozen):
    """No plan: the planner cannot describe the model or hardware (or a forced start over a layout error).
    ``render`` and ``up`` still work from it; the run record keeps the reason."""

    kind: Literal["unplanned"] = "unplanned"
    deployment: Deployment
    decisions: Decisions
    error: str
    error_type: str
    forced: bool = False

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"deployment"})


class Plan(_Frozen):
    """What ``forklift plan`` predicts for a deployment. Build with ``forklift.plan.make``."""

    kind: Literal["plan"] = "plan"
    deployment: Deployment
    decisions: Decisions
    model: str
    architecture: str
    config_origin: str
    recipe: str | None
    vllm_version: str
    platform: str
    fits: bool
    error: str | None
    kv_tokens: int
    num_blocks: int
    block_size: int
    max_model_len: int
    largest_max_model_len: int
    max_concurrency: float
    kv_cache_dtype: str
    gpu_memory_utilization: float | None
    max_num_batched_tokens: int
    max_num_seqs: int
    tp: int
    pp: int
    dcp: int
    dp: int = 1
    runner: str = ""
    """vLLM's model runner for this model and release (v1 subtracts its CUDA-graph estimate; v2 only from 0.29)."""
    pp_partition: list[int]
    suggested_pp_partition: list[int] | None
    weights_total_gib: float
    params_b: float
    calibrated: bool
    ranks: list[RankPlan]
    roofline: Roofline
    advice: list[Advice]
    model_files: ModelFiles | None = None
    """None when the model's files are not on this machine (a note says why); never guessed."""
    notes: list[str]
    verdict: Literal["fits", "too close to call", "does not fit"] = "fits"
    """``fits`` says whether vLLM's arithmetic on the planned terms starts; ``verdict`` whether the plan can say so:
    'too close to call' when the smallest rank's KV headroom is within the plan's uncertainty (either sign), or on
    unified memory inside the spread of the GB10 terms (plan/gb10.py); the notes name ``forklift probe``."""
    kv_margin_gib: float | None = None
    """Smallest KV pool minus what one max_model_len request needs, over ranks (negative: short)."""
    uncertainty_gib: float | None = None
    """How far the pool may be below the plan (plan/interval.py: the terms' bands; a probe's or the GB10 terms'
    spread): the band the verdict uses."""
    probe: ProbeUse | None = None
    interval: Interval | None = None
    """The smallest rank's KV pool and headroom as ranges, with each term's band and what it is verified on."""

    @property
    def decode_tok_s_single(self) -> float:
        return self.roofline.decode_tok_s_single

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict: the headline keys first (model, fits, kv_tokens, ...), then the rest (the deployment
        itself is left out: ``forklift recipe show`` prints it)."""
        data = self.model_dump(mode="json", exclude={"deployment", "kind"})
        head = {
            "model": data.pop("model"),
            "fits": data.pop("fits"),
            "verdict": data.pop("verdict"),
            "kv_tokens": data.pop("kv_tokens"),
            "max_concurrency": round(data.pop("max_concurrency"), 2),
            "decode_tok_s_single": round(self.roofline.decode_tok_s_single, 2),
            "decode_tok_s_aggregate": round(self.roofline.decode_tok_s_aggregate, 2),
            "prefill_tok_s": round(self.roofline.prefill_tok_s, 1),
        }
        return {**head, **data}

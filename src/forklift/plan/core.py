"""The planner's core: settings as vLLM will resolve them, then per-rank memory and KV capacity.

Everything here is pure arithmetic over a Deployment, a model spec and the version rules; ``make`` wraps it
with notes, advice and the roofline.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from forklift.errors import HardwareError
from forklift.hardware.detect import local_amx
from forklift.hardware.profiles import HardwareProfile
from forklift.hardware.profiles import get as get_profile
from forklift.model.load import SpecSource
from forklift.model.quant import online_scheme
from forklift.model.spec import ModelSpec
from forklift.plan import calibrate, layout, rules
from forklift.plan import memory as mem
from forklift.plan.model import RankPlan
from forklift.recipe.deployment import Deployment
from forklift.speculative import sizing

GIB = mem.GIB
_MTP_METHODS = ("mtp",)


@dataclass(frozen=True)
class Settings:
    """The knobs as vLLM will resolve them (recipe values, else vLLM's defaults for this hardware/version)."""

    platform: str
    util: float | None
    mnbt: int
    seqs: int
    max_model_len: int
    kv_dtype: str
    dtype_bytes: int
    block: int
    tp: int
    pp: int
    dcp: int
    eager: bool
    include_mtp: bool
    partition: list[int]


@dataclass(frozen=True)
class Context:
    """What every step of one plan shares."""

    deployment: Deployment
    src: SpecSource
    vr: rules.VersionRules
    profiles: list[HardwareProfile]
    place: layout.Placement
    st: Settings

    @property
    def spec(self) -> ModelSpec:
        return self.src.spec

    @property
    def ranges(self) -> list[tuple[int, int]]:
        return layout.stage_ranges(self.st.partition)

    def profile_of(self, rank: int) -> HardwareProfile:
        return self.profiles[self.place.node_of(rank)]


@dataclass(frozen=True)
class Core:
    """Per-rank memory and the KV figures vLLM would log."""

    ctx: Context
    ranks: list[RankPlan]
    layouts: list[mem.KvLayout]
    pools: list[int]
    num_blocks: int
    kv_tokens: int
    max_conc: float
    largest_len: int
    error: str | None
    table: mem.WeightTable
    calibration: calibrate.Calibration | None

    @property
    def fits(self) -> bool:
        return self.error is None

    @property
    def settings(self) -> Settings:
        return self.ctx.st


def node_profiles(deployment: Deployment) -> list[HardwareProfile]:
    """Hardware profile per node: the local CPU's AMX when it plans for this machine, and the memory free at
    launch on unified-memory nodes when ``forklift hw --node`` measured it."""
    out = []
    for node in deployment.nodes:
        prof = get_profile(node.hardware)
        if prof.kind == "cpu" and node.is_local:
            prof = prof.model_copy(update={"amx": local_amx()})
        measured = deployment.facts.get(node.host)
        if prof.unified and measured is not None and measured.mem_available_gib:
            prof = prof.model_copy(update={"available_gib": measured.mem_available_gib})
        out.append(prof)
    if len({p.kind for p in out}) > 1:
        raise HardwareError("the recipe mixes CPU and GPU nodes", fix="Use one kind of hardware for every node.")
    return out


def _block_size(platform: str, spec: ModelSpec, requested: int | None, amx: bool) -> int:
    blocks = rules.block_sizes()
    if platform == "cpu":
        return blocks["cpu_mla_without_amx"] if spec.mla is not None and not amx else (requested or blocks["cpu"])
    if spec.indexer is not None:
        return blocks["cuda_sparse_mla"]
    return requested or blocks["cuda"]


def settings(deployment: Deployment, spec: ModelSpec, profiles: list[HardwareProfile],
             vr: rules.VersionRules) -> Settings:
    s, par = deployment.recipe.serve, deployment.recipe.parallel
    platform = profiles[0].kind
    d_mnbt, d_seqs = rules.batch_defaults(platform, min(p.memory_gib for p in profiles))
    dtype_bytes = {"bfloat16": 2, "float16": 2, "float32": 4}.get(s.dtype, spec.dtype_bytes)
    return Settings(
        platform=platform,
        util=None if platform == "cpu" else (s.gpu_memory_utilization or vr.gpu_memory_utilization),
        mnbt=s.max_num_batched_tokens or d_mnbt, seqs=s.max_num_seqs or d_seqs,
        max_model_len=s.max_model_len or spec.max_position_embeddings,
        kv_dtype=s.kv_cache_dtype, dtype_bytes=dtype_bytes,
        block=_block_size(platform, spec, s.block_size, profiles[0].amx), tp=par.tp, pp=par.pp, dcp=par.dcp,
        eager=s.enforce_eager or platform == "cpu",
        include_mtp=s.speculative is not None and s.speculative.method in _MTP_METHODS,
        partition=layout.pp_partition(spec.num_layers, par.pp, par.pp_layer_partition),
    )


def context(deployment: Deployment, src: SpecSource, vr: rules.VersionRules) -> Context:
    """Check the layout as vLLM would, place the ranks and resolve the settings."""
    par = deployment.recipe.parallel
    layout.check_parallel(src.spec, par.tp, par.pp, par.dcp)
    profiles = node_profiles(deployment)
    place = layout.placement(par.tp, par.pp, len(deployment.nodes),
                             [p.gpus if p.kind == "cuda" else None for p in profiles])
    return Context(deployment, src, vr, profiles, place, settings(deployment, src.spec, profiles, vr))


@dataclass(frozen=True)
class _Terms:
    """The non-KV terms of one rank (bytes) and whether vLLM subtracts the CUDA-graph estimate."""

    weights: float
    activation: float
    non_torch: float
    cudagraph: float
    cudagraph_subtracted: bool


def _terms(ctx: Context, stage: int, table: mem.WeightTable, stored: list[float] | None,
           cal: calibrate.Calibration | None) -> _Terms:
    st, spec = ctx.st, ctx.spec
    start, end = ctx.ranges[stage]
    first, last = stage == 0, stage == st.pp - 1
    weights = stored[stage] if stored is not None else table.stage(start, end, first, last)
    draft = draft_cost(ctx)  # [speculative] a separate draft (or MTP's embedding copy under PP) on the last stage
    if last and draft is not None:
        weights += draft.weight_bytes
    graphs = st.platform == "cuda" and not st.eager
    if cal is not None:
        return _Terms(weights, cal.per_stage_activation.get(stage, cal.activation_gib) * GIB,
                      cal.non_torch_gib * GIB, cal.cudagraph_gib * GIB, cal.cudagraph_subtracted)
    act = mem.activation_bytes(spec, start, end, tp=st.tp, mnbt=st.mnbt, max_num_seqs=st.seqs, last_stage=last,
                               dtype_bytes=st.dtype_bytes)
    cg = mem.cudagraph_bytes(st.seqs, st.mnbt)[0] if graphs else 0.0
    return _Terms(weights, act, mem.non_torch_bytes(st.tp, st.pp), cg,
                  graphs and ctx.vr.subtracts_cudagraphs(spec.moe is not None))


def _rank(ctx: Context, rank: int, terms: _Terms, cpu_pool: int) -> tuple[RankPlan, mem.KvLayout, int]:
    st, spec = ctx.st, ctx.spec
    stage, tp_rank = divmod(rank, st.tp)
    start, end = ctx.ranges[stage]
    prof = ctx.profile_of(rank)
    if st.platform == "cpu":
        requested, pool = float(cpu_pool), cpu_pool
    else:
        assert st.util is not None
        requested = prof.memory_gib * GIB * st.util
        pool = int(requested - terms.weights - terms.activation - terms.non_torch
                   - (terms.cudagraph if terms.cudagraph_subtracted else 0.0))
    kv = mem.kv_layout(spec, start, end, tp=st.tp, kv_cache_dtype=st.kv_dtype, dtype_bytes=st.dtype_bytes)
    if stage == st.pp - 1:
        kv = _with_draft_kv(ctx, kv)  # [speculative] draft KV shares the last stage's pool
    need = mem.kv_needed_bytes(kv, st.max_model_len, st.block, st.dcp, spec.sliding_window, st.mnbt)
    plan = RankPlan(
        rank=rank, host=ctx.deployment.nodes[ctx.place.node_of(rank)].host, hardware=prof.name, pp_stage=stage,
        tp_rank=tp_rank, layers=end - start, layer_start=start, layer_end=end, total_gib=round(prof.memory_gib, 2),
        requested_gib=mem.round_gib(requested), weights_gib=mem.round_gib(terms.weights),
        activation_gib=mem.round_gib(terms.activation), cudagraph_gib=mem.round_gib(terms.cudagraph),
        cudagraph_subtracted=terms.cudagraph_subtracted, non_torch_gib=mem.round_gib(terms.non_torch),
        kv_pool_gib=mem.round_gib(pool), kv_bytes_per_token=kv.bytes_per_token,
        num_blocks=mem.num_blocks(pool, kv, st.block), kv_needed_gib=mem.round_gib(need),
    )
    return plan, kv, pool


# --- [speculative] draft weights and KV: the arithmetic is forklift.speculative.sizing's -----------------------


def draft_cost(ctx: Context) -> sizing.DraftCost | None:
    """What the recipe's speculative draft adds to each rank of the last stage (None without one)."""
    cfg = ctx.deployment.recipe.serve.speculative
    if cfg is None:
        return None
    return sizing.draft_cost(ctx.spec, cfg, tp=ctx.st.tp, pp=ctx.st.pp, dtype_bytes=ctx.st.dtype_bytes,
                             draft=sizing.read_draft(getattr(cfg, "model", None)))


def _with_draft_kv(ctx: Context, kv: mem.KvLayout) -> mem.KvLayout:
    draft = draft_cost(ctx)
    if draft is None:
        return kv
    st, spec = ctx.st, ctx.spec
    per_mtp = mem.layer_kv_bytes(spec, spec.num_layers, tp=st.tp, kv_cache_dtype=st.kv_dtype,
                                 model_dtype_bytes=st.dtype_bytes)
    extra = int(draft.target_like_kv_layers * per_mtp + draft.kv_bytes_per_token)
    return replace(kv, bytes_per_token=kv.bytes_per_token + extra) if extra else kv


# ------------------------------------------------------------------------------------------------------------


def weight_table(ctx: Context) -> tuple[mem.WeightTable, list[float] | None]:
    """Weight bytes per layer from parameter counts, and per stage from safetensors headers when the
    checkpoint is on this machine (and is what will be served)."""
    st, spec, recipe = ctx.st, ctx.spec, ctx.deployment.recipe
    base = {2: "bf16", 4: "fp32"}.get(st.dtype_bytes, "bf16")
    quant = online_scheme(recipe.serve.quantization, spec.quant)
    table = mem.weight_table(spec, quant, base, st.tp, st.pp, include_mtp=st.include_mtp)
    stored = None
    if recipe.model.load_format != "dummy" and ctx.src.checkpoint_dir is not None and quant is spec.quant:
        stored = mem.checkpoint_stage_bytes(spec, ctx.src.checkpoint_dir, ctx.ranges, st.tp,
                                            include_mtp=st.include_mtp)
    return table, stored


def calibration_for(ctx: Context) -> calibrate.Calibration | None:
    st = ctx.st
    if st.platform != "cuda":
        return None
    return calibrate.lookup(calibrate.key_for(ctx.spec, tp=st.tp, pp=st.pp, mnbt=st.mnbt, max_num_seqs=st.seqs,
                                              eager=st.eager))


def core(ctx: Context, *, use_calibration: bool = True) -> Core:
    """Every rank's memory, the KV pool and tokens, the largest context that fits, and vLLM's startup error."""
    st, spec = ctx.st, ctx.spec
    table, stored = weight_table(ctx)
    cal = calibration_for(ctx) if use_calibration else None
    cpu_pool = int((ctx.deployment.recipe.serve.cpu_kv_cache_gib or rules.estimate()["cpu_kv_default_gib"]) * GIB)
    ranks, layouts, pools = [], [], []
    for r in range(ctx.place.world):
        plan, kv, pool = _rank(ctx, r, _terms(ctx, r // st.tp, table, stored, cal), cpu_pool)
        ranks.append(plan)
        layouts.append(kv)
        pools.append(pool)
    n_blocks = min(r.num_blocks for r in ranks)
    per_req = mem.blocks_per_request(layouts[0], st.max_model_len, st.block, st.dcp, spec.sliding_window, st.mnbt)
    largest = mem.largest_fitting_len(layouts, pools, max(st.max_model_len, spec.max_position_embeddings), st.block,
                                      st.dcp, spec.sliding_window, st.mnbt)
    return Core(ctx=ctx, ranks=ranks, layouts=layouts, pools=pools, num_blocks=n_blocks,
                kv_tokens=(n_blocks // layouts[0].n_groups) * st.block * st.dcp,
                max_conc=n_blocks / per_req if per_req else 0.0, largest_len=largest,
                error=startup_error(ctx, ranks, largest), table=table, calibration=cal)


def _free_memory_error(ctx: Context, ranks: list[RankPlan]) -> str | None:
    context_gib = float(rules.estimate().get("cuda_context_gib", 0.5))
    for rank in ranks:
        prof = ctx.profile_of(rank.rank)
        free = prof.available_gib if prof.unified and prof.available_gib else prof.memory_gib - context_gib
        if rank.requested_gib > free:
            return (f"Free memory on device {rank.host} ({free:.2f}/{prof.memory_gib:.2f} GiB) on startup is less "
                    f"than desired GPU memory utilization ({ctx.st.util}, {rank.requested_gib:.2f} GiB). "
                    "Decrease GPU memory utilization or reduce GPU memory used by other processes.")
    return None


def startup_error(ctx: Context, ranks: list[RankPlan], largest: int) -> str | None:
    """The first error vLLM would raise at startup, in vLLM's words, or None."""
    if ctx.st.platform == "cuda":
        free_error = _free_memory_error(ctx, ranks)
        if free_error:
            return free_error
    worst = min(ranks, key=lambda r: r.kv_pool_gib - r.kv_needed_gib)
    if worst.kv_pool_gib <= 0:
        return ("No available memory for the cache blocks "
                f"(rank {worst.rank} on {worst.host}: {worst.kv_pool_gib:.2f} GiB). "
                "Try increasing gpu_memory_utilization when initializing the engine.")
    if worst.kv_needed_gib > worst.kv_pool_gib:
        return (f"To serve at least one request with the models's max seq len ({ctx.st.max_model_len}), "
                f"({worst.kv_needed_gib:.2f} GiB KV cache is needed, which is larger than the available KV cache "
                f"memory ({worst.kv_pool_gib:.2f} GiB). Based on the available memory, the estimated maximum model "
                f"length is {largest}. Try increasing gpu_memory_utilization or decreasing max_model_len when "
                "initializing the engine.")
    return None

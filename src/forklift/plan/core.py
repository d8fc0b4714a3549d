"""The planner's core: per-rank memory and KV capacity, from the context to vLLM's startup error.

Everything here is pure arithmetic over a Deployment, a model spec and the version rules; ``make`` wraps it
with notes, advice and the roofline. The settings and the ``Context`` are ``context``; what a stage's accounting
reads (batch, KV layout, weight table, draft) ``stage_inputs``; probes and calibrations ``measured``; vLLM's
startup checks and the unified-memory verdict ``startup_checks``. The KV manager is ``kvcache`` / ``kvspecs``; the
non-weight terms ``terms``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from forklift.model.quant import loaded_scheme, online_scheme
from forklift.model.vision import tower_param_count
from forklift.plan import calibrate, gb10, load_replay, probes, quant_rules, rules, terms
from forklift.plan import weights as mem
from forklift.plan.context import Context as Context  # re-exported, with the names below: callers import them here
from forklift.plan.context import Settings as Settings
from forklift.plan.context import context as context
from forklift.plan.context import node_profiles as node_profiles
from forklift.plan.context import settings as settings
from forklift.plan.kvcache import KvLayout, largest_fitting_len
from forklift.plan.measured import calibration_for as calibration_for
from forklift.plan.measured import hardware_identity as hardware_identity
from forklift.plan.measured import probe_for as probe_for
from forklift.plan.measured import probe_settings as probe_settings
from forklift.plan.result import RankPlan
from forklift.plan.stage_inputs import compile_flush as compile_flush
from forklift.plan.stage_inputs import draft_cost as draft_cost
from forklift.plan.stage_inputs import encoder_profile as encoder_profile
from forklift.plan.stage_inputs import expert_share as expert_share
from forklift.plan.stage_inputs import moe_backend as moe_backend
from forklift.plan.stage_inputs import profile_batch as profile_batch
from forklift.plan.stage_inputs import requested_bytes as requested_bytes
from forklift.plan.stage_inputs import stage_layout as stage_layout
from forklift.plan.stage_inputs import unified_watermarks as unified_watermarks
from forklift.plan.stage_inputs import weight_table as weight_table
from forklift.plan.startup_checks import FreeCheck as FreeCheck
from forklift.plan.startup_checks import above_model_len as above_model_len
from forklift.plan.startup_checks import allow_long as allow_long
from forklift.plan.startup_checks import free_check as free_check
from forklift.plan.startup_checks import max_len_error as max_len_error
from forklift.plan.startup_checks import startup_error as startup_error
from forklift.plan.startup_checks import verdict as verdict

GIB = mem.GIB


@dataclass(frozen=True)
class Core:
    """Per-rank memory and the KV figures vLLM would log."""

    ctx: Context
    ranks: list[RankPlan]
    layouts: list[KvLayout]
    pools: list[int]
    num_blocks: int
    kv_tokens: int
    max_conc: float
    largest_len: int
    error: str | None
    table: mem.WeightTable
    calibration: calibrate.Calibration | None
    verdict: str = "fits"
    """Unified memory, unprobed: fits | does not fit | too close to call (gb10.verdict: decided only outside the
    terms' spread); elsewhere plan.make.close_call decides."""
    margin_gib: float | None = None
    band_gib: float | None = None
    verdict_reason: str = ""
    """What the GB10 verdict rests on; empty where it does not apply (not unified memory, or a probe was used)."""
    probe: probes.Match | None = None
    """The closest probe of this model on this hardware (``forklift probe``), used or only shown."""
    probe_used: tuple[str, ...] = ()
    """What the plan took from the probe: 'weights', 'terms', 'pool', 'kv_tokens'."""

    @property
    def fits(self) -> bool:
        return self.error is None

    @property
    def settings(self) -> Settings:
        return self.ctx.st


@dataclass(frozen=True)
class Terms:
    """The non-KV terms of one rank (bytes) and whether vLLM subtracts the CUDA-graph estimate."""

    weights: float
    activation: float
    non_torch: float
    cudagraph: float
    cudagraph_subtracted: bool
    graphs: tuple[int, int] = (0, 0)


def _terms(ctx: Context, stage: int, lay: KvLayout, table: mem.WeightTable, stored: list[float] | None,
           cal: calibrate.Calibration | None, *, measured_weights: bool = False) -> Terms:
    st, spec = ctx.st, ctx.spec
    start, end = ctx.ranges[stage]
    first, last = stage == 0, stage == st.pp - 1
    weights = stored[stage] if stored is not None else table.stage(start, end, first, last)
    if not measured_weights:  # a probe's 'Model loading took' already holds them
        weights += spec.rope_cache_bytes(start, end)  # rotary caches: allocated at load, in no checkpoint
        weights += _load_slack(ctx, start, end, first, last)  # the caching allocator's whole blocks (load_replay.py)
    draft = draft_cost(ctx)  # [speculative] a separate draft (or MTP's embedding copy under PP) on the last stage
    if last and draft is not None and not measured_weights:  # a probe measured the drafter with the rest
        weights += draft.weight_bytes
    graphs_on = st.platform == "cuda" and not st.eager
    if cal is not None:
        return Terms(weights, cal.per_stage_activation.get(stage, cal.activation_gib) * GIB, cal.non_torch_gib * GIB,
                     cal.cudagraph_gib * GIB, cal.cudagraph_subtracted)
    b = replace(profile_batch(ctx, lay.block_size), layers=end - start)
    act = terms.activation(spec, start, end, last, b, ctx.vr, st.runner).total
    if first and spec.vision is not None:
        act, weights = _with_encoder(ctx, b, act, weights)
    cg, graphs = terms.cudagraph_estimate(spec, ctx.vr, b) if graphs_on else (0.0, (0, 0))
    nodes = len(ctx.deployment.nodes)
    non_torch = terms.non_torch(st.tp, st.pp, nodes) + terms.profile_host(spec, b)
    if b.unified:
        g = gb10.terms_for(ctx.vr.version)
        cg += g.cudagraph_excess_gib * GIB if graphs_on else 0.0  # the estimator reads MemFree there (gb10.py)
        non_torch += unified_watermarks(ctx).page_cache * GIB  # the page cache a raised low watermark keeps out
        non_torch += gb10.cold_compile_bytes(g, compiled=graphs_on, compile_cache=st.compile_cache)  # (gb10.py)
    return Terms(weights, act, non_torch, cg, graphs_on and ctx.vr.subtracts_cudagraphs(st.runner), graphs)


def _load_slack(ctx: Context, start: int, end: int, first: bool, last: bool) -> int:
    """What memory_allocated counts beyond the tensors after loading a stage (plan/load_replay.py; 0 where the
    replay does not cover the method and kernel)."""
    st = ctx.st
    if st.platform != "cuda":
        return 0
    slack = load_replay.load_slack(ctx.spec, quant_rules.scheme_for(ctx), tp=st.tp, capability=st.capability,
                                   start=start, end=end, first=first, last=last, act_bytes=st.dtype_bytes)
    return slack or 0


def _with_encoder(ctx: Context, batch: terms.Batch, act: float, weights: float) -> tuple[float, float]:
    """The first stage's activation with the encoder's profile pass (plan/encoder.py), and its weights with a whole
    tower per rank under mm_encoder_tp_mode 'data' (the table shards it over TP like vLLM's default)."""
    e = encoder_profile(ctx)
    if not e.skipped:
        c0 = float(rules.measured()["activation_c0_gib"]) * GIB
        act = max(act + e.held, c0 + e.peak)
    if ctx.deployment.recipe.serve.multimodal.mm_encoder_tp_mode == "data" and ctx.st.tp > 1 and ctx.spec.vision:
        weights += tower_param_count(ctx.spec.vision) * batch.dtype_bytes * (1 - 1 / ctx.st.tp)
    return act, weights


def _rank(ctx: Context, rank: int, t: Terms, lay: KvLayout, cpu_pool: int,
          measured_pool: int | None = None) -> tuple[RankPlan, int]:
    st = ctx.st
    stage, tp_rank = divmod(rank % (st.tp * st.pp), st.tp)
    start, end = ctx.ranges[stage]
    prof = ctx.profile_of(rank)
    if st.platform == "cpu":
        requested, pool = float(cpu_pool), cpu_pool
    else:
        requested = requested_bytes(ctx, rank)
        pool = int(requested - t.weights - t.activation - t.non_torch - (t.cudagraph if t.cudagraph_subtracted else 0))
        if measured_pool is not None:
            pool = measured_pool
        if isinstance(st.kv_budget, int):
            pool = st.kv_budget
    plan = RankPlan(
        rank=rank, host=ctx.deployment.nodes[ctx.place.node_of(rank)].host, hardware=prof.name, pp_stage=stage,
        tp_rank=tp_rank, layers=end - start, layer_start=start, layer_end=end, total_gib=round(prof.memory_gib, 2),
        requested_gib=mem.round_gib(requested), weights_gib=mem.round_gib(t.weights),
        activation_gib=mem.round_gib(t.activation), cudagraph_gib=mem.round_gib(t.cudagraph),
        cudagraph_subtracted=t.cudagraph_subtracted, non_torch_gib=mem.round_gib(t.non_torch),
        kv_pool_gib=mem.round_gib(pool), kv_bytes_per_token=lay.bytes_per_token, num_blocks=lay.num_blocks(pool),
        kv_needed_gib=mem.round_gib(lay.needed_bytes()),
    )
    return plan, pool


def _probe_terms(ctx: Context, match: probes.Match) -> tuple[calibrate.Calibration, list[float] | None]:
    """A probe's measured terms per stage as a calibration, and its weights per stage (bytes) where the dummy
    load stores what the real one will (``loaded_scheme``)."""
    p, st = match.probe, ctx.st
    stages = range(st.pp)
    act = {s: p.stage_max("activation_gib", s) or 0.0 for s in stages}
    non_torch = max((p.stage_max("non_torch_gib", s) or 0.0 for s in stages), default=0.0)
    subtracted = p.cudagraph_subtracted
    field = "cudagraph_estimate_gib" if subtracted else "cudagraph_gib"
    cg = max((p.stage_max(field, s) or 0.0 for s in stages), default=0.0)
    cal = calibrate.Calibration(key=p.key, source_log=str(p.path), vllm_version=p.vllm_build,
                                activation_gib=max(act.values(), default=0.0), non_torch_gib=non_torch,
                                cudagraph_gib=cg, cudagraph_subtracted=subtracted, per_stage_activation=act)
    weights = [p.stage_max("weights_gib", s) for s in stages]
    quant = online_scheme(ctx.deployment.recipe.serve.quantization, ctx.spec.quant)
    same_load = loaded_scheme(quant, dummy=True) == loaded_scheme(quant, dummy=False)
    if not same_load or any(w is None for w in weights):
        return cal, None
    return cal, [(w or 0.0) * GIB for w in weights]


def core(ctx: Context, *, use_calibration: bool = True) -> Core:
    """Every rank's memory, the KV pool and tokens, the largest context that fits, and vLLM's startup error."""
    st, spec = ctx.st, ctx.spec
    table, stored = weight_table(ctx)
    cal = calibration_for(ctx) if use_calibration else None
    match = probe_for(ctx) if use_calibration else None
    used: list[str] = []
    measured: dict[int, int] = {}
    if match is not None and st.platform == "cuda" and match.terms_usable and cal is None:
        cal, probed_weights = _probe_terms(ctx, match)
        used.append("terms")
        if probed_weights is not None:
            stored = probed_weights
            used.append("weights")
            if match.pool_usable:  # same utilization, same load: the pool each rank measured
                measured = {r: b for r in range(ctx.place.world)
                            if (b := match.probe.node_pool_bytes(ctx.place.node_of(r))) is not None}
                used.append("pool")
    cpu_pool = int((ctx.deployment.recipe.serve.cpu_kv_cache_gib or rules.estimate()["cpu_kv_default_gib"]) * GIB)
    stages = [stage_layout(ctx, s) for s in range(st.pp)]
    stage_terms = [_terms(ctx, s, stages[s], table, stored, cal, measured_weights="weights" in used)
                   for s in range(st.pp)]
    ranks, layouts, pools = [], [], []
    for r in range(ctx.place.world):
        stage = (r // st.tp) % st.pp
        plan, pool = _rank(ctx, r, stage_terms[stage], stages[stage], cpu_pool, measured.get(r))
        ranks.append(plan)
        layouts.append(stages[stage])
        pools.append(pool)
    n_blocks = min(r.num_blocks for r in ranks)
    tokens = layouts[0].tokens(n_blocks)
    if match is not None and st.platform == "cpu" and match.kv_usable:
        tokens, n_blocks = _cpu_probed_tokens(match, min(pools), layouts[0].block_size)
        used.append("kv_tokens")
    elif "pool" in used and match is not None and match.probe.kv_tokens and not match.probe.error \
            and match.same_settings:  # the pool as measured, every setting the same: vLLM's own count
        tokens = match.probe.kv_tokens
        used.append("kv_tokens")
    upper = max(st.max_model_len, spec.derived_max_len or spec.max_position_embeddings)
    largest = _largest_len(ctx, layouts, pools, upper)
    error = startup_error(ctx, ranks, layouts, pools, largest)
    if {"pool", "terms"} & set(used):  # measured on these nodes: the probe's band decides (plan.make.close_call)
        decided, margin, band, reason = ("fits" if error is None else "does not fit"), None, None, ""
    else:
        decided, margin, band, reason = verdict(ctx, ranks, layouts, pools, error)
    return Core(ctx=ctx, ranks=ranks, layouts=layouts, pools=pools, num_blocks=n_blocks,
                kv_tokens=tokens, max_conc=layouts[0].concurrency(n_blocks),
                largest_len=largest, error=error, table=table,
                calibration=None if "terms" in used else cal, probe=match, probe_used=tuple(used), verdict=decided,
                margin_gib=margin, band_gib=band, verdict_reason=reason)


def _cpu_probed_tokens(match: probes.Match, pool: int, block: int) -> tuple[int, int]:
    """vLLM-CPU: the probe's tokens as measured when the KV space is the same, else the planned space over the
    measured bytes per token, in whole blocks. (tokens, blocks)"""
    p = match.probe
    block = p.block_size or block
    if match.pool_usable or not p.kv_bytes_per_token:
        return p.kv_tokens, p.kv_tokens // block
    blocks = int(pool // (p.kv_bytes_per_token * block))
    return blocks * block, blocks


def _largest_len(ctx: Context, layouts: list[KvLayout], pools: list[int], upper: int) -> int:
    if ctx.vr.kv_fit_check == "global_min" and ctx.st.pp > 1:
        # 0.14-0.16: the whole model's per-request KV (every stage's layers) against one worker's memory
        stage_layouts = layouts[:: ctx.st.tp][: ctx.st.pp]
        total = _GlobalLayout(stage_layouts)
        return largest_fitting_len([total], [min(pools)], upper)
    return largest_fitting_len(layouts, pools, upper)


@dataclass(frozen=True)
class _GlobalLayout:
    """The whole model's KV groups seen as one worker (vLLM 0.14-0.16's PP startup check)."""

    stages: list[KvLayout]

    def needed_bytes(self, length: int | None = None) -> int:
        return sum(lay.needed_bytes(length) for lay in self.stages)

"""The planner's core: settings as vLLM will resolve them, then per-rank memory and KV capacity.

Everything here is pure arithmetic over a Deployment, a model spec and the version rules; ``make`` wraps it
with notes, advice and the roofline. The KV manager is ``kvcache`` / ``kvspecs``; the non-weight terms ``terms``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from forklift.errors import HardwareError, PlanError
from forklift.hardware.detect import local_amx
from forklift.hardware.profiles import HardwareProfile
from forklift.hardware.profiles import get as get_profile
from forklift.model.load import SpecSource
from forklift.model.quant import loaded_scheme, online_scheme
from forklift.model.spec import ModelSpec
from forklift.model.vision import tower_param_count
from forklift.plan import calibrate, encoder, gb10, kvspecs, layout, load_replay, probes, quant_rules, rules, terms
from forklift.plan import weights as mem
from forklift.plan.kvcache import KvLayout, LayerKv, largest_fitting_len
from forklift.plan.kvcache import layout as kv_layout
from forklift.plan.result import RankPlan
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
    block: int | None
    tp: int
    pp: int
    dcp: int
    eager: bool
    include_mtp: bool
    partition: list[int]
    dp: int = 1
    ep: bool = False
    num_spec: int = 0
    capability: str = ""
    runner: str = "v1"
    prefix_caching: bool | None = None
    kv_budget: int | str | None = None
    compile_cache: str = "cold"
    """torch.compile's cache of this model and settings on the nodes: 'cold' (a first start; what a plan assumes and
    what C0 was chosen on) or 'warm' (a restart: no first-call autotuning, terms.compile_flush; on unified memory
    no compile residue either, gb10.cold_compile_bytes)."""


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

    def kv_inputs(self) -> kvspecs.KvInputs:
        st = self.st
        return kvspecs.KvInputs(
            tp=st.tp, kv_dtype=st.kv_dtype, model_dtype_bytes=st.dtype_bytes, capability=st.capability,
            platform=st.platform, max_model_len=st.max_model_len, mnbt=st.mnbt, block=st.block,
            amx=self.profiles[0].amx, dcp=st.dcp, pp=st.pp, runner=st.runner, num_spec=st.num_spec,
            include_mtp=st.include_mtp, prefix_caching=st.prefix_caching)


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


def node_profiles(deployment: Deployment) -> list[HardwareProfile]:
    """Hardware profile per node: the local CPU's AMX when it plans for this machine, and the memory measured by
    ``forklift hw --node`` on unified-memory nodes (free at launch, and the total)."""
    out = []
    for node in deployment.nodes:
        prof = get_profile(node.hardware)
        if prof.kind == "cpu" and node.is_local:
            prof = prof.model_copy(update={"amx": local_amx()})
        measured = deployment.facts.get(node.host)
        if prof.unified and measured is not None and measured.mem_available_gib:
            update = {"available_gib": measured.mem_available_gib}
            if measured.mem_total_gib and prof.kind == "cuda":
                update["memory_gib"] = measured.mem_total_gib
            prof = prof.model_copy(update=update)
        out.append(prof)
    if len({p.kind for p in out}) > 1:
        raise HardwareError("the recipe mixes CPU and GPU nodes", fix="Use one kind of hardware for every node.")
    return out


def _check_version(spec: ModelSpec, release: rules.VersionRules) -> None:
    if spec.vllm_min and rules.version_key(release.version) < rules.version_key(spec.vllm_min):
        raise PlanError(f"vLLM {release.version} does not serve {spec.architecture} (first in {spec.vllm_min})",
                        fix=f"Run vLLM {spec.vllm_min} or newer (--vllm-version), or use the model's other "
                        "architecture name if its config offers one.")


def settings(deployment: Deployment, spec: ModelSpec, profiles: list[HardwareProfile],
             release: rules.VersionRules, compile_cache: str = "cold") -> Settings:
    s, par = deployment.recipe.serve, deployment.recipe.parallel
    prof = min(profiles, key=lambda p: p.memory_gib)
    platform = prof.kind
    d_mnbt, d_seqs = rules.batch_defaults(release, platform, prof.memory_gib, prof.name, prof.compute_capability,
                                          workers=par.tp * par.pp)
    dtype_bytes = {"bfloat16": 2, "float16": 2, "float32": 4}.get(s.dtype, spec.dtype_bytes)
    quantized = spec.quant.method != "none" or s.quantization is not None
    spec_method = s.speculative.method if s.speculative is not None else None
    return Settings(
        platform=platform,
        util=None if platform == "cpu" else (s.gpu_memory_utilization or release.gpu_memory_utilization),
        mnbt=s.max_num_batched_tokens or d_mnbt, seqs=s.max_num_seqs or d_seqs,
        max_model_len=s.max_model_len or spec.default_max_len or 2048,  # vLLM's derived length, else its 2048
        kv_dtype=kvspecs.resolved_kv_dtype(s.kv_cache_dtype, spec, release, prof.compute_capability),
        dtype_bytes=dtype_bytes, block=s.block_size, tp=par.tp, pp=par.pp, dcp=par.dcp,
        eager=s.enforce_eager or platform == "cpu", include_mtp=spec_method in _MTP_METHODS,
        partition=layout.pp_partition(spec.num_layers, par.pp, par.pp_layer_partition), dp=par.dp,
        ep=s.enable_expert_parallel, num_spec=s.speculative.num_speculative_tokens if s.speculative else 0,
        capability=prof.compute_capability,
        runner=release.runner_for(spec.architecture, moe=spec.is_moe, hybrid=spec.is_hybrid, quantized=quantized),
        prefix_caching=s.enable_prefix_caching, kv_budget=s.kv_cache_memory_bytes, compile_cache=compile_cache,
    )


def context(deployment: Deployment, src: SpecSource, release: rules.VersionRules,
            compile_cache: str = "cold") -> Context:
    """Check the layout as vLLM would, place the ranks and resolve the settings."""
    par = deployment.recipe.parallel
    _check_version(src.spec, release)
    kvspecs.check_kv_dtype(deployment.recipe.serve.kv_cache_dtype, release.version)
    layout.check_parallel(src.spec, par.tp, par.pp, par.dcp)
    profiles = node_profiles(deployment)
    if src.spec.vision is not None and not encoder.tower_built(deployment.recipe.serve.multimodal):
        src = src.model_copy(update={"spec": src.spec.model_copy(update={"vision": None})})
    place = layout.placement(par.tp, par.pp, len(deployment.nodes),
                             [p.gpus if p.kind == "cuda" else None for p in profiles], dp=par.dp)
    ctx = Context(deployment, src, release, profiles, place,
                  settings(deployment, src.spec, profiles, release, compile_cache))
    quant_rules.check(src.spec, quant_rules.scheme_for(ctx), quant_rules.setup_for(ctx))  # will it start
    return ctx


@dataclass(frozen=True)
class Terms:
    """The non-KV terms of one rank (bytes) and whether vLLM subtracts the CUDA-graph estimate."""

    weights: float
    activation: float
    non_torch: float
    cudagraph: float
    cudagraph_subtracted: bool
    graphs: tuple[int, int] = (0, 0)


def profile_batch(ctx: Context, block: int) -> terms.Batch:
    """The profile run's shapes: N = max_num_batched_tokens per rank; every MoE layer sees the tokens of all DP
    ranks (the DP all-gather before the experts), and experts are split tp x dp ways unless EP keeps them whole.
    ``block``: the KV block size after the hybrid alignment (MLA sizes its prefill workspace with it)."""
    st = ctx.st
    return terms.Batch(tp=st.tp, mnbt=st.mnbt, seqs=st.seqs, max_model_len=st.max_model_len, block=block,
                       dtype_bytes=st.dtype_bytes, tokens_to_experts=st.mnbt * st.dp,
                       expert_tp=1 if st.ep else st.tp * st.dp, capability=st.capability, num_spec=st.num_spec,
                       moe_backend=moe_backend(ctx),
                       attention=terms.attention_backend(ctx.spec, st.capability, st.kv_dtype),
                       unified=any(p.unified for p in ctx.profiles),
                       warm_flush=compile_flush(ctx) if st.compile_cache == "warm" else 0.0)


def compile_flush(ctx: Context) -> float:
    """terms.compile_flush on this deployment's GPUs (the smallest L2; 0 when one profile lacks it, or eager)."""
    st = ctx.st
    return min(terms.compile_flush(p.l2_cache_mib, compiled=st.platform == "cuda" and not st.eager)
               for p in ctx.profiles)


def moe_backend(ctx: Context) -> str:
    """Which fused-MoE kernel holds the profile's MoE buffers (fused_moe/oracle/*.py @0.26.0): MXFP4 on Hopper goes
    to OAI triton_kernels (monolithic); NVFP4 on SM12x to FlashInfer's CUTLASS MoE, the first NVFP4 backend there
    (TRTLLM and CuteDSL are SM10x only; FlashInferExperts take kNvfp4 from SM100 up); everything else to Triton."""
    st, spec = ctx.st, ctx.spec
    if spec.moe is None or st.platform != "cuda":
        return "triton"
    quant = online_scheme(ctx.deployment.recipe.serve.quantization, spec.quant)
    if quant.method == "mxfp4" and st.capability.startswith("9."):
        return "monolithic"
    experts = quant.format_for("model.layers.1.mlp.experts", linear=True, role="experts", base="bf16")
    if experts == "nvfp4" and st.capability.startswith("12."):
        return "flashinfer_cutlass"
    return "triton"


def stage_layout(ctx: Context, stage: int) -> KvLayout:
    """One worker's KV layout for a PP stage (every TP rank of a stage has the same)."""
    start, end = ctx.ranges[stage]
    x = ctx.kv_inputs()
    last = stage == ctx.st.pp - 1
    layers = kvspecs.layer_specs(ctx.spec, start, end, last, x, ctx.vr)
    draft = draft_cost(ctx) if last else None
    if draft is not None and draft.kv_bytes_per_token:  # [speculative] a separate draft's KV shares the pool
        layers.append(LayerKv("full", per_token=int(draft.kv_bytes_per_token)))
    return kv_layout(layers, kvspecs.kv_config(ctx.spec, x, ctx.vr))


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


def encoder_profile(ctx: Context) -> encoder.EncoderProfile:
    st = ctx.st
    return encoder.profile(ctx.spec.vision, ctx.deployment.recipe.serve.multimodal, mnbt=st.mnbt, seqs=st.seqs,
                           max_model_len=st.max_model_len, tp=st.tp, dtype_bytes=st.dtype_bytes)


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


def unified_watermarks(ctx: Context) -> gb10.WatermarkCost:
    """What the bundled node profile forklift applies to these nodes (`forklift node apply`) costs in MemAvailable:
    the largest over the recipe's unified nodes (gb10.watermark_cost)."""
    costs = [gb10.watermark_cost(gb10.node_profile_sysctl(p.node_profile)) for p in ctx.profiles
             if p.unified and p.node_profile]
    return max(costs, key=lambda c: c.reserve + c.page_cache, default=gb10.WatermarkCost(0.0, 0.0, 0.0))


def requested_bytes(ctx: Context, rank: int) -> float:
    """request_memory: ceil(total x gpu_memory_utilization) of the GPU (on unified memory the CUDA total)."""
    assert ctx.st.util is not None
    return float(math.ceil(ctx.profile_of(rank).memory_gib * GIB * ctx.st.util))


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


def expert_share(ctx: Context) -> mem.ExpertShare:
    """The routed experts one rank holds (the busiest rank under EP) and the MXFP4 backend's padding."""
    st, spec = ctx.st, ctx.spec
    pad: tuple[int, int] | None = None
    stored: tuple[int, int, int] | None = None
    if spec.quant.method == "mxfp4" and st.platform == "cuda":
        key = {"8": "8.0", "9": "9.0", "10": "10.0", "12": "12.1"}.get(st.capability.split(".")[0], "9.0")
        backend = rules.data()["mxfp4_backend"][key]
        inter = backend["inter"]
        if isinstance(inter, dict):
            keys = [k for k in inter if rules.version_key(k) <= rules.version_key(ctx.vr.version)] or list(inter)
            inter = inter[max(keys, key=rules.version_key)]
        pad = (int(backend["hidden"]), int(inter))
        stored = _mxfp4_hopper_triton(ctx.vr.version) if backend["backend"] == "triton" and key == "9.0" else None
    if st.ep and spec.moe is not None:
        ways = st.tp * st.dp
        local = -(-spec.moe.n_routed // ways)
        return mem.ExpertShare(tp=ways, local=local, total=spec.moe.n_routed, mxfp4_pad=pad, mxfp4_stored=stored)
    return mem.ExpertShare(tp=st.tp * st.dp, mxfp4_pad=pad, mxfp4_stored=stored)


def _mxfp4_hopper_triton(version: str) -> tuple[int, int, int] | None:
    """The TRITON MXFP4 backend's stored layout on Hopper for this release (data/vllm.yaml mxfp4_hopper_triton)."""
    table = rules.data()["mxfp4_hopper_triton"]
    keys = [k for k in table if rules.version_key(k) <= rules.version_key(version)]
    if not keys:
        return None
    e = table[max(keys, key=rules.version_key)]
    return int(e["scale_k"]), int(e["scale_m"]), int(e["bias_bytes"])


# --- [speculative] draft weights and KV: the arithmetic is forklift.speculative.sizing's -----------------------


def draft_cost(ctx: Context) -> sizing.DraftCost | None:
    """What the recipe's speculative draft adds to each rank of the last stage (None without one)."""
    cfg = ctx.deployment.recipe.serve.speculative
    if cfg is None:
        return None
    return sizing.draft_cost(ctx.spec, cfg, tp=ctx.st.tp, pp=ctx.st.pp, dtype_bytes=ctx.st.dtype_bytes,
                             draft=sizing.read_draft(getattr(cfg, "model", None)))


# ------------------------------------------------------------------------------------------------------------


def weight_table(ctx: Context) -> tuple[mem.WeightTable, list[float] | None]:
    """Weight bytes per layer from parameter counts, and per stage from safetensors headers when the
    checkpoint is on this machine (and is what will be served)."""
    st, spec, recipe = ctx.st, ctx.spec, ctx.deployment.recipe
    quant = quant_rules.scheme_for(ctx)
    table = mem.weight_table(spec, quant, float(st.dtype_bytes), st.tp, st.pp, include_mtp=st.include_mtp,
                             experts=expert_share(ctx), capability=st.capability if st.platform == "cuda" else None)
    stored = None
    if recipe.model.load_format != "dummy" and ctx.src.checkpoint_dir is not None and quant is spec.quant \
            and st.dp == 1 and spec.quant.method != "mxfp4":
        stored = mem.checkpoint_stage_bytes(spec, ctx.src.checkpoint_dir, ctx.ranges, st.tp,
                                            include_mtp=st.include_mtp)
    return table, stored


def probe_settings(ctx: Context) -> dict[str, object]:
    """The settings a probe is keyed by (``probes.TERM_KEYS``, ``KV_KEYS``, ``POOL_KEYS``), as vLLM resolves them."""
    st, s = ctx.st, ctx.deployment.recipe.serve
    cpu = st.platform == "cpu"
    return {
        "tp": st.tp, "pp": st.pp, "dp": st.dp, "dcp": st.dcp, "max_num_batched_tokens": st.mnbt,
        "max_num_seqs": st.seqs, "enforce_eager": st.eager, "dtype": s.dtype, "quantization": s.quantization,
        "speculative": f"{s.speculative.method}:{s.speculative.num_speculative_tokens}" if s.speculative else None,
        "enable_expert_parallel": st.ep, "kv_cache_dtype": st.kv_dtype, "block_size": s.block_size,
        "enable_prefix_caching": s.enable_prefix_caching, "gpu_memory_utilization": st.util,
        "cpu_kv_cache_gib": (s.cpu_kv_cache_gib or rules.estimate()["cpu_kv_default_gib"]) if cpu else None,
        "max_model_len": st.max_model_len,
    }


def hardware_identity(ctx: Context) -> list[str]:
    """Per node, the hardware a probe must have run on to count for this plan (its profile's name)."""
    return [p.name for p in ctx.profiles]


def probe_for(ctx: Context) -> probes.Match | None:
    """The closest stored probe of this model on this hardware, or None."""
    st = ctx.st
    return probes.closest(calibrate.fingerprint(ctx.spec), hardware_identity(ctx), probe_settings(ctx),
                          vllm_build=ctx.vr.version if st.platform == "cuda" else None,
                          hosts=[n.host for n in ctx.deployment.nodes])


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


@dataclass(frozen=True)
class FreeCheck:
    """vLLM's startup check on the tightest rank: ceil(total x utilization) against the free reading at the init
    snapshot, GiB. ``low`` = ``high`` where the reading is known (a discrete GPU, a measured unified node); on an
    unmeasured unified node the range clean GB10 nodes read (gb10.yaml free_at_init_gib) less the node profile's
    watermark reserve."""

    host: str
    total: float
    requested: float
    low: float
    high: float
    measured: bool
    typical: float
    """The median clean reading (unmeasured) or the reading itself: what a utilization ceiling is sized from."""


def free_check(ctx: Context, ranks: list[RankPlan]) -> FreeCheck | None:
    st = ctx.st
    if st.platform != "cuda":
        return None
    out: list[FreeCheck] = []
    for rank in ranks:
        prof = ctx.profile_of(rank.rank)
        measured = ctx.deployment.facts.get(rank.host)
        if prof.unified:
            g = gb10.terms_for(ctx.vr.version)
            if measured is not None and measured.mem_available_gib:
                free = measured.mem_available_gib - g.pre_snapshot_gib  # MemAvailable less what precedes the read
                out.append(FreeCheck(rank.host, prof.memory_gib, rank.requested_gib, free, free, True, free))
                continue
            reserve = unified_watermarks(ctx).reserve
            out.append(FreeCheck(rank.host, prof.memory_gib, rank.requested_gib, g.free_at_init.low - reserve,
                                 g.free_at_init.high - reserve, False, g.free_at_init.median - reserve))
            continue
        free = prof.memory_gib - terms.pre_snapshot(st.tp, st.pp) / GIB
        out.append(FreeCheck(rank.host, prof.memory_gib, rank.requested_gib, free, free, True, free))
    return min(out, key=lambda c: c.low - c.requested, default=None)


def _free_memory_error(ctx: Context, ranks: list[RankPlan]) -> str | None:
    check = free_check(ctx, ranks)
    if check is None or check.requested <= check.high + 1e-9:
        return None
    shown = f"{check.high:.2f}" if check.measured else f"at most {check.high:.2f}"
    return (f"Free memory on device {check.host} ({shown}/{check.total:.2f} GiB) on startup is less "
            f"than desired GPU memory utilization ({ctx.st.util}, {check.requested:.2f} GiB). "
            "Decrease GPU memory utilization or reduce GPU memory used by other processes.")


def verdict(ctx: Context, ranks: list[RankPlan], layouts: list[KvLayout], pools: list[int],
            error: str | None) -> tuple[str, float | None, float | None, str]:
    """(verdict, KV margin GiB, band GiB, what decides it). Decided outside the spread of the unified-memory terms
    only (gb10.verdict); elsewhere vLLM's error alone decides."""
    st = ctx.st
    if st.platform != "cuda" or not any(p.unified for p in ctx.profiles):
        return ("fits" if error is None else "does not fit"), None, None, ""
    if error is not None and error.startswith(("User-specified max_model_len", "max_num_seqs")):
        return "does not fit", None, None, "vLLM's configuration check"
    g = gb10.terms_for(ctx.vr.version)
    margin = min((pool - lay.needed_bytes()) / GIB for pool, lay in zip(pools, layouts, strict=True))
    band = g.pool_band_gib
    result, reason = gb10.verdict(margin, band), "the KV pool"
    graphs_subtracted = not st.eager and ctx.vr.subtracts_cudagraphs(st.runner)
    if graphs_subtracted and ctx.deployment.recipe.serve.speculative is not None and result != "does not fit":
        result, reason = "too close to call", "the CUDA-graph estimate with speculative decoding on unified memory"
    check = free_check(ctx, ranks)
    if check is not None and check.requested > check.high + 1e-9:
        return "does not fit", margin, band, "the startup free-memory check"
    if check is not None and check.requested > check.low + 1e-9 and result != "does not fit":
        reason = f"{reason} and the startup free-memory check" if result == "too close to call" \
            else "the startup free-memory check"
        result = "too close to call"
    return result, margin, band, reason


def allow_long(deployment: Deployment) -> bool:
    """vLLM's envs.VLLM_ALLOW_LONG_MAX_MODEL_LEN ("1" or "true") where the engine's ModelConfig is built: the
    first node (the API server's), with its env over the recipe's."""
    env = {**deployment.recipe.env, **deployment.nodes[0].env}
    return env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0").strip().lower() in ("1", "true")


def above_model_len(spec: ModelSpec, asked: int | None) -> bool:
    """A requested max_model_len vLLM refuses without VLLM_ALLOW_LONG_MAX_MODEL_LEN (above the derived length and
    above the config's model_max_length, when it has one)."""
    derived = spec.derived_max_len
    if asked is None or derived is None or asked <= derived:
        return False
    return spec.model_max_length is None or asked > spec.model_max_length


def max_len_error(ctx: Context) -> str | None:
    """vLLM's config check (config/model.py _get_and_verify_max_len @0.26), in its words: a user max_model_len
    above the length derived from the model's config is refused unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is set."""
    spec, asked = ctx.spec, ctx.deployment.recipe.serve.max_model_len
    if not above_model_len(spec, asked) or allow_long(ctx.deployment):
        return None
    return (f"User-specified max_model_len ({asked}) is greater than the derived max_model_len "
            f"({spec.max_len_key}={spec.derived_max_len_text} or model_max_length={spec.model_max_length} in "
            "model's config.json). To allow overriding this maximum, set the env var "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the "
            "model uses relative position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. If "
            "the model uses absolute position encoding, positions exceeding derived_max_model_len will cause a CUDA "
            "array out-of-bounds error.")


def startup_error(ctx: Context, ranks: list[RankPlan], layouts: list[KvLayout], pools: list[int],
                  largest: int) -> str | None:
    """The first error vLLM would raise at startup, in vLLM's words, or None."""
    long_error = max_len_error(ctx)
    if long_error:
        return long_error
    if ctx.st.platform == "cuda":
        free_error = _free_memory_error(ctx, ranks)
        if free_error:
            return free_error
    worst = min(range(len(ranks)), key=lambda i: pools[i] - layouts[i].needed_bytes())
    if pools[worst] <= 0:
        return ("No available memory for the cache blocks "
                f"(rank {worst} on {ranks[worst].host}: {pools[worst] / GIB:.2f} GiB). "
                "Try increasing gpu_memory_utilization when initializing the engine.")
    need = layouts[worst].needed_bytes()
    if ctx.vr.kv_fit_check == "global_min" and ctx.st.pp > 1:
        need = sum(lay.needed_bytes() for lay in layouts[:: ctx.st.tp][: ctx.st.pp])
        worst = min(range(len(ranks)), key=lambda i: pools[i])
    if need > pools[worst]:
        return (f"To serve at least one request with the models's max seq len ({ctx.st.max_model_len}), "
                f"({need / GIB:.2f} GiB KV cache is needed, which is larger than the available KV cache "
                f"memory ({pools[worst] / GIB:.2f} GiB). Based on the available memory, the estimated maximum model "
                f"length is {largest}. Try increasing gpu_memory_utilization or decreasing max_model_len when "
                "initializing the engine.")
    return _mamba_graph_error(ctx, layouts, pools)


def _mamba_graph_error(ctx: Context, layouts: list[KvLayout], pools: list[int]) -> str | None:
    """vLLM 0.20+ (config/compilation.py resolve_cudagraph_mode_and_sizes): with FULL decode graphs, a model with
    Mamba-like layers (GDN, Mamba-2, KDA) needs one cache block per decoding sequence, so max_num_seqs above the
    worker's cache blocks stops the start after the pool is sized."""
    st = ctx.st
    if ctx.vr.mamba_full_graph_blocks != "error" or st.platform != "cuda" or st.eager:
        return None
    blocks = [lay.num_blocks(pool) for lay, pool in zip(layouts, pools, strict=True)
              if any(b.spec.kind == "mamba" for b in lay.buckets)]
    if not blocks or st.seqs <= min(blocks):
        return None
    fewest = min(blocks)
    return (f"max_num_seqs ({st.seqs}) exceeds available Mamba cache blocks ({fewest}). Each decode sequence "
            "requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at "
            f"most {fewest} or increase gpu_memory_utilization.")

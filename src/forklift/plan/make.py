"""``make(recipe) -> Plan``: per-rank memory, KV capacity, max context, speed bounds and advice."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from forklift.errors import HardwareError, PlanError
from forklift.hardware.detect import local_amx
from forklift.hardware.profiles import HardwareProfile, NetworkProfile
from forklift.hardware.profiles import get as get_profile
from forklift.hardware.profiles import network as get_network
from forklift.model.load import SpecSource, spec_for
from forklift.model.quant import online_scheme
from forklift.model.spec import ModelSpec
from forklift.plan import calibrate, rules
from forklift.plan import memory as mem
from forklift.plan.files import model_files
from forklift.plan.model import Advice, Plan, RankPlan
from forklift.plan.roofline import StageCost, compute
from forklift.recipe.load import apply_overrides, validate
from forklift.recipe.schema import Recipe

GIB = mem.GIB
_MTP_METHODS = ("mtp",)


@dataclass(frozen=True)
class _Settings:
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


def _profiles_for(recipe: Recipe, world: int) -> tuple[list[HardwareProfile], list[int], int]:
    """Hardware profile per node, node index per rank, GPUs used per node."""
    nodes = recipe.nodes
    profiles = [get_profile(n.hardware) for n in nodes]
    profiles = [p.model_copy(update={"amx": local_amx()}) if p.kind == "cpu" and n.is_local else p
                for p, n in zip(profiles, nodes, strict=True)]
    if world % len(nodes):
        raise PlanError(
            f"tp x pp = {world} ranks cannot be spread evenly over {len(nodes)} nodes",
            fix="Make tp x pp a multiple of the number of nodes (usually pp = nodes, tp = GPUs per node).",
        )
    per_node = world // len(nodes)
    for node, prof in zip(nodes, profiles, strict=True):
        if prof.kind == "cuda" and per_node > prof.gpus:
            raise PlanError(
                f"node {node.host} ({prof.name}) has {prof.gpus} GPU(s) but the layout puts {per_node} ranks on it",
                fix=f"Add nodes or lower tp x pp to {prof.gpus * len(nodes)}.",
            )
    kinds = {p.kind for p in profiles}
    if len(kinds) > 1:
        raise HardwareError("the recipe mixes CPU and GPU nodes", fix="Use one kind of hardware for every node.")
    return profiles, [r // per_node for r in range(world)], per_node


def _settings(recipe: Recipe, spec: ModelSpec, profiles: list[HardwareProfile], vr: rules.VersionRules) -> _Settings:
    s, par = recipe.serve, recipe.parallel
    first = profiles[0]
    platform = first.kind
    d_mnbt, d_seqs = rules.batch_defaults(platform, min(p.memory_gib for p in profiles))
    util = None if platform == "cpu" else (s.gpu_memory_utilization or vr.gpu_memory_utilization)
    dtype_bytes = {"bfloat16": 2, "float16": 2, "float32": 4}.get(s.dtype, spec.dtype_bytes)
    blocks = rules.block_sizes()
    if platform == "cpu":
        block = blocks["cpu_mla_without_amx"] if spec.mla is not None and not first.amx else (s.block_size
                                                                                             or blocks["cpu"])
    elif spec.indexer is not None:
        block = blocks["cuda_sparse_mla"]
    else:
        block = s.block_size or blocks["cuda"]
    if par.pp_layer_partition is not None:
        if sum(par.pp_layer_partition) != spec.num_layers:
            raise PlanError(
                f"parallel.pp_layer_partition sums to {sum(par.pp_layer_partition)} but the model has "
                f"{spec.num_layers} layers (vLLM raises the same; MTP layers do not count)",
                fix=f"Make the entries sum to {spec.num_layers}.",
            )
        partition = list(par.pp_layer_partition)
    else:
        partition = mem.pp_partition(spec.num_layers, par.pp)
    include_mtp = s.speculative is not None and s.speculative.method in _MTP_METHODS
    return _Settings(
        platform=platform, util=util, mnbt=s.max_num_batched_tokens or d_mnbt, seqs=s.max_num_seqs or d_seqs,
        max_model_len=s.max_model_len or spec.max_position_embeddings,
        kv_dtype=s.kv_cache_dtype, dtype_bytes=dtype_bytes, block=block, tp=par.tp, pp=par.pp, dcp=par.dcp,
        eager=s.enforce_eager or platform == "cpu", include_mtp=include_mtp, partition=partition,
    )


def _kv_dtype_name(kv_dtype: str, dtype_bytes: int, spec: ModelSpec) -> str:
    if kv_dtype.startswith("fp8"):
        return "fp8_ds_mla" if spec.indexer is not None else kv_dtype
    return {2: "bfloat16", 4: "float32"}.get(dtype_bytes, "bfloat16") if kv_dtype == "auto" else kv_dtype


@dataclass(frozen=True)
class _Core:
    """Everything make() computes before roofline and advice (cheap to recompute for advice)."""

    ranks: list[RankPlan]
    layouts: list[mem.KvLayout]
    pools: list[int]
    num_blocks: int
    kv_tokens: int
    max_conc: float
    largest_len: int
    fits: bool
    error: str | None
    notes: list[str]
    calibrated: bool
    table: mem.WeightTable
    ranges: list[tuple[int, int]]
    node_of_rank: list[int]
    profiles: list[HardwareProfile]
    settings: _Settings


def _core(recipe: Recipe, src: SpecSource, vr: rules.VersionRules, *, use_calibration: bool = True) -> _Core:
    spec = src.spec
    par = recipe.parallel
    mem.check_parallel(spec, par.tp, par.pp, par.dcp)
    world = par.tp * par.pp
    profiles, node_of_rank, _ = _profiles_for(recipe, world)
    st = _settings(recipe, spec, profiles, vr)
    ranges = mem.stage_layers(st.partition)
    notes: list[str] = []
    base = {2: "bf16", 4: "fp32"}.get(st.dtype_bytes, "bf16")
    quant = online_scheme(recipe.serve.quantization, spec.quant)
    table = mem.weight_table(spec, quant, base, st.tp, st.pp, include_mtp=st.include_mtp)
    stored: list[float] | None = None
    if recipe.model.load_format != "dummy" and src.checkpoint_dir is not None and quant is spec.quant:
        stored = mem.checkpoint_stage_bytes(spec, src.checkpoint_dir, ranges, st.tp, include_mtp=st.include_mtp)
    moe = spec.moe is not None
    subtract_cg = st.platform == "cuda" and not st.eager and vr.subtracts_cudagraphs(moe)
    cal = None
    if use_calibration and st.platform == "cuda":
        cal = calibrate.lookup(calibrate.key_for(spec, tp=st.tp, pp=st.pp, mnbt=st.mnbt, max_num_seqs=st.seqs,
                                                 eager=st.eager))
    ranks: list[RankPlan] = []
    layouts: list[mem.KvLayout] = []
    pools: list[int] = []
    cpu_pool = int((recipe.serve.cpu_kv_cache_gib or rules.estimate()["cpu_kv_default_gib"]) * GIB)
    for r in range(world):
        stage, tp_rank = divmod(r, st.tp)
        start, end = ranges[stage]
        first, last = stage == 0, stage == st.pp - 1
        node = recipe.nodes[node_of_rank[r]]
        prof = profiles[node_of_rank[r]]
        weights = stored[stage] if stored is not None else table.stage(start, end, first, last)
        act = mem.activation_bytes(spec, start, end, tp=st.tp, mnbt=st.mnbt, max_num_seqs=st.seqs, last_stage=last,
                                   dtype_bytes=st.dtype_bytes)
        non_torch = mem.non_torch_bytes(st.tp, st.pp)
        cg, _ = mem.cudagraph_bytes(st.seqs, st.mnbt) if (st.platform == "cuda" and not st.eager) else (0.0, 0)
        cg_sub = subtract_cg
        if cal is not None:
            act = cal.per_stage_activation.get(stage, cal.activation_gib) * GIB
            non_torch = cal.non_torch_gib * GIB
            cg = cal.cudagraph_gib * GIB
            cg_sub = cal.cudagraph_subtracted
        total = prof.memory_gib * GIB
        if st.platform == "cpu":
            requested = float(cpu_pool)
            pool = cpu_pool
        else:
            assert st.util is not None
            requested = total * st.util
            pool = int(requested - weights - act - non_torch - (cg if cg_sub else 0.0))
        layout = mem.kv_layout(spec, start, end, tp=st.tp, kv_cache_dtype=st.kv_dtype, dtype_bytes=st.dtype_bytes)
        nb = mem.num_blocks(pool, layout, st.block)
        need = mem.kv_needed_bytes(layout, st.max_model_len, st.block, st.dcp, spec.sliding_window, st.mnbt)
        ranks.append(RankPlan(
            rank=r, host=node.host, hardware=prof.name, pp_stage=stage, tp_rank=tp_rank, layers=end - start,
            layer_start=start, layer_end=end, total_gib=round(prof.memory_gib, 2),
            requested_gib=mem.round_gib(requested),
            weights_gib=mem.round_gib(weights), activation_gib=mem.round_gib(act), cudagraph_gib=mem.round_gib(cg),
            cudagraph_subtracted=cg_sub, non_torch_gib=mem.round_gib(non_torch), kv_pool_gib=mem.round_gib(pool),
            kv_bytes_per_token=layout.bytes_per_token, num_blocks=nb, kv_needed_gib=mem.round_gib(need),
        ))
        layouts.append(layout)
        pools.append(pool)
    n_blocks = min(r.num_blocks for r in ranks)
    lay0 = layouts[0]
    kv_tokens = (n_blocks // lay0.n_groups) * st.block * st.dcp
    per_req = mem.blocks_per_request(lay0, st.max_model_len, st.block, st.dcp, spec.sliding_window, st.mnbt)
    max_conc = n_blocks / per_req if per_req else 0.0
    largest = mem.largest_fitting_len(layouts, pools, max(st.max_model_len, spec.max_position_embeddings), st.block,
                                      st.dcp, spec.sliding_window, st.mnbt)
    error = _startup_error(recipe, st, ranks, profiles, node_of_rank, largest)
    if cal is not None:
        notes.append(f"activation, non-torch and CUDA-graph terms come from calibration {cal.key} "
                     f"(log {cal.source_log}), not from the estimator")
    return _Core(ranks, layouts, pools, n_blocks, kv_tokens, max_conc, largest, error is None, error, notes,
                 cal is not None, table, ranges, node_of_rank, profiles, st)


def _startup_error(recipe: Recipe, st: _Settings, ranks: list[RankPlan], profiles: list[HardwareProfile],
                   node_of_rank: list[int], largest: int) -> str | None:
    """The first error vLLM would raise at startup, in vLLM's words, or None."""
    if st.platform == "cuda":
        context = float(rules.estimate().get("cuda_context_gib", 0.5))
        for rank in ranks:
            prof = profiles[node_of_rank[rank.rank]]
            free = prof.available_gib if prof.unified and prof.available_gib else prof.memory_gib - context
            if rank.requested_gib > free:
                return (f"Free memory on device {rank.host} ({free:.2f}/{prof.memory_gib:.2f} GiB) on startup is less "
                        f"than desired GPU memory utilization ({st.util}, {rank.requested_gib:.2f} GiB). "
                        "Decrease GPU memory utilization or reduce GPU memory used by other processes.")
    worst = min(ranks, key=lambda r: r.kv_pool_gib - r.kv_needed_gib)
    if worst.kv_pool_gib <= 0:
        return ("No available memory for the cache blocks "
                f"(rank {worst.rank} on {worst.host}: {worst.kv_pool_gib:.2f} GiB). "
                "Try increasing gpu_memory_utilization when initializing the engine.")
    if worst.kv_needed_gib > worst.kv_pool_gib:
        return (f"To serve at least one request with the models's max seq len ({st.max_model_len}), "
                f"({worst.kv_needed_gib:.2f} GiB KV cache is needed, which is larger than the available KV cache "
                f"memory ({worst.kv_pool_gib:.2f} GiB). Based on the available memory, the estimated maximum model "
                f"length is {largest}. Try increasing gpu_memory_utilization or decreasing max_model_len when "
                "initializing the engine.")
    return None


# ------------------------------------------------------------------------------------------------ notes


def _notes(recipe: Recipe, src: SpecSource, vr: rules.VersionRules, core: _Core, suggested: list[int] | None,
           stage_weights: list[float]) -> list[str]:
    spec, st = src.spec, core.settings
    notes = [f"config from {src.origin}; weights from "
             + ("safetensors headers" if (recipe.model.load_format != "dummy" and src.checkpoint_dir
                                          and any(src.checkpoint_dir.glob("*.safetensors")))
                else f"parameter counts x storage format ({spec.quant.method}: {spec.quant.linear_format})")]
    if spec.mtp_layers and not st.include_mtp:
        notes.append(f"{spec.mtp_layers} MTP layer(s) not loaded (no MTP speculative decoding); "
                     f"PP splits {spec.num_layers} decoder layers")
    if st.platform == "cuda":
        runner = vr.runner(spec.moe is not None)
        notes.append(f"vLLM {vr.version} (rules '{vr.matched}'): {runner.upper()} model runner; CUDA-graph estimate "
                     + ("subtracted before sizing the KV pool" if core.ranks[0].cudagraph_subtracted else
                        "not subtracted" + (" (enforce_eager)" if st.eager else "")))
        if not core.calibrated:
            notes.append("activation peak, non-torch and CUDA-graph terms are estimates; "
                         "`forklift plan RECIPE --calibrate LOG` makes them exact for this model and settings")
        if any(p.unified for p in core.profiles):
            notes.append("unified memory: vLLM's startup check compares the request with MemAvailable; "
                         "host processes and page cache share the same memory (drop caches before launch)")
    else:
        notes.append(f"vLLM-CPU: the KV pool is VLLM_CPU_KVCACHE_SPACE = {core.ranks[0].requested_gib:g} GiB per "
                     f"worker; block size {st.block}")
    if spec.attention == "mla" and st.tp > 1:
        notes.append(f"MLA KV is not split by TP: each of the {st.tp} TP ranks stores the full latent cache"
                     + ("" if st.dcp > 1 else f"; parallel.dcp up to {st.tp} divides it"))
    if spec.attention == "gqa" and st.tp > spec.num_kv_heads:
        notes.append(f"tp={st.tp} exceeds the {spec.num_kv_heads} KV heads: KV is duplicated "
                     f"{st.tp // spec.num_kv_heads}x; parallel.dcp up to {st.tp // spec.num_kv_heads} divides it")
    if st.dcp > 1:
        notes.append(f"DCP={st.dcp}: each rank stores 1/{st.dcp} of every request's tokens; KV tokens are multiplied "
                     f"by {st.dcp}")
    if recipe.serve.extra_args:
        notes.append(f"serve.extra_args {recipe.serve.extra_args} are not modelled by the planner")
    if st.pp > 1 and suggested:
        notes.append(f"stages differ in memory ({', '.join(f'{w / GIB:.1f}' for w in stage_weights)} GiB of "
                     f"weights): VLLM_PP_LAYER_PARTITION={','.join(map(str, suggested))} balances them "
                     "(set parallel.pp_layer_partition)")
    return notes


def _claim_notes(recipe: Recipe, spec: ModelSpec, plan_partition: list[int], weights: list[float],
                 single: float, critical_gb: float, bw: float) -> list[str]:
    claim = rules.claims().get(recipe.name or "")
    if not claim:
        return []
    out: list[str] = []
    src = claim.get("source", "published figures")
    layers = claim.get("layers")
    if layers and list(layers) != plan_partition:
        extra = ""
        if sum(layers) != spec.num_layers:
            extra = (f"; {'/'.join(map(str, layers))} sums to {sum(layers)}, not the model's {spec.num_layers} "
                     f"decoder layers" + (" (the MTP layer was counted as a decoder layer); vLLM would reject it as "
                                          "VLLM_PP_LAYER_PARTITION" if spec.mtp_layers and sum(layers) ==
                                          spec.num_layers + spec.mtp_layers else ""))
        out.append(f"{src} states layers {'/'.join(map(str, layers))}; vLLM's get_pp_indices splits "
                   f"{spec.num_layers} layers as {'/'.join(map(str, plan_partition))}{extra}")
    claimed_w = claim.get("weights_gib")
    if claimed_w:
        ours = "/".join(f"{w / GIB:.1f}" for w in weights)
        out.append(f"{src} states weights {'/'.join(str(x) for x in claimed_w)} GiB per node; planned {ours} GiB")
    tok = claim.get("decode_tok_s")
    if tok:
        out.append(
            f"{src} states a decode roofline of {tok} tok/s ({claim.get('decode_basis', '')}); from first principles "
            f"one token reads {critical_gb:.1f} GB on the critical path (top-k routed experts + all non-routed "
            f"weights + lm_head, PP stages in sequence), so a single stream is bounded by {single:.1f} tok/s at "
            f"{bw:g} GB/s. The published figure's byte count is smaller than the routed experts alone; it matches "
            "a TP=2 per-node figure for a 4-bit GLM-4.7, not this PP=3 deployment" if tok > single * 1.5 else
            f"{src} states {tok} tok/s decode; planned roofline {single:.1f} tok/s")
    return out


# ------------------------------------------------------------------------------------------------ balance


def _balanced_partition(core: _Core, spec: ModelSpec) -> list[int] | None:
    st = core.settings
    if st.pp < 2 or st.platform != "cuda":
        return None
    table = core.table
    act = [r.activation_gib * GIB for r in core.ranks[:: st.tp]]

    def stage_cost(parts: list[int]) -> float:
        rngs = mem.stage_layers(parts)
        return max(table.stage(a, b, i == 0, i == st.pp - 1) + act[i] for i, (a, b) in enumerate(rngs))

    current = stage_cost(st.partition)
    base = st.partition
    best, best_cost = base, current
    spread = range(-3, 4)
    for deltas in itertools.product(spread, repeat=st.pp - 1):
        parts = [base[i] + deltas[i] for i in range(st.pp - 1)]
        parts.append(spec.num_layers - sum(parts))
        if min(parts) < 1:
            continue
        cost = stage_cost(parts)
        if cost < best_cost - 1e-6:
            best, best_cost = parts, cost
    if best is base or current - best_cost < 0.01 * current:
        return None
    return best


# ------------------------------------------------------------------------------------------------ advice


def _replan(recipe: Recipe, src: SpecSource, vr: rules.VersionRules, sets: list[str]) -> _Core | None:
    data = apply_overrides(recipe.model_dump(mode="json", exclude_none=True), sets)
    try:
        return _core(validate(data, recipe.name or "<recipe>"), src, vr)
    except PlanError:
        return None


def _advice(recipe: Recipe, src: SpecSource, vr: rules.VersionRules, core: _Core) -> list[Advice]:
    if core.fits:
        return []
    spec, st = src.spec, core.settings
    candidates: list[tuple[str, list[str]]] = []
    if st.mnbt > 8192 or st.seqs > 8:
        candidates.append(("batch limits: the profile run sizes activations off these",
                           ["serve.max_num_batched_tokens=" + str(min(st.mnbt, 8192)), "serve.max_num_seqs=8"]))
    if st.platform == "cuda" and st.util is not None:
        ceiling = 0.95
        for p in core.profiles:
            if p.unified and p.available_gib:
                ceiling = min(ceiling, int(p.available_gib / p.memory_gib * 100) / 100)
        if ceiling > st.util + 0.005:
            candidates.append((f"gpu_memory_utilization {st.util} -> {ceiling} (the most the startup check allows)",
                               [f"serve.gpu_memory_utilization={ceiling}"]))
        elif ceiling < st.util:
            candidates.append((f"gpu_memory_utilization {st.util} -> {ceiling}: the startup check needs the request "
                               "to fit in free memory", [f"serve.gpu_memory_utilization={ceiling}"]))
    if not st.kv_dtype.startswith("fp8"):
        candidates.append(("fp8 KV cache (halves KV bytes per token)", ["serve.kv_cache_dtype=fp8"]))
    if st.platform == "cuda" and not st.eager:
        candidates.append(("enforce-eager: no CUDA graphs (slower decode)", ["serve.enforce_eager=true"]))
    ladder: list[tuple[int, Advice]] = []
    base_pool = min(core.pools)
    for action, sets in candidates:
        alt = _replan(recipe, src, vr, sets)
        if alt is None:
            continue
        gain = min(alt.pools) - base_pool
        if alt.kv_tokens <= core.kv_tokens and not alt.fits:
            continue
        ladder.append((alt.kv_tokens, Advice(action=action, set=sets, effect=f"KV pool {gain / GIB:+.2f} GiB per rank; "
                                    f"{alt.kv_tokens:,} KV tokens" + ("; fits" if alt.fits else "; still short"),
                                    kv_pool_gib=mem.round_gib(min(alt.pools)), kv_tokens=alt.kv_tokens,
                                    fits=alt.fits)))
    ladder.sort(key=lambda item: -item[0])
    out = [a for _, a in ladder]
    if 0 < core.largest_len < st.max_model_len:
        sets = [f"serve.max_model_len={core.largest_len}"]
        alt = _replan(recipe, src, vr, sets)
        if alt is not None:
            out.append(Advice(action=f"shorter context: max_model_len {st.max_model_len} -> {core.largest_len}",
                              set=sets, effect=f"fits one {core.largest_len}-token request",
                              kv_pool_gib=mem.round_gib(min(alt.pools)), kv_tokens=alt.kv_tokens, fits=alt.fits))
    if spec.attention == "mla" and st.tp > 1 and st.dcp == 1:
        sets = [f"parallel.dcp={st.tp}"]
        alt = _replan(recipe, src, vr, sets)
        if alt is not None:
            out.append(Advice(action=f"DCP={st.tp}: split stored tokens over the TP ranks", set=sets,
                              effect=f"{alt.kv_tokens:,} KV tokens", kv_pool_gib=mem.round_gib(min(alt.pools)),
                              kv_tokens=alt.kv_tokens, fits=alt.fits))
    last = recipe.nodes[-1]
    sets = [f"parallel.pp={st.pp + 1}"]
    data = recipe.model_dump(mode="json", exclude_none=True)
    data["nodes"] = [*data["nodes"], {**last.model_dump(mode="json", exclude_none=True),
                                      "host": f"{last.host}-extra", "ssh": None}]
    data = apply_overrides(data, sets)
    data["parallel"].pop("pp_layer_partition", None)
    try:
        alt = _core(validate(data, recipe.name or "<recipe>"), src, vr)
    except PlanError:
        alt = None
    if alt is not None:
        out.append(Advice(action=f"one more {last.hardware} node as another PP stage (pp={st.pp + 1})",
                          set=[*sets, "nodes+=1"], effect=f"KV pool {min(alt.pools) / GIB:.2f} GiB per rank; "
                          f"{alt.kv_tokens:,} KV tokens", kv_pool_gib=mem.round_gib(min(alt.pools)),
                          kv_tokens=alt.kv_tokens, fits=alt.fits))
    return out


# ------------------------------------------------------------------------------------------------ make


def make(recipe: Recipe, *, vllm_version: str | None = None, source: SpecSource | None = None) -> Plan:
    """Plan a recipe: vLLM's memory arithmetic per rank, KV capacity, roofline and advice. Pure; no GPU.

    Does not raise when the model does not fit: ``plan.fits`` is False and ``plan.error`` holds vLLM's
    message. Raises PlanError / HardwareError / ModelError for layouts vLLM would reject outright.
    """
    src = source or spec_for(recipe.model)
    spec = src.spec
    vr = rules.rules_for(vllm_version)
    core = _core(recipe, src, vr)
    st = core.settings
    suggested = _balanced_partition(core, spec)
    stage_w = [r.weights_gib * GIB for r in core.ranks[:: st.tp]]
    net: NetworkProfile = get_network(recipe.network.profile)
    if len(recipe.nodes) == 1:
        net = get_network("nvlink" if st.platform == "cuda" else "loopback")
    stages = []
    for stage, (a, b) in enumerate(core.ranges):
        rank = core.ranks[stage * st.tp]
        prof = core.profiles[core.node_of_rank[stage * st.tp]]
        last = stage == st.pp - 1
        stages.append(StageCost(
            active_bytes=core.table.stage_active(a, b, last), expert_bytes=sum(core.table.expert_bytes[a:b]),
            active_params=core.table.stage_params_active(a, b, last), kv_bytes_per_token=rank.kv_bytes_per_token,
            layers=b - a, hardware=prof))
    per_node = (st.tp * st.pp) // len(recipe.nodes)
    context = min(st.max_model_len, 4096)
    concurrency = max(1, min(st.seqs, int(core.max_conc)))
    fmt = "fp8" if spec.quant.linear_format.startswith("fp8") or recipe.serve.quantization == "fp8" else "bf16"
    roof = compute(spec, stages, tp=st.tp, tp_over_network=per_node < st.tp, pp=st.pp, network=net,
                   concurrency=concurrency, context=context, compute_format=fmt)
    notes = [*_notes(recipe, src, vr, core, suggested, stage_w), *core.notes]
    notes.append(f"decode roofline {roof.decode_tok_s_single:.1f} tok/s (single stream, {context}-token context); "
                 f"measured engines typically reach ~{rules.estimate()['decode_efficiency']:.0%} of it")
    notes += _claim_notes(recipe, spec, st.partition, stage_w, roof.decode_tok_s_single, roof.critical_path_gb,
                          core.profiles[0].bandwidth_gbs)
    node_ranges = [sorted({(r.layer_start, r.layer_end) for r in core.ranks if core.node_of_rank[r.rank] == n})
                   for n in range(len(recipe.nodes))]
    files, file_notes = model_files(src.checkpoint_dir, [n.host for n in recipe.nodes], node_ranges,
                                    origin=src.origin)
    notes += file_notes
    weights_total = sum(r.weights_gib for r in core.ranks)
    return Plan(
        model=spec.name, architecture=spec.architecture, config_origin=src.origin, recipe=recipe.name,
        vllm_version=vr.version if st.platform == "cuda" else "cpu", platform=st.platform, fits=core.fits,
        error=core.error, kv_tokens=core.kv_tokens, num_blocks=core.num_blocks, block_size=st.block,
        max_model_len=st.max_model_len, largest_max_model_len=core.largest_len,
        max_concurrency=round(core.max_conc, 2), kv_cache_dtype=_kv_dtype_name(st.kv_dtype, st.dtype_bytes, spec),
        gpu_memory_utilization=st.util, max_num_batched_tokens=st.mnbt, max_num_seqs=st.seqs, tp=st.tp, pp=st.pp,
        dcp=st.dcp, pp_partition=st.partition, suggested_pp_partition=suggested,
        weights_total_gib=round(weights_total, 2), params_b=round(spec.param_count() / 1e9, 2),
        calibrated=core.calibrated, ranks=core.ranks, roofline=roof, advice=_advice(recipe, src, vr, core),
        model_files=files, notes=notes,
    )


def calibrate_from_log(recipe: Recipe, log_path: Any, *, vllm_version: str | None = None) -> calibrate.Calibration:
    """Store the model-specific terms of ``log_path`` for this recipe's model and settings."""
    from pathlib import Path

    src = spec_for(recipe.model)
    spec = src.spec
    vr = rules.rules_for(vllm_version)
    world = recipe.parallel.tp * recipe.parallel.pp
    profiles, _, _ = _profiles_for(recipe, world)
    st = _settings(recipe, spec, profiles, vr)
    key = calibrate.key_for(spec, tp=st.tp, pp=st.pp, mnbt=st.mnbt, max_num_seqs=st.seqs, eager=st.eager)
    return calibrate.store(key, Path(log_path))

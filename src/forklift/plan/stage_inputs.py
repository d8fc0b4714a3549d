"""What a stage's memory accounting reads: the profile run's batch and MoE kernel, the stage's KV layout, the
weight table and the experts a rank holds, a speculative draft's cost, the unified-memory watermarks and the
bytes a rank requests.
"""

from __future__ import annotations

import math

from forklift.model.quant import online_scheme
from forklift.plan import encoder, gb10, kvspecs, quant_rules, rules, terms
from forklift.plan import weights as mem
from forklift.plan.context import Context
from forklift.plan.kvcache import KvLayout, LayerKv
from forklift.plan.kvcache import layout as kv_layout
from forklift.plan.weights import GIB
from forklift.speculative import sizing


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


def encoder_profile(ctx: Context) -> encoder.EncoderProfile:
    st = ctx.st
    return encoder.profile(ctx.spec.vision, ctx.deployment.recipe.serve.multimodal, mnbt=st.mnbt, seqs=st.seqs,
                           max_model_len=st.max_model_len, tp=st.tp, dtype_bytes=st.dtype_bytes)


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

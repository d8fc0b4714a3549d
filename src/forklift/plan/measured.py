"""What was measured for this plan: the settings and hardware a probe is keyed by, the closest stored probe
(``forklift probe``) and the calibration from a start log."""

from __future__ import annotations

from forklift.plan import calibrate, probes, rules
from forklift.plan.context import Context


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


def calibration_for(ctx: Context) -> calibrate.Calibration | None:
    st = ctx.st
    if st.platform != "cuda":
        return None
    return calibrate.lookup(calibrate.key_for(ctx.spec, tp=st.tp, pp=st.pp, mnbt=st.mnbt, max_num_seqs=st.seqs,
                                              eager=st.eager))

"""Per-layer-kind attention shapes (``attn_shapes`` in architectures.yaml): families whose sliding-window and full
attention layers have their own heads, KV heads and K / V head sizes, read from the vLLM 0.32.0 model code cited
in each rule; and the config features of those families the planner refuses, each naming the missing piece."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from forklift.errors import UnknownArchitectureError
from forklift.model.configjson import Cfg, lookup, need_int
from forklift.model.spec import AttnShape


def _mimo_v2(cfg: Cfg, ctx: tuple[str, str]) -> tuple[AttnShape, ...]:
    """mimo_v2.py MiMoV2FlashDecoderLayer.__init__: sliding layers (hybrid_layer_pattern[i] == 1) take
    swa_num_attention_heads / swa_num_key_value_heads / swa_head_dim / swa_v_head_dim (V defaults to the K head
    size when absent) and an attention-sink bias when add_swa_attention_sink_bias; full layers num_attention_heads /
    num_key_value_heads / head_dim / v_head_dim. MiMoV2Attention passes head_size_v to Attention, so the cache holds
    K and V rows of their own sizes (AttentionSpec.state_content_size_bytes)."""
    head = need_int(cfg, "head_dim", ctx)
    swa_head = need_int(cfg, "swa_head_dim", ctx)
    return (
        AttnShape(mixer="attention", heads=need_int(cfg, "num_attention_heads", ctx),
                  kv_heads=need_int(cfg, "num_key_value_heads", ctx), head_dim=head,
                  v_head_dim=int(cfg.get("v_head_dim") or head)),
        AttnShape(mixer="sliding", heads=need_int(cfg, "swa_num_attention_heads", ctx),
                  kv_heads=need_int(cfg, "swa_num_key_value_heads", ctx), head_dim=swa_head,
                  v_head_dim=int(cfg.get("swa_v_head_dim") or swa_head),
                  sinks=bool(cfg.get("add_swa_attention_sink_bias"))),
    )


def _gemma4(cfg: Cfg, ctx: tuple[str, str]) -> tuple[AttnShape, ...]:
    """gemma4.py Gemma4DecoderLayer.__init__ reads config.per_layer_config[i].head_dim / num_key_value_heads, which
    transformers Gemma4TextConfig.__post_init__ fills for full_attention layers with global_head_dim (default 512)
    and, when attention_k_eq_v, num_global_key_value_heads; sliding layers keep head_dim / num_key_value_heads.
    K = V layers still allocate both cache rows (Gemma4Attention: Attention without head_size_v; the K weights are
    loaded into both the K and V slots of qkv_proj), so V's head size is K's."""
    heads = need_int(cfg, "num_attention_heads", ctx)
    kv = need_int(cfg, "num_key_value_heads", ctx)
    head = need_int(cfg, "head_dim", ctx)
    glob = int(cfg.get("global_head_dim") or 512)
    glob_kv = cfg.get("num_global_key_value_heads") if cfg.get("attention_k_eq_v") else None
    full_kv = int(glob_kv) if glob_kv is not None else kv
    return (AttnShape(mixer="attention", heads=heads, kv_heads=full_kv, head_dim=glob, v_head_dim=glob),
            AttnShape(mixer="sliding", heads=heads, kv_heads=kv, head_dim=head, v_head_dim=head))


SHAPE_RULES: dict[str, Callable[[Cfg, tuple[str, str]], tuple[AttnShape, ...]]] = {
    "mimo_v2": _mimo_v2, "gemma4": _gemma4,
}


def check_unmodelled(cfg: Cfg, fam: dict[str, Any], ctx: tuple[str, str]) -> None:
    """Refuse the config features a family entry lists under ``unmodelled`` ({key, value, reason}: refused when
    config[key] equals value, or with value ``nonzero`` when it is set and not 0 / false / null), naming the
    missing piece and where vLLM builds it."""
    source, arch = ctx
    for item in fam.get("unmodelled") or []:
        key, want = str(item["key"]), item["value"]
        got = lookup(cfg, key)
        hit = bool(got) if want == "nonzero" else got == want
        if hit:
            raise UnknownArchitectureError(
                f"{source}: {arch} with {key} = {got!r} is served by vLLM, but the planner does not model it: "
                f"{item['reason']}",
                fix="Plan without memory figures (render and up still work), or start it once with `forklift probe` "
                "and read vLLM's own 'Available KV cache memory' / 'KV cache size' lines.")


def layer_flags(cfg: Cfg, fam: dict[str, Any], n: int) -> tuple[set[int], set[int]]:
    """(layers that read an earlier layer's cache, layers whose MLP is twice as wide), for families with
    ``kv_sharing: gemma4``: gemma4.py Gemma4Attention.__init__ makes the last num_kv_shared_layers layers
    (i >= num_hidden_layers - num_kv_shared_layers) read the last earlier layer of their type
    (kv_sharing_target_layer_name; the runner gives them no KV cache spec: v1/worker/gpu_model_runner.py
    get_kv_cache_spec) and hold only q_proj / o_proj / q_norm; Gemma4DecoderLayer.__init__ doubles their MLP when
    use_double_wide_mlp."""
    if fam.get("kv_sharing") != "gemma4":
        return set(), set()
    shared_n = int(cfg.get("num_kv_shared_layers") or 0)
    first = n - shared_n
    shared = set(range(first, n)) if shared_n > 0 else set()
    wide = shared if cfg.get("use_double_wide_mlp") and first > 0 else set()
    return shared, wide


def per_layer_inputs(cfg: Cfg, fam: dict[str, Any]) -> dict[str, int]:
    """Gemma 4 per-layer embeddings (gemma4.py Gemma4Model.__init__, families with ``per_layer_input: true``):
    hidden_size_per_layer_input and vocab_size_per_layer_input (the vocab size when absent)."""
    if not fam.get("per_layer_input"):
        return {}
    width = int(cfg.get("hidden_size_per_layer_input") or 0)
    vocab = int(cfg.get("vocab_size_per_layer_input") or cfg.get("vocab_size") or 0)
    return {"per_layer_input": width, "per_layer_vocab": vocab if width else 0}

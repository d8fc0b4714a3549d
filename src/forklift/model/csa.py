"""DeepSeek-V4's compressed sparse MLA, read from config.json as vLLM 0.32.0 reads it (models/deepseek_v4/): the
per-layer compress ratio, the sliding window, the low-rank query / grouped output projections, the lightning
indexer, the hyper-connections and the hash-routed layers. The cache specs these give are in
forklift/plan/csakv.py, the weights in forklift/model/tensors.py."""

from __future__ import annotations

from forklift.errors import ModelError
from forklift.model.configjson import Cfg, as_number, need_int
from forklift.model.spec import CompressedMlaSpec, RopeCache

_RATIOS = (1, 4, 128)  # compressor.py CompressorStateCache.__init__: assert compress_ratio in [4, 128]
_HEAD_DIMS = (512,)  # cpu/cpu_compressor.py forward, compressor.py DeepseekCompressor.__init__ (the main cache)


def csa_spec(cfg: Cfg, n: int, ctx: tuple[str, str]) -> CompressedMlaSpec:
    """attention.py DeepseekV4Attention.__init__: compress_ratio = max(1, compress_ratios[layer]) for the decoder
    layers (an entry past num_hidden_layers belongs to the MTP layer), window = sliding_window; indexer on ratio-4
    layers only; cpu/model.py DeepseekV4MoE: hash routing where layer < num_hash_layers, an fp32
    e_score_correction_bias elsewhere when topk_method is noaux_tc."""
    source, arch = ctx
    raw = cfg.get("compress_ratios")
    if not (isinstance(raw, list) and len(raw) >= n):
        raise ModelError(f"{source}: {arch} needs compress_ratios with one entry per layer ({n})",
                         fix="Copy compress_ratios from the model's published config.json.")
    ratios = tuple(max(1, as_number(r, f"compress_ratios[{i}]", ctx, int)) for i, r in enumerate(raw[:n]))
    odd = sorted({r for r in ratios if r not in _RATIOS})
    if odd:
        raise ModelError(f"{source}: compress_ratios has {odd}; vLLM's compressor takes 4 or 128 (0 / 1: none)",
                         fix="Fix compress_ratios (vLLM's CompressorStateCache asserts compress_ratio in [4, 128]).")
    head = need_int(cfg, "head_dim", ctx)
    if head not in _HEAD_DIMS:
        raise ModelError(f"{source}: head_dim {head}; vLLM's DeepSeek-V4 compressor and fp8_ds_mla rows take 512",
                         fix="Use the published head_dim (512).")
    return CompressedMlaSpec(
        head_dim=head, rope_head_dim=need_int(cfg, "qk_rope_head_dim", ctx),
        q_lora_rank=need_int(cfg, "q_lora_rank", ctx), o_lora_rank=need_int(cfg, "o_lora_rank", ctx),
        o_groups=need_int(cfg, "o_groups", ctx), window=need_int(cfg, "sliding_window", ctx), ratios=ratios,
        index_n_heads=need_int(cfg, "index_n_heads", ctx), index_head_dim=need_int(cfg, "index_head_dim", ctx),
        index_topk=need_int(cfg, "index_topk", ctx), hc_mult=need_int(cfg, "hc_mult", ctx),
        num_hash_layers=as_number(cfg.get("num_hash_layers") or 0, "num_hash_layers", ctx, int),
        noaux_bias=cfg.get("topk_method") == "noaux_tc")


def csa_rope_caches(cfg: Cfg, csa: CompressedMlaSpec, ctx: tuple[str, str]) -> tuple[RopeCache, ...]:
    """common/rope.py build_deepseek_v4_rope -> rotary_embedding DeepseekV4ScalingRotaryEmbedding: an fp32 cos/sin
    buffer of original_max_position x factor rows x rope_dim, one per parameter set (get_rope's cache): the
    sliding-only layers' plain rope (factor 1 over max_position_embeddings, rope_theta) and, when a layer
    compresses, the compressed layers' (compress_rope_theta; the config's YaRN factor over its
    original_max_position_embeddings unless its rope_type is default)."""
    max_position = as_number(cfg.get("max_position_embeddings") or 1048576,  # DeepseekV4Config's default
                             "max_position_embeddings", ctx, int)
    caches = [RopeCache(mixers=("attention",), rows=max_position, width=csa.rope_head_dim, dtype_bytes=4)]
    if any(r > 1 for r in csa.ratios):
        key = "rope_scaling" if cfg.get("rope_scaling") else "rope_parameters"
        params = cfg.get(key) or {}
        if not isinstance(params, dict):
            raise ModelError(f"{ctx[0]}: {ctx[1]}'s config.json '{key}' must be an object (rope_type, factor, "
                             f"original_max_position_embeddings), got {params!r}",
                             fix=f"Fix '{key}' in config.json (copy it from the model's published config).")
        if isinstance(params.get("compress"), dict):
            key, params = f"{key}.compress", params["compress"]
        kind = str(params.get("rope_type") or params.get("type") or "default")
        original = params.get("original_max_position_embeddings") or max_position
        rows = max_position if kind == "default" else int(
            as_number(original, f"{key}.original_max_position_embeddings", ctx, int)
            * as_number(params.get("factor") or 1, f"{key}.factor", ctx, float))
        caches.append(RopeCache(mixers=("attention",), rows=rows, width=csa.rope_head_dim, dtype_bytes=4))
    return tuple(caches)

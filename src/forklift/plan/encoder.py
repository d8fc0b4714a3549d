"""The multimodal encoder's share of vLLM's profile run, from vLLM 0.26.0's code.

gpu_model_runner.py GPUModelRunner.profile_run: unless ``--skip-mm-profiling``, the encoder runs once on
``max_items_per_batch`` dummy items of the modality with the most tokens per item, and the outputs stay in the
encoder cache through the language model's dummy run (``encoder_cache.clear()`` after it). So the torch peak the
profile sees is the larger of the encoder's own forward peak and the language model's peak plus the held outputs.

multimodal/encoder_budget.py MultiModalBudget: budget = min(compute, cache) with both = max(max_num_batched_tokens,
tokens per item) (v1/core/encoder_cache_manager.py compute_mm_encoder_budget; SchedulerConfig's
max_num_encoder_input_tokens and encoder_cache_size default to max_num_batched_tokens); items per batch =
max(1, min(budget // tokens, max_num_seqs x max(1, min(limit, max_model_len // tokens)))).

Tokens per item: Qwen-ViT towers (qwen2_vl.py Qwen2VLProcessingInfo.get_image_size_with_most_features /
get_max_image_tokens): max_pixels // (patch x merge)^2 merged tokens, i.e. that many x merge^2 patches through the
tower, max_pixels from the image processor's size.longest_edge (Qwen3-VL / Qwen3.5 preprocessor_config.json:
16,777,216; Qwen2.5-VL: 12,845,056) or ``--mm-processor-kwargs max_pixels``. SigLIP (Gemma-3): one 896 px crop,
mm_tokens_per_image tokens (256) from (image_size / patch)^2 patches.

The tower's forward peak is an estimate from its block shapes, not a measured constant: the residual stream and
its norm output, the MLP's fc1 output and activation (qwen3_vl.py Qwen3_VisionBlock / Qwen3_VisionMLP), the
interpolated position embeddings (fast_pos_embed_interpolate), and the pixel values (fp32 from the processor, and
the model-dtype copy the patch embedding reads: Qwen3_VisionTransformer.forward ``x.to(dtype)``).
"""

from __future__ import annotations

from dataclasses import dataclass

from forklift.model.spec import VisionSpec
from forklift.recipe.schema import Multimodal

DEFAULT_LIMIT = 999  # multimodal/registry.py: a modality's items per prompt when --limit-mm-per-prompt omits it
# the image processor's size.longest_edge in each tower's published preprocessor_config.json
_MAX_PIXELS = {"qwen2_5_vit": 12_845_056, "qwen3_vit": 16_777_216, "qwen3_5_vit": 16_777_216}
_SIGLIP_TOKENS = 256  # Gemma3Config.mm_tokens_per_image


@dataclass(frozen=True)
class EncoderProfile:
    """What the profile run spends on the encoder on one rank (bytes), or why it spends nothing."""

    tokens_per_item: int = 0
    items: int = 0
    held: float = 0.0  # encoder outputs kept through the language model's dummy run
    peak: float = 0.0  # the tower's own forward peak
    skipped: str = ""  # why the pass does not run ('' when it runs)


def tower_built(multimodal: Multimodal, modalities: tuple[str, ...] = ("image", "video")) -> bool:
    """interfaces.py SupportsMultiModal._mark_tower_model: a tower whose modalities all have limit 0 is never built
    (``modalities``: the tower's; a vision tower's by default)."""
    lim = multimodal.limit_mm_per_prompt
    return lim is None or any(lim.get(m, DEFAULT_LIMIT) > 0 for m in modalities)


def tokens_per_item(vision_spec: VisionSpec, multimodal: Multimodal) -> tuple[int, int]:
    """(merged tokens, tower patches) of the largest dummy image."""
    if vision_spec.tower == "siglip":
        return _SIGLIP_TOKENS, vision_spec.positions
    unit = vision_spec.patch * vision_spec.merge
    tokens = (multimodal.max_pixels or _MAX_PIXELS[vision_spec.tower]) // (unit * unit)
    return tokens, tokens * vision_spec.merge * vision_spec.merge


def profile(v: VisionSpec | None, multimodal: Multimodal, *, mnbt: int, seqs: int, max_model_len: int, tp: int,
            dtype_bytes: int) -> EncoderProfile:
    if v is None:
        return EncoderProfile(skipped="no multimodal tower")
    if not tower_built(multimodal):
        return EncoderProfile(skipped="every modality of the tower has limit_mm_per_prompt 0: the tower is not built")
    if multimodal.skip_mm_profiling:
        return EncoderProfile(skipped="skip_mm_profiling")
    tokens, patches = tokens_per_item(v, multimodal)
    limit = min((multimodal.limit_mm_per_prompt or {}).get(m, DEFAULT_LIMIT) for m in ("image",)) or 1
    budget = max(mnbt, tokens)
    per_prompt = max(1, min(limit, max_model_len // tokens))
    items = max(1, min(budget // tokens, seqs * per_prompt))
    out_width = v.out_hidden * (1 + v.deepstack)
    held = items * tokens * out_width * dtype_bytes
    # 'weights' mode shards the tower's column-parallel widths over TP; 'data' gives each rank whole items
    ranks_items, width_tp = (-(-items // tp), 1) if multimodal.mm_encoder_tp_mode == "data" else (items, tp)
    p = ranks_items * patches
    pixels = v.channels * v.temporal_patch * v.patch * v.patch
    block = (3 * v.hidden + 2 * v.intermediate // width_tp) * dtype_bytes
    peak = p * (block + pixels * (4 + dtype_bytes))
    return EncoderProfile(tokens, items, float(held), float(peak))

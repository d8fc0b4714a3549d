"""The vision towers of multimodal wrappers, as vLLM builds them from ``vision_config``: parameter counts from the
module shapes (vLLM 0.26.0, file:class cited per tower). The language model under ``text_config`` is planned by its
family; the tower adds weights on the first stage (never quantized here: its Linear layers are counted at the model
dtype, as checkpoints usually keep them) and is sharded over TP like vLLM's default ``mm_encoder_tp_mode=weights``.

What vLLM's profile run spends on the encoder at startup (gpu_model_runner.py profile_run: the encoder on
``encoder_budget // max tokens per item`` dummy items, outputs held through the language model's dummy run) is not
modelled: the plan says so in its notes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from forklift.errors import ModelError
from forklift.model.spec import Split, Tensor, Tower, VisionSpec

# transformers' vision config field defaults (vLLM reads vision_config through these classes; 5.19):
# SiglipVisionConfig, Qwen2_5_VLVisionConfig, Qwen3VLVisionConfig.
_DEFAULTS: dict[str, dict[str, Any]] = {
    "siglip": {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
               "num_channels": 3, "image_size": 224, "patch_size": 16},
    "qwen2_5_vit": {"depth": 32, "hidden_size": 3584, "intermediate_size": 3420, "num_heads": 16, "in_channels": 3,
                    "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 3584},
    "qwen3_vit": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16, "in_channels": 3,
                  "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 3584,
                  "num_position_embeddings": 2304, "deepstack_visual_indexes": [8, 16, 24]},
    # Qwen3.5 builds the same Qwen3_VisionTransformer (qwen3_5.py Qwen3_5ForConditionalGeneration.__init__); its
    # config class (transformers Qwen3_5VisionConfig) has no deepstack_visual_indexes, and qwen3_vl.py reads a
    # missing attribute as [] (no deepstack mergers)
    "qwen3_5_vit": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16, "in_channels": 3,
                    "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 3584,
                    "num_position_embeddings": 2304, "deepstack_visual_indexes": []},
}
_QWEN3_VIT = ("qwen3_vit", "qwen3_5_vit")


def vision_spec(tower: Tower, raw: Mapping[str, Any], text_hidden: int, source: str) -> VisionSpec:
    vc_raw = raw.get("vision_config")
    if not isinstance(vc_raw, Mapping):
        raise ModelError(f"{source}: a multimodal config without 'vision_config'; the planner needs it to count the "
                         "vision tower", fix="Use the model's published config.json (with vision_config).")
    vc = {**_DEFAULTS[tower], **{k: v for k, v in vc_raw.items() if v is not None}}
    if tower == "siglip":
        if vc.get("vision_use_head"):
            raise ModelError(f"{source}: a SigLIP tower with vision_use_head is not modelled",
                             fix="Plan without memory figures.")
        h, p = int(vc["hidden_size"]), int(vc["patch_size"])
        return VisionSpec(tower=tower, hidden=h, depth=int(vc["num_hidden_layers"]),
                          intermediate=int(vc["intermediate_size"]), channels=int(vc["num_channels"]), patch=p,
                          out_hidden=text_hidden, positions=(int(vc["image_size"]) // p) ** 2)
    return VisionSpec(tower=tower, hidden=int(vc["hidden_size"]), depth=int(vc["depth"]),
                      intermediate=int(vc["intermediate_size"]), channels=int(vc["in_channels"]),
                      patch=int(vc["patch_size"]), temporal_patch=int(vc["temporal_patch_size"]),
                      merge=int(vc["spatial_merge_size"]), out_hidden=int(vc["out_hidden_size"]),
                      positions=int(vc.get("num_position_embeddings") or 0) if tower in _QWEN3_VIT else 0,
                      deepstack=len(vc.get("deepstack_visual_indexes") or []) if tower in _QWEN3_VIT else 0)


def _t(mod: str, n: int, split: Split) -> Tensor:
    return Tensor(module=mod, numel=n, split=split, where="embed", linear=False, role="vision")


def _block(prefix: str, h: int, inter: int, *, gated: bool, norm: int) -> list[Tensor]:
    """One ViT block: two norms (``norm`` parameters each: h for RMSNorm, 2h for LayerNorm), QKV + out projection
    with biases, and the MLP (gate_up + down when gated, else fc1 + fc2), all with biases."""
    up = (2 if gated else 1) * inter
    return [_t(f"{prefix}.norms", 2 * norm, "replicated"),
            _t(f"{prefix}.attn.qkv", 3 * h * h + 3 * h, "col"), _t(f"{prefix}.attn.proj", h * h, "row"),
            _t(f"{prefix}.attn.proj.bias", h, "replicated"),
            _t(f"{prefix}.mlp.up", h * up + up, "col"), _t(f"{prefix}.mlp.down", inter * h, "row"),
            _t(f"{prefix}.mlp.down.bias", h, "replicated")]


def _merger(prefix: str, h: int, merge: int, out: int, norm: int) -> list[Tensor]:
    """Patch merger: a norm, then Linear(h*m^2 -> h*m^2) + GELU + Linear(h*m^2 -> out), both with biases."""
    wide = h * merge * merge
    return [_t(f"{prefix}.norm", norm, "replicated"), _t(f"{prefix}.fc1", wide * wide + wide, "col"),
            _t(f"{prefix}.fc2", wide * out, "row"), _t(f"{prefix}.fc2.bias", out, "replicated")]


def tower_tensors(v: VisionSpec) -> list[Tensor]:
    h = v.hidden
    if v.tower == "siglip":
        # siglip.py SiglipVisionEmbeddings (Conv2d patch embedding with bias, position embedding),
        # SiglipEncoderLayer (layer_norm1/2 LayerNorm, qkv_proj / out_proj, fc1 / fc2, all with biases),
        # SiglipVisionTransformer post_layernorm (kept: no layer override); gemma3_mm.py Gemma3MultiModalProjector
        # (mm_input_projection_weight vision_hidden x text_hidden, mm_soft_emb_norm over vision_hidden)
        out = [_t("vision_tower.patch_embedding", v.channels * v.patch * v.patch * h + h, "replicated"),
               _t("vision_tower.position_embedding", v.positions * h, "replicated")]
        for i in range(v.depth):
            out += _block(f"vision_tower.layers.{i}", h, v.intermediate, gated=False, norm=2 * h)
        out += [_t("vision_tower.post_layernorm", 2 * h, "replicated"),
                _t("multi_modal_projector.mm_input_projection_weight", h * v.out_hidden, "replicated"),
                _t("multi_modal_projector.mm_soft_emb_norm", h, "replicated")]
        return out
    patch = v.channels * v.temporal_patch * v.patch * v.patch * h
    if v.tower == "qwen2_5_vit":
        # qwen2_5_vl.py Qwen2_5_VisionPatchEmbed (Conv3d, no bias), Qwen2_5_VisionBlock (RMSNorm norm1/norm2,
        # qkv with bias, proj; Qwen2_5_VisionMLP gate_up / down with bias), Qwen2_5_VisionPatchMerger (ln_q RMSNorm)
        out = [_t("visual.patch_embed", patch, "replicated")]
        for i in range(v.depth):
            out += _block(f"visual.blocks.{i}", h, v.intermediate, gated=True, norm=h)
        return out + _merger("visual.merger", h, v.merge, v.out_hidden, norm=h)
    # qwen3_vl.py Qwen3_VisionPatchEmbed (Conv3d with bias), pos_embed Embedding, Qwen3_VisionBlock (LayerNorm
    # norm1/norm2, Qwen2_5_VisionAttention, Qwen3_VisionMLP linear_fc1 / linear_fc2 with bias),
    # Qwen3_VisionPatchMerger (LayerNorm over h; deepstack mergers: use_postshuffle_norm, LayerNorm over h*m^2)
    out = [_t("visual.patch_embed", patch + h, "replicated"), _t("visual.pos_embed", v.positions * h, "replicated")]
    for i in range(v.depth):
        out += _block(f"visual.blocks.{i}", h, v.intermediate, gated=False, norm=2 * h)
    out += _merger("visual.merger", h, v.merge, v.out_hidden, norm=2 * h)
    for k in range(v.deepstack):
        out += _merger(f"visual.deepstack_merger_list.{k}", h, v.merge, v.out_hidden, norm=2 * h * v.merge * v.merge)
    return out


def tower_param_count(v: VisionSpec) -> int:
    return sum(t.numel for t in tower_tensors(v))

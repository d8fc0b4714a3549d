"""The rotary cos/sin caches vLLM 0.26 registers at load (rotary_embedding/base.py RotaryEmbeddingBase.__init__;
get_rope in rotary_embedding/__init__.py shares one per key), which "Model loading took" counts: sizes derived here
from the rule (positions x rotary_dim x dtype bytes), not from the planner."""

from __future__ import annotations

from typing import Any

from forklift.model.archrules import from_config


def _gemma3(**extra: Any) -> dict[str, Any]:
    return {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 1024,
            "intermediate_size": 4096, "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 4,
            "head_dim": 128, "vocab_size": 4096, "sliding_window": 512, "max_position_embeddings": 32768,
            "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "torch_dtype": "bfloat16", **extra}


def test_gemma3_full_layers_scaled_rope_and_sliding_layers_plain_rope() -> None:
    spec = from_config(_gemma3(rope_scaling={"rope_type": "linear", "factor": 8.0}))
    # full layers: LinearScalingRotaryEmbedding, max_position x factor positions; sliding: plain, max_position
    full = 32768 * 8 * 128 * 2
    local = 32768 * 128 * 2
    assert spec.rope_cache_bytes(0, 6) == full + local
    assert spec.rope_cache_bytes(0, 5) == local  # layers 0-4 are sliding (pattern 6): no full-attention rope there


def test_gemma3_without_rope_scaling_still_builds_two_caches() -> None:
    # the global rope (theta 1e6) and the local one (theta 1e4) are two get_rope keys even when both are plain
    spec = from_config(_gemma3())
    assert spec.rope_cache_bytes(0, 6) == 2 * 32768 * 128 * 2


def test_gpt_oss_one_fp32_yarn_cache_of_the_original_length_times_factor() -> None:
    cfg = {"architectures": ["GptOssForCausalLM"], "hidden_size": 2880, "intermediate_size": 2880,
           "num_hidden_layers": 4, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
           "num_local_experts": 32, "num_experts_per_tok": 4, "vocab_size": 4096, "sliding_window": 128,
           "max_position_embeddings": 131072,
           "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
                            "beta_fast": 32.0, "beta_slow": 1.0},
           "quantization_config": {"quant_method": "mxfp4"}}
    spec = from_config(cfg)
    # gpt_oss.py OAIAttention: get_rope(dtype=torch.float32); get_rope passes original_max_position to YaRN, whose
    # cache has original x factor positions; sliding and full layers use the same key: one cache
    assert spec.rope_cache_bytes(0, 4) == 4096 * 32 * 64 * 4


def test_llama_and_qwen3_one_plain_cache_of_max_position_rows() -> None:
    # llama.py / qwen3.py *Attention.__init__: get_rope(max_position=max_position_embeddings) without a dtype, so
    # torch's default dtype, which the loader sets to the model's (base_loader.py set_default_torch_dtype): one
    # [max_position, rotary_dim] cache shared by every layer (_ROPE_DICT)
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 1024, "intermediate_size": 4096,
           "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 4096, "max_position_embeddings": 8192,
           "torch_dtype": "bfloat16"}
    assert from_config(cfg).rope_cache_bytes(0, 2) == 8192 * 128 * 2
    qwen3 = {**cfg, "architectures": ["Qwen3ForCausalLM"], "head_dim": 128, "max_position_embeddings": 40960}
    assert from_config(qwen3).rope_cache_bytes(0, 2) == 40960 * 128 * 2


def test_glm4_moe_partial_rotary_halves_the_width() -> None:
    cfg = {"architectures": ["Glm4MoeForCausalLM"], "hidden_size": 1024, "intermediate_size": 4096,
           "moe_intermediate_size": 512, "n_routed_experts": 8, "num_experts_per_tok": 2, "first_k_dense_replace": 1,
           "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128,
           "partial_rotary_factor": 0.5, "vocab_size": 4096, "max_position_embeddings": 131072,
           "torch_dtype": "bfloat16"}
    assert from_config(cfg).rope_cache_bytes(0, 2) == 131072 * 64 * 2


def test_mrope_holds_four_times_max_position() -> None:
    # mrope.py MRotaryEmbedding.__init__: cache_max_position_num = max_position_embeddings * 4 (Qwen3.5 / 3.6 text
    # config: rope_parameters with mrope_section, partial_rotary_factor 0.25 of head_dim 256)
    cfg = {"architectures": ["Qwen3_5ForCausalLM"], "hidden_size": 1024, "num_hidden_layers": 4,
           "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 4096,
           "intermediate_size": 4096, "max_position_embeddings": 262144, "full_attention_interval": 4,
           "linear_num_value_heads": 8, "linear_value_head_dim": 128, "linear_num_key_heads": 4,
           "linear_key_head_dim": 128, "linear_conv_kernel_dim": 4, "torch_dtype": "bfloat16",
           "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                               "mrope_section": [11, 11, 10], "mrope_interleaved": True}}
    assert from_config(cfg).rope_cache_bytes(0, 4) == 4 * 262144 * 64 * 2


def test_families_without_an_entry_count_none() -> None:
    # minimax_m2 (rotary_dim beside head_dim) is not modelled yet
    cfg = {"architectures": ["MiniMaxM2ForCausalLM"], "hidden_size": 1024, "intermediate_size": 512,
           "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128,
           "rotary_dim": 64, "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 4096,
           "max_position_embeddings": 8192}
    assert from_config(cfg).rope_cache_bytes(0, 2) == 0

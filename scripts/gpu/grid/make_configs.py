"""Writes the dummy-weight model configs of the H200 grid (models/NAME.config.json). Run once; the JSON is committed.

Each config keeps one family's real per-layer shapes (hidden size, heads, head dims, experts, state sizes) but few
layers, so a dummy-weight boot is fast, and vocab 49152 so SmolLM2's tokenizer (staged by prepare.sh) serves it.
Shapes come from (research notes: docs/research/planner-config-sources.md and planner-kv-and-arch-spec.md section 6):
  glm47-6L        GLM-4.7 (forklift's bundled glm-4.7.json) per-layer shapes, 6 layers, first layer dense
  qwen3next-8L    Qwen3-Next-80B-A3B (transformers Qwen3NextConfig defaults), 8 layers = 6 GDN + 2 full
  nemotronh-14L   Nemotron-H-8B (vLLM 0.26 NemotronHConfig defaults), pattern M-M-M*-M-M-M*- (6 M, 2 *, 6 -)
  dsv32-3L        DeepSeek-V3.2-Exp (transformers DeepseekV32Config defaults), 3 layers, first dense
  gptoss-8L       gpt-oss-120b (published config.json), 8 layers, MXFP4 experts
  minimaxm2-6L    MiniMax-M2 (transformers MiniMaxM2Config defaults; not verified as the M2 release), 6 layers
  kimilinear-8L   Kimi-Linear-48B-A3B (transformers KimiLinearConfig defaults), 8 layers = 6 KDA + 2 MLA
  gemma3-8L       Gemma-3-27B's text model (google/gemma-3-27b-it text_config, tests/data/configs/SOURCES.md), 8 layers
                  with its 5:1 sliding/full pattern (sliding_window_pattern 6: layers 0-4 and 6-7 sliding, 5 full),
                  window 1024
  qwen3moe-8L     Qwen3-30B-A3B (transformers Qwen3MoeConfig defaults, checkpoint Qwen/Qwen3-30B-A3B-Base, with
                  norm_topk_prob true as the released text_config has it; the same
                  per-layer shapes as Qwen3-VL-30B-A3B's text_config), 8 layers, 128 experts top-8
Layer-scaling variants (round 2, VARIANTS below): glm47-6L with 12 or 24 layers (same per-layer shapes, vocab 49152),
and glm47-24L with GLM-4.7's own vocab 151552 (embedding, lm_head, logits and sampler at the real size; the model's
vocab may exceed the tokenizer's: nothing is detokenized before the grid stops the server).
"""

import json
from pathlib import Path

VOCAB = 49152
TOK = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2, "vocab_size": VOCAB, "torch_dtype": "bfloat16",
       "tie_word_embeddings": False}

CONFIGS = {
    "glm47-6L": {
        "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "hidden_size": 5120,
        "num_hidden_layers": 6, "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128,
        "intermediate_size": 12288, "moe_intermediate_size": 1536, "n_routed_experts": 160, "num_experts_per_tok": 8,
        "n_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1, "norm_topk_prob": True,
        "routed_scaling_factor": 2.5, "max_position_embeddings": 202752, "partial_rotary_factor": 0.5,
        "rope_theta": 1000000, "use_qk_norm": True, "attention_bias": True, "num_nextn_predict_layers": 0,
        "rms_norm_eps": 1e-05, "hidden_act": "silu",
    },
    "qwen3next-8L": {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048,
        "intermediate_size": 5632, "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 2,
        "head_dim": 256, "hidden_act": "silu", "max_position_embeddings": 262144, "rms_norm_eps": 1e-06,
        "attention_bias": False, "partial_rotary_factor": 0.25, "rope_theta": 10000000,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_num_key_heads": 16, "linear_num_value_heads": 32, "decoder_sparse_step": 1,
        "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "num_experts_per_tok": 10,
        "num_experts": 512, "norm_topk_prob": True, "mlp_only_layers": [], "full_attention_interval": 4,
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(8)],
    },
    "nemotronh-14L": {
        "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 4096,
        "intermediate_size": 21504, "num_hidden_layers": 14, "hybrid_override_pattern": "M-M-M*-M-M-M*-",
        "num_attention_heads": 32, "head_dim": 128, "num_key_value_heads": 8, "mlp_hidden_act": "relu2",
        "attention_bias": False, "mlp_bias": False, "use_bias": False, "layer_norm_epsilon": 1e-05,
        "residual_in_fp32": False, "max_position_embeddings": 131072, "ssm_state_size": 128,
        "mamba_num_heads": 128, "mamba_n_groups": 8, "n_groups": 8, "mamba_head_dim": 64, "mamba_d_conv": 4,
        "conv_kernel": 4, "mamba_expand": 2, "expand": 2, "mamba_hidden_act": "silu", "mamba_conv_bias": True,
        "mamba_proj_bias": False, "mamba_chunk_size": 256, "chunk_size": 256, "rescale_prenorm_residual": True,
        "use_mamba_kernels": True,
    },
    "dsv32-3L": {
        "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "hidden_size": 7168,
        "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 3,
        "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
        "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
        "v_head_dim": 128, "qk_nope_head_dim": 128, "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8,
        "norm_topk_prob": True, "topk_method": "noaux_tc", "scoring_func": "sigmoid", "moe_layer_freq": 1,
        "hidden_act": "silu", "max_position_embeddings": 163840, "rms_norm_eps": 1e-06, "attention_bias": False,
        "rope_theta": 10000, "index_topk": 2048, "index_head_dim": 128, "index_n_heads": 64,
        "first_k_dense_replace": 1, "num_nextn_predict_layers": 0,
    },
    "gptoss-8L": {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True,
        "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880,
        "initial_context_length": 4096, "intermediate_size": 2880,
        "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(8)],
        "max_position_embeddings": 131072, "num_attention_heads": 64, "num_experts_per_tok": 4,
        "num_hidden_layers": 8, "num_key_value_heads": 8, "num_local_experts": 128,
        "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                           "model.embed_tokens", "lm_head"],
                                "quant_method": "mxfp4"},
        "rms_norm_eps": 1e-05,
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                         "rope_type": "yarn", "truncate": False},
        "rope_theta": 150000, "sliding_window": 128, "swiglu_limit": 7.0,
    },
    "minimaxm2-6L": {
        "architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2", "hidden_size": 3072,
        "intermediate_size": 1536, "num_hidden_layers": 6, "num_attention_heads": 48, "num_key_value_heads": 8,
        "head_dim": 128, "rotary_dim": 64, "num_local_experts": 256, "num_experts_per_tok": 8,
        "scoring_func": "sigmoid", "use_routing_bias": True, "use_qk_norm": True, "qk_norm_type": "per_layer",
        "max_position_embeddings": 196608, "rope_theta": 5000000, "rms_norm_eps": 1e-06, "hidden_act": "silu",
        "attention_bias": False,
    },
    "kimilinear-8L": {
        "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "hidden_size": 2304,
        "intermediate_size": 9216, "num_hidden_layers": 8, "num_attention_heads": 32, "num_key_value_heads": 32,
        "head_dim": 72, "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "mla_use_nope": True, "num_experts": 256,
        "num_experts_per_token": 8, "num_shared_experts": 1, "moe_intermediate_size": 1024,
        "first_k_dense_replace": 1, "moe_layer_freq": 1, "moe_renormalize": True,
        "moe_router_activation_func": "sigmoid", "routed_scaling_factor": 2.446, "use_grouped_topk": True,
        "num_expert_group": 1, "topk_group": 1, "max_position_embeddings": 1048576, "rms_norm_eps": 1e-05,
        "hidden_act": "silu", "num_nextn_predict_layers": 0,
        "linear_attn_config": {"kda_layers": [1, 2, 3, 5, 6, 7], "full_attn_layers": [4, 8], "num_heads": 32,
                               "head_dim": 128, "short_conv_kernel_size": 4},
    },
    "gemma3-8L": {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 5376,
        "intermediate_size": 21504, "num_hidden_layers": 8, "num_attention_heads": 32, "num_key_value_heads": 16,
        "head_dim": 128, "query_pre_attn_scalar": 168, "sliding_window": 1024, "sliding_window_pattern": 6,
        "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(8)],
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0, "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-06,
        "max_position_embeddings": 131072, "attention_bias": False, "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
    },
    "qwen3moe-8L": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
        "intermediate_size": 6144, "num_hidden_layers": 8, "num_attention_heads": 32, "num_key_value_heads": 4,
        "head_dim": 128, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True, "max_position_embeddings": 32768,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "attention_bias": False, "hidden_act": "silu",
    },
}

# name: (base, overrides applied after TOK)
VARIANTS = {
    "glm47-12L": ("glm47-6L", {"num_hidden_layers": 12}),
    "glm47-24L": ("glm47-6L", {"num_hidden_layers": 24}),
    "glm47-24L-v151k": ("glm47-6L", {"num_hidden_layers": 24, "vocab_size": 151552}),
}

if __name__ == "__main__":
    out = Path(__file__).parent / "models"
    out.mkdir(exist_ok=True)
    full = {name: {**cfg, **TOK} for name, cfg in CONFIGS.items()}
    full |= {name: {**full[base], **extra} for name, (base, extra) in VARIANTS.items()}
    for name, cfg in full.items():
        (out / f"{name}.config.json").write_text(json.dumps(cfg, indent=1) + "\n")
        print(out / f"{name}.config.json")

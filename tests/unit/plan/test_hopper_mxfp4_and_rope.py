"""Weights as vLLM 0.26 holds them after loading on an H200: gpt-oss's MXFP4 experts in the TRITON backend's Hopper
layout (oracle/mxfp4.py convert_gpt_oss_weight_to_mxfp4_moe_kernel_format: fp32 biases, loaded scales deleted;
quantization/utils/mxfp4_utils.py _swizzle_mxfp4: scale groups padded to 4 on SM 9.0; triton_kernels
HopperMXScaleLayout.swizzle_data: rows padded to 256) plus the rotary caches; and the largest max_model_len of a
full + sliding-window hybrid (kv_cache_utils.py _estimate_max_model_len_from_groups). Expected values are built
here from those rules and the config, not from the planner."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from forklift.plan import make
from forklift.plan.kvcache import KvConfig, LayerKv, largest_fitting_len, layout
from tests.unit.plan.conftest import cdiv, recipe_for

GIB = 2**30


def up(x: int, m: int) -> int:
    return -(-x // m) * m


H, INTER, E, V, HEADS, KV, HD, LAYERS = 2880, 2880, 128, 8192, 64, 8, 64, 2


def _gpt_oss() -> dict[str, Any]:
    return {"architectures": ["GptOssForCausalLM"], "hidden_size": H, "intermediate_size": INTER,
            "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": HD,
            "num_local_experts": E, "num_experts_per_tok": 4, "vocab_size": V, "sliding_window": 128,
            "attention_bias": True, "max_position_embeddings": 131072, "tie_word_embeddings": False,
            "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
                             "beta_fast": 32.0, "beta_slow": 1.0},
            "quantization_config": {"quant_method": "mxfp4"}, "torch_dtype": "bfloat16"}


def _expected_gpt_oss(tp: int) -> float:
    il = up(cdiv(INTER, tp), 64)  # TRITON: intermediate per partition rounded to 64, hidden as is
    q, kv = HEADS // tp * HD, max(1, KV // tp) * HD
    attn = H * (q + 2 * kv) + (q + 2 * kv) + q * H + H + HEADS // tp  # qkv + bias, o + bias, sinks
    router = H * E + E
    dense = 2 * V * H // tp + LAYERS * (attn + router + 2 * H) + H  # embed, lm_head, layers, final norm; bf16
    values = 3 * H * il // 2  # 4-bit w13 (2 I_l x H) and w2 (H x I_l)
    scales = up(2 * il, 256) * up(up(H // 32, 4), 2) + up(H, 256) * up(up(il // 32, 4), 2)
    bias = (2 * il + H) * 4
    rope = 4096 * 32 * HD * 4
    return (2 * dense + LAYERS * E * (values + scales + bias) + rope) / GIB


@pytest.mark.parametrize("tp", [1, 2])
def test_gpt_oss_hopper_weights_follow_the_triton_layout(tmp_path: Path, tp: int) -> None:
    plan = make(recipe_for(tmp_path, _gpt_oss(), hardware="h200", tp=tp, max_model_len=8192),
                vllm_version="0.26.0")
    assert plan.ranks[0].weights_gib == pytest.approx(_expected_gpt_oss(tp), abs=0.0011)


def test_gemma3_weights_include_both_rope_caches(tmp_path: Path) -> None:
    cfg = {"architectures": ["Gemma3ForCausalLM"], "hidden_size": 1024, "intermediate_size": 4096,
           "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 128,
           "vocab_size": 8192, "sliding_window": 512, "max_position_embeddings": 131072,
           "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "tie_word_embeddings": False,
           "torch_dtype": "bfloat16"}
    per_layer = 1024 * (8 + 2 * 4) * 128 + 8 * 128 * 1024 + 3 * 1024 * 4096 + 4 * 1024 + 2 * 128
    params = 2 * 8192 * 1024 + 6 * per_layer + 1024
    rope = (131072 * 8 + 131072) * 128 * 2  # linear x8 on the full layer, plain on the sliding ones; bf16
    plan = make(recipe_for(tmp_path, cfg, hardware="h200", max_model_len=8192), vllm_version="0.26.0")
    assert plan.ranks[0].weights_gib == pytest.approx((2 * params + rope) / GIB, abs=0.0011)


def _vllm_largest(memory: Callable[[int], int], pool: int, upper: int) -> int:
    """kv_cache_utils.py _estimate_max_model_len_from_groups: binary search over [1, max_model_len]."""
    if memory(1) > pool:
        return 0
    lo, hi, best = 1, upper, 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if memory(mid) <= pool:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


@pytest.mark.parametrize(("sliding", "full"), [(7, 1), (4, 4), (5, 3)])
def test_sliding_hybrid_needed_bytes_and_largest_len_follow_vllm(sliding: int, full: int) -> None:
    """_max_memory_usage_bytes_from_groups: group_size x page x sum over groups of each group's blocks, with
    SlidingWindowSpec.max_admission_blocks_per_request = cdiv(min(W - 1 + max_in_flight_tokens, L), block) + 1 and
    max_in_flight_tokens = max_concurrent_batches (2: async scheduling, PP 1) x max_num_batched_tokens."""
    per_token, window, mnbt, block, upper = 2 * 4 * 128 * 2, 1024, 8192, 16, 131072
    layers = [LayerKv("sliding", per_token=per_token, window=window)] * sliding + \
        [LayerKv("full", per_token=per_token)] * full
    lay = layout(layers, KvConfig(max_model_len=upper, mnbt=mnbt, block=block))
    size = min(sliding, full) if max(sliding, full) >= 1.5 * min(sliding, full) else max(sliding, full)
    page = block * per_token

    def memory(length: int) -> int:
        sw = cdiv(min(window - 1 + 2 * mnbt, length), block) + 1
        return size * page * (cdiv(sliding, size) * sw + cdiv(full, size) * cdiv(length, block))

    assert lay.needed_bytes() == memory(upper)
    for pool in (int(0.6 * GIB), int(1.51 * GIB), memory(upper) - 1, memory(upper)):
        assert largest_fitting_len([lay], [pool], upper) == _vllm_largest(memory, pool, upper)


def test_gpt_oss_plans_on_every_generation_the_backend_table_names(tmp_path: Path) -> None:
    """Hopper (TRITON), Blackwell (FlashInfer TRT-LLM) and GB10 (Marlin): each pads MXFP4 its own way; the Hopper
    layout entry must not hide the others (a gpt-oss plan on a Spark once ended in a KeyError)."""
    config = Path(__file__).resolve().parents[3] / "src" / "forklift" / "model" / "configs" / "gpt-oss-120b.json"
    weights = {hw: make(recipe_for(tmp_path, config, hardware=hw, max_model_len=8192)).ranks[0].weights_gib
               for hw in ("h200", "b200", "gb10")}
    assert all(w > 50 for w in weights.values()), weights  # ~117 B parameters, most in 4.25-bit experts
    assert weights["b200"] > weights["h200"]  # TRT-LLM pads hidden to 256 (2880 -> 3072); TRITON does not

"""Llama-shaped decoders vLLM 0.26 serves through llama.py-style attention (Phi-3, InternLM3, Granite, ERNIE-4.5,
Seed-OSS, EXAONE-4, OLMo-3): where their sliding windows come from (per-layer layer_types, else the model-level
CacheConfig.sliding_window on every layer) and parameter counts computed here from the config and the module
shapes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forklift.errors import ModelError
from forklift.model.archrules import from_config
from forklift.model.tensors import param_count

CONFIGS = Path(__file__).resolve().parents[3] / "tests" / "data" / "configs"


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIGS / name).read_text())
    return data


def _attn(h: int, heads: int, kv: int, d: int) -> int:
    return h * heads * d + 2 * h * kv * d + heads * d * h  # q, k, v, o


def test_phi3_mini_slides_on_every_layer() -> None:
    # no layer_types in Phi3Config: vLLM's CacheConfig.sliding_window (the config's 2047) applies to every layer
    cfg = _load("phi-3-mini-4k-instruct.json")
    spec = from_config(cfg)
    assert spec.family == "llama_window"
    assert [layer.mixer for layer in spec.layers] == ["sliding"] * 32 and spec.sliding_window == 2047
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    d = h // cfg["num_attention_heads"]
    layer = _attn(h, 32, 32, d) + 3 * h * i + 2 * h  # fused qkv / gate_up have the shapes of their parts
    assert param_count(spec) == 2 * v * h + 32 * layer + h  # untied embed + lm_head, final norm
    assert 3.8e9 < param_count(spec) < 3.83e9  # "3.8B parameters" (the model card)


@pytest.mark.parametrize(("window", "types", "expected"), [
    (None, None, ["attention"] * 4),
    (0, None, ["attention"] * 4),  # config/model.py: 0 means disabled
    (512, ["full_attention"] * 4, ["sliding"] * 4),  # not interleaved: the model-level window on every layer
    (512, ["sliding_attention", "full_attention"] * 2, ["sliding", "attention"] * 2),
])
def test_llama_style_window_sources(window: int | None, types: list[str] | None, expected: list[str]) -> None:
    cfg = {"architectures": ["GraniteForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
           "sliding_window": window, "layer_types": types}
    assert [layer.mixer for layer in from_config(cfg).layers] == expected


def test_ernie_4_5_moe_layers_and_count() -> None:
    cfg = _load("ernie-4.5-21b-a3b.json")
    spec = from_config(cfg)
    assert spec.moe is not None
    # ernie45_moe.py: MoE where (i + 1) % interval == 0 and start <= i <= end: layer 0 dense, 1..27 MoE
    assert [layer.mlp for layer in spec.layers] == ["dense"] + ["moe"] * 27
    h, v, e, mi = cfg["hidden_size"], cfg["vocab_size"], cfg["moe_num_experts"], cfg["moe_intermediate_size"]
    attn = _attn(h, 20, 4, 128) + 2 * h
    dense = 3 * h * cfg["intermediate_size"]
    moe = e * h + e + e * 3 * h * mi + 3 * h * 2 * mi  # gate, e_score_correction_bias, experts, 2 shared fused
    # the tensor list always carries lm_head; tying (tie_word_embeddings, kept) is applied when weights are sized
    assert param_count(spec) == 2 * v * h + 28 * attn + dense + 27 * moe + h
    assert spec.tie_word_embeddings
    assert 21e9 < param_count(spec) - v * h < 22e9  # the model card: "21B" total parameters


def test_ernie_4_5_moe_end_index_minus_one_is_the_last_layer() -> None:
    cfg = {**_load("ernie-4.5-21b-a3b.json"), "moe_layer_end_index": -1, "moe_layer_interval": 2}
    mlps = [layer.mlp for layer in from_config(cfg).layers]
    assert mlps == ["moe" if (i + 1) % 2 == 0 and i >= 1 else "dense" for i in range(28)]


def test_olmo3_fills_layer_types_and_counts_full_width_qk_norms() -> None:
    # transformers Olmo3Config: sliding unless (i + 1) % 4 == 0; olmo3.py: q_norm over hidden_size, k_norm over
    # kv heads x head_dim, head_dim = hidden / heads, two post-norms per layer, no biases
    cfg = {"architectures": ["Olmo3ForCausalLM"], "hidden_size": 256, "intermediate_size": 512,
           "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000,
           "sliding_window": 128}
    spec = from_config(cfg)
    assert [layer.mixer for layer in spec.layers] == ["sliding", "sliding", "sliding", "attention"] * 2
    d = 256 // 8
    layer = _attn(256, 8, 2, d) + (256 + 2 * d) + 3 * 256 * 512 + 2 * 256
    assert param_count(spec) == 2 * 1000 * 256 + 8 * layer + 256


def test_seed_oss_has_qkv_biases_whatever_the_config_says() -> None:
    cfg = {"architectures": ["SeedOssForCausalLM"], "hidden_size": 256, "intermediate_size": 512,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 80,
           "vocab_size": 1000, "attention_bias": False}
    spec = from_config(cfg)
    layer = _attn(256, 4, 2, 80) + (4 * 80 + 2 * 2 * 80) + 3 * 256 * 512 + 2 * 256  # seed_oss.py: qkv bias=True
    assert param_count(spec) == 2 * 1000 * 256 + 2 * layer + 256


def test_exaone4_reads_layer_types_and_refuses_a_string_pattern() -> None:
    cfg = {"architectures": ["Exaone4ForCausalLM"], "hidden_size": 256, "intermediate_size": 512,
           "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
           "sliding_window": 64, "sliding_window_pattern": 4}
    spec = from_config(cfg)
    assert [layer.mixer for layer in spec.layers] == ["sliding", "sliding", "sliding", "attention"]
    assert spec.qk_norm
    with pytest.raises(ModelError, match="layer_types"):
        from_config({**cfg, "sliding_window_pattern": "LLLG"})

"""Gemma-2 / Gemma-3 layer patterns and the multimodal wrappers (language model from text_config, vision tower
from vision_config), checked against vLLM's rules and transformers' defaults, and against public parameter counts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forklift.errors import UnknownArchitectureError
from forklift.model.archrules import from_config
from forklift.model.tensors import model_tensors, param_count
from forklift.model.vision import tower_param_count, tower_tensors

CONFIGS = Path(__file__).resolve().parents[3] / "tests" / "data" / "configs"


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIGS / name).read_text())
    return data


def test_gemma3_27b_is_five_sliding_to_one_full() -> None:
    spec = from_config(_load("gemma-3-27b-it.json"))
    mixers = [layer.mixer for layer in spec.layers]
    # transformers Gemma3TextConfig: sliding unless (i + 1) % sliding_window_pattern (default 6) == 0
    assert [i for i, m in enumerate(mixers) if m == "attention"] == [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]
    assert mixers.count("sliding") == 52
    assert spec.sliding_window == 1024
    assert spec.vocab_size == 262208  # absent from the published config: Gemma3TextConfig's default
    assert (spec.head_dim, spec.num_kv_heads, spec.qk_norm) == (128, 16, True)
    assert spec.tie_word_embeddings
    norms = [t for t in model_tensors(spec) if t.module == "model.layers.0.norms"]
    assert norms[0].numel == 4 * 5376  # input / post_attention / pre_feedforward / post_feedforward


def test_gemma3_layer_types_win_over_the_pattern() -> None:
    cfg = _load("gemma-3-27b-it.json")
    cfg["text_config"] = {**cfg["text_config"], "num_hidden_layers": 4,
                          "layer_types": ["full_attention", "sliding_attention", "sliding_attention",
                                          "full_attention"]}
    assert [layer.mixer for layer in from_config(cfg).layers] == ["attention", "sliding", "sliding", "attention"]


def test_gemma2_alternates_from_layer_zero() -> None:
    # transformers Gemma2Config defaults (the gemma-2-2b shape); no layer_types: sliding where (i + 1) % 2 != 0
    cfg = {"architectures": ["Gemma2ForCausalLM"], "hidden_size": 2304, "intermediate_size": 9216,
           "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
           "vocab_size": 256000, "sliding_window": 4096, "torch_dtype": "bfloat16"}
    spec = from_config(cfg)
    assert spec.family == "gemma2"
    assert [layer.mixer for layer in spec.layers] == ["sliding" if i % 2 == 0 else "attention" for i in range(26)]
    assert spec.sliding_window == 4096
    assert spec.tie_word_embeddings  # gemma2.py asserts config.tie_word_embeddings


def test_qwen2_5_vl_vision_tower_matches_a_public_module_count() -> None:
    spec = from_config(_load("qwen2.5-vl-7b-instruct.json"))
    assert spec.vision is not None and spec.family == "dense" and spec.num_layers == 28
    # a public transformers module dump of Qwen2.5-VL-7B-Instruct: vision encoder 676.55M, merger 44.57M
    assert tower_param_count(spec.vision) == pytest.approx(676.55e6, abs=0.005e6)
    merger = sum(t.numel for t in tower_tensors(spec.vision) if t.module.startswith("visual.merger"))
    assert merger == pytest.approx(44.57e6, abs=0.005e6)
    # and the whole model: 8.29B in the same dump (the language model's few QKV biases are not in the planner)
    assert param_count(spec) == pytest.approx(8.29e9, abs=0.006e9)


def test_qwen3_vl_moe_plans_its_text_config_and_adds_the_tower() -> None:
    wrapper = _load("qwen3-vl-30b-a3b.json")
    text = {**wrapper["text_config"], "architectures": ["Qwen3MoeForCausalLM"], "torch_dtype": "bfloat16"}
    spec, lm = from_config(wrapper), from_config(text)
    assert spec.vision is not None and lm.vision is None
    assert spec.layers == lm.layers and spec.moe == lm.moe and spec.num_kv_heads == lm.num_kv_heads
    assert param_count(spec) - param_count(lm) == tower_param_count(spec.vision)
    v = spec.vision
    assert (v.depth, v.hidden, v.out_hidden, v.deepstack, v.positions) == (27, 1152, 2048, 3, 2304)


@pytest.mark.parametrize(("arch", "what"), [("Mistral3ForConditionalGeneration", "Pixtral"),
                                            ("Glm4vMoeForConditionalGeneration", "Glm4v")])
def test_wrappers_without_a_tower_rule_are_refused(arch: str, what: str) -> None:
    cfg = {"architectures": [arch], "text_config": {"num_hidden_layers": 2, "hidden_size": 64}}
    with pytest.raises(UnknownArchitectureError, match=what):
        from_config(cfg)


@pytest.mark.parametrize("name", ["qwen3.5-27b.json", "qwen3.5-35b-a3b.json"])
def test_qwen3_5_counts_its_vision_tower_without_deepstack(name: str) -> None:
    # qwen3_5.py builds qwen3_vl.py's Qwen3_VisionTransformer on vision_config; Qwen3_5VisionConfig has no
    # deepstack_visual_indexes, which Qwen3_VisionTransformer reads as [] (no deepstack mergers)
    cfg = _load(name)
    spec = from_config(cfg)
    vc = cfg["vision_config"]
    assert spec.vision is not None and spec.vision.deepstack == 0
    h, i, out, m2 = vc["hidden_size"], vc["intermediate_size"], vc["out_hidden_size"], vc["spatial_merge_size"] ** 2
    patch = vc["in_channels"] * vc["temporal_patch_size"] * vc["patch_size"] ** 2 * h + h  # Conv3d with bias
    block = (2 * 2 * h  # norm1 / norm2 LayerNorm (weight + bias)
             + h * 3 * h + 3 * h + h * h + h  # qkv and proj with biases
             + h * i + i + i * h + h)  # linear_fc1 / linear_fc2 with biases
    merger = 2 * h + (h * m2) * (h * m2) + h * m2 + (h * m2) * out + out  # LayerNorm over h, fc1, fc2
    expected = patch + vc["num_position_embeddings"] * h + vc["depth"] * block + merger
    assert tower_param_count(spec.vision) == expected
    text = {**cfg["text_config"], "architectures": ["Qwen3_5ForCausalLM"], "torch_dtype": "bfloat16"}
    assert param_count(spec) - param_count(from_config(text)) == expected

"""Quantization as vLLM maps it: the method, bytes per parameter, and each method's own ignore-list matching."""

from __future__ import annotations

import pytest

from forklift.errors import ModelError
from forklift.model.quant import int_bytes, scheme_from_config

Q = "model.layers.3.self_attn.q_proj"
GATE_UP = "model.layers.3.mlp.gate_up_proj"


def test_awq_matches_by_substring() -> None:
    s = scheme_from_config({"quant_method": "awq", "bits": 4, "group_size": 128,
                            "modules_to_not_convert": ["self_attn"]})
    assert s.method == "auto_awq" and s.excluded(Q)  # "self_attn" is a substring of the layer name
    assert not s.excluded(GATE_UP)
    assert s.linear_bytes == pytest.approx(0.5 + 0.5 / 128 + 2 / 128)


def test_compressed_tensors_matches_exact_names_or_re_regexes() -> None:
    s = scheme_from_config({"quant_method": "compressed-tensors", "ignore": ["lm_head", "re:.*mlp\\.gate$",
                                                                             "self_attn"],
                            "config_groups": {"g": {"targets": ["Linear"], "weights": {
                                "num_bits": 4, "type": "int", "group_size": 128, "symmetric": True}}}})
    assert s.excluded("lm_head") and s.excluded("model.layers.0.mlp.gate")
    assert not s.excluded(Q)  # "self_attn" is neither the exact name nor a re: pattern
    assert s.linear_bytes == pytest.approx(0.5 + 2 / 128)


def test_compressed_tensors_fused_layers_need_every_shard() -> None:
    s = scheme_from_config({"quant_method": "compressed-tensors",
                            "ignore": ["model.layers.3.mlp.gate_proj", "model.layers.3.mlp.up_proj"],
                            "config_groups": {"g": {"targets": ["Linear"],
                                                    "weights": {"num_bits": 8, "type": "float"}}}})
    assert s.excluded(GATE_UP)
    half = s.model_copy(update={"exclude": ("model.layers.3.mlp.gate_proj",)})
    assert not half.excluded(GATE_UP)


def test_modelopt_matches_wildcards_and_substrings_and_declares_fp8_kv() -> None:
    s = scheme_from_config({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8",
                            "exclude_modules": ["lm_head", "*mlp.gate", "model.layers.92*"]})
    assert s.method == "modelopt_fp4" and s.linear_bytes == 0.5625 and s.kv_cache_dtype == "fp8"
    assert s.excluded("model.layers.5.mlp.gate") and s.excluded("model.layers.92.mlp.experts")
    assert not s.excluded(Q)


def test_fp8_matches_exact_names_and_experts_by_containment() -> None:
    s = scheme_from_config({"quant_method": "fp8", "weight_block_size": [128, 128],
                            "ignored_layers": [Q.replace("q_proj", "k_proj"), "model.layers.1.mlp.experts.0"]})
    assert not s.excluded(Q)  # only k_proj is listed
    assert s.excluded("model.layers.1.mlp.experts")
    assert s.linear_format == "fp8_block"


def test_gptq_dynamic_negative_keys_leave_layers_unquantized() -> None:
    s = scheme_from_config({"quant_method": "gptq", "bits": 4, "group_size": 128,
                            "dynamic": {r"-:.*\.layers\.0\..*": {}}})
    assert s.excluded("model.layers.0.self_attn.q_proj") and not s.excluded(Q)


def test_auto_round_is_vllms_inc_and_intel_prefix_is_refused() -> None:
    s = scheme_from_config({"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True,
                            "extra_config": {"model.layers.0.self_attn.q_proj": {"bits": 16}}})
    assert s.method == "inc" and s.excluded("model.layers.0.self_attn.q_proj") and not s.excluded(Q)
    assert s.linear_bytes == pytest.approx(int_bytes(4, 128, zeros=False))
    with pytest.raises(ModelError) as err:
        scheme_from_config({"quant_method": "intel/auto-round", "bits": 4})
    assert "auto-round" in err.value.message and err.value.fix


@pytest.mark.parametrize("method", ["exl3", "gguf", "hqq"])
def test_unknown_formats_are_a_clear_error(method: str) -> None:
    with pytest.raises(ModelError) as err:
        scheme_from_config({"quant_method": method})
    assert method in err.value.message and err.value.fix and "Known" in err.value.fix


def test_mxfp4_quantizes_only_the_experts() -> None:
    s = scheme_from_config({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]})
    assert s.bytes_for(Q, linear=True, role="attn", base_bytes=2.0) == 2.0
    assert s.bytes_for("model.layers.0.mlp.experts", linear=True, role="experts", base_bytes=2.0) == 0.53125


def test_fp8_with_mxfp4_experts_counts_the_experts_as_mxfp4() -> None:
    """MiMo-V2.6's and Ling-style checkpoints say quant_method fp8 with store_dtype mxfp4: vLLM (fp8.py
    Fp8Config.get_quant_method) loads the routed experts as MXFP4 (Mxfp4MoEMethod: 4 bits + one e8m0 per 32) and
    the other linears as fp8; read as plain FP8 the experts would count about twice their size."""
    mixed = scheme_from_config({"quant_method": "fp8", "store_dtype": "mxfp4", "weight_block_size": [128, 128]})
    assert mixed.bytes_for("model.layers.0.mlp.experts", linear=True, role="experts", base_bytes=2.0) == 0.5 + 1 / 32
    assert mixed.bytes_for(Q, linear=True, role="attn", base_bytes=2.0) == 1 + 4 / 128**2  # fp32 per block
    plain = scheme_from_config({"quant_method": "fp8", "weight_block_size": [128, 128]})
    assert plain.linear_format == "fp8_block"
    assert plain.bytes_for("model.layers.0.mlp.experts", linear=True, role="experts", base_bytes=2.0) == \
        1 + 4 / 128**2

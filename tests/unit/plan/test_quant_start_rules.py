"""Will it start: the checks vLLM 0.26 makes on a quantized checkpoint while it builds the layers (or at the first
forward), before anything loads. Each expectation is worked out here from the vLLM code the test names (the shapes
per TP rank, the supported-type tables), not from the planner's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forklift.errors import PlanError
from forklift.plan import make
from tests.unit.plan.conftest import recipe_for


def _llama(qc: dict[str, Any], *, hidden: int = 4096, heads: int = 32, kv: int = 8, head_dim: int = 128,
           inter: int = 14336) -> dict[str, Any]:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden, "head_dim": head_dim,
            "intermediate_size": inter, "num_hidden_layers": 2, "num_attention_heads": heads,
            "num_key_value_heads": kv, "vocab_size": 32000, "max_position_embeddings": 4096,
            "torch_dtype": "bfloat16", "quantization_config": qc}


def _moe(qc: dict[str, Any], *, moe_inter: int = 768, shared: int = 0) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048, "head_dim": 128,
        "intermediate_size": 6144, "moe_intermediate_size": moe_inter, "num_hidden_layers": 2,
        "num_attention_heads": 32, "num_key_value_heads": 4, "num_experts": 128, "num_experts_per_tok": 8,
        "vocab_size": 32000, "max_position_embeddings": 4096, "torch_dtype": "bfloat16", "norm_topk_prob": True,
        "quantization_config": qc}
    if shared:
        cfg |= {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe",
                "shared_expert_intermediate_size": shared}
    return cfg


def _plan(tmp: Path, cfg: dict[str, Any], *, hardware: str = "h200", tp: int = 1, **serve: Any) -> Any:
    return make(recipe_for(tmp, cfg, hardware=hardware, tp=tp, max_model_len=4096, **serve))


GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False,
        "modules_in_block_to_quantize": [["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
                                         ["self_attn.o_proj"], ["mlp.gate_proj", "mlp.up_proj"], ["mlp.down_proj"]]}
FP8_BLOCK = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}


# ---------------------------------------------------------------------------------------- supported types


def test_asymmetric_gptq_is_refused(tmp_path: Path) -> None:
    # auto_gptq.py AutoGPTQConfig.TYPE_MAP = {(4, True), (8, True)}: sym false raises 'Unsupported quantization config'
    with pytest.raises(PlanError) as err:
        _plan(tmp_path, _llama(GPTQ | {"sym": False}))
    assert "sym=false" in err.value.message and err.value.fix and "sym: true" in err.value.fix
    _plan(tmp_path, _llama(GPTQ | {"bits": 8}))  # (8, True) is in the map


def test_gptq_group_size_outside_marlins_list_is_refused(tmp_path: Path) -> None:
    # AutoGPTQLinearMethod.__init__ verify_marlin_supported: MARLIN_SUPPORTED_GROUP_SIZES = [-1, 32, 64, 128]
    with pytest.raises(PlanError) as err:
        _plan(tmp_path, _llama(GPTQ | {"group_size": 256}))
    assert "group_size=256" in err.value.message and err.value.fix


def test_awq_other_than_4_bits_is_refused(tmp_path: Path) -> None:
    # auto_awq.py AutoAWQConfig.TYPE_MAP = {4: uint4}
    awq = {"quant_method": "awq", "bits": 8, "group_size": 128, "zero_point": True}
    with pytest.raises(PlanError) as err:
        _plan(tmp_path, _llama(awq))
    assert "bits=8" in err.value.message and "AWQ" in err.value.message


def test_auto_round_mx_fp_needs_a_later_release(tmp_path: Path) -> None:
    # inc/inc.py SUPPORTED_DTYPES: {"int"} in 0.26.0, {"int", "mx_fp", "fp"} in 0.33.0
    ar = {"quant_method": "auto-round", "bits": 4, "group_size": 32, "sym": True, "data_type": "mx_fp"}
    with pytest.raises(PlanError) as err:
        make(recipe_for(tmp_path, _llama(ar), max_model_len=4096), vllm_version="0.26.0")
    assert "mx_fp" in err.value.message and "0.33" in (err.value.fix or "")
    make(recipe_for(tmp_path, _llama(ar), max_model_len=4096), vllm_version="0.33.0")


def test_bitsandbytes_is_gone_from_vllm_028(tmp_path: Path) -> None:
    # layers/quantization/bitsandbytes.py is in the 0.26.0 sdist and absent from 0.28.0 and 0.33.0
    bnb = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    make(recipe_for(tmp_path, _llama(bnb), max_model_len=4096), vllm_version="0.26.0")
    with pytest.raises(PlanError) as err:
        make(recipe_for(tmp_path, _llama(bnb), max_model_len=4096), vllm_version="0.28.0")
    assert "bitsandbytes" in err.value.message and "0.28.0" in (err.value.fix or "")


# ----------------------------------------------------------------------------------- block FP8 per TP rank


def test_moe_expert_width_per_rank_must_be_a_multiple_of_the_block(tmp_path: Path) -> None:
    # fp8.py Fp8MoEMethod.create_weights: intermediate_size_per_partition % block_n; moe_intermediate 768 split over
    # tp 4 -> 192 (not a multiple of 128); tp 2 -> 384 = 3 x 128 starts; with expert parallelism every rank holds whole
    # experts (768) and it starts at tp 4 too
    with pytest.raises(PlanError) as err:
        _plan(tmp_path, _moe(FP8_BLOCK), tp=4)
    assert "192" in err.value.message and "parallel.tp in 1, 2" in (err.value.fix or "")
    _plan(tmp_path, _moe(FP8_BLOCK), tp=2)
    _plan(tmp_path, _moe(FP8_BLOCK), tp=4, enable_expert_parallel=True)


def test_shared_expert_down_proj_input_per_rank_must_be_a_multiple_of_block_k(tmp_path: Path) -> None:
    # fp8_utils.py validate_fp8_block_shape: a row-parallel layer's input_size_per_partition % block_k when tp > 1;
    # shared expert width 512 at tp 8 leaves 64 per rank (512 / 4 = 128 at tp 4 is fine)
    cfg = _moe(FP8_BLOCK, moe_inter=1024, shared=512)
    with pytest.raises(PlanError) as err:
        _plan(tmp_path, cfg, tp=8)
    assert "shared_expert" in err.value.message and "64" in err.value.message
    _plan(tmp_path, cfg, tp=4)


def test_qkv_partition_with_small_heads_must_be_a_multiple_of_block_n(tmp_path: Path) -> None:
    # validate_fp8_block_shape on QKVParallelLinear split over tp: every output partition % block_n. head_dim 64 with
    # 8 KV heads at tp 8: one KV head (64 features) per rank -> refused; at tp 4, two heads = 128 start
    cfg = _llama(FP8_BLOCK, hidden=2048, heads=32, kv=8, head_dim=64, inter=8192)
    with pytest.raises(PlanError) as err:
        _plan(tmp_path, cfg, tp=8)
    assert "64" in err.value.message and "block_n 128" in err.value.message
    _plan(tmp_path, cfg, tp=4)


def test_modelopt_fp8_pb_wo_checks_every_partition_even_on_one_gpu(tmp_path: Path) -> None:
    # modelopt.py (FP8_PB_WO) create_weights: output_size_per_partition % 128 and input_size_per_partition % 128 at
    # any TP; a dense width of 11008 + 64 = 11072 (not a multiple of 128) fails on one GPU already
    qc = {"quant_method": "modelopt", "quant_algo": "FP8_PB_WO"}
    with pytest.raises(PlanError):
        _plan(tmp_path, _llama(qc, inter=11072))
    _plan(tmp_path, _llama(qc, inter=11008))


# --------------------------------------------------------------------------------------- Marlin tile shapes


def test_act_order_layer_without_a_marlin_tile_is_refused_where_padding_would_not_help(tmp_path: Path) -> None:
    # Act-order keeps Marlin's strict shape (marlin.py can_implement -> verify_marlin_supports_shape: N per rank % 64,
    # K per rank % 128, K per rank % group); Machete needs SM 9.0. On the A100 at tp 2 with groups of 64, an
    # intermediate of 11136 gives down_proj K = 5568 per rank (87 groups of 64, but 5568 % 128 = 64): no kernel.
    # Without act-order Marlin pads the tile (marlin_padded_nk) and the groups still divide the shard: it starts.
    g64 = GPTQ | {"group_size": 64}
    with pytest.raises(PlanError) as err:
        _plan(tmp_path, _llama(g64 | {"desc_act": True}, inter=11136), hardware="a100-80", tp=2)
    assert "5568" in err.value.message and "desc_act" in (err.value.fix or "")
    _plan(tmp_path, _llama(g64, inter=11136), hardware="a100-80", tp=2)


def test_a_group_straddling_the_tp_shard_has_no_kernel(tmp_path: Path) -> None:
    # marlin.py can_implement: 'A group straddling TP ranks cannot be fixed by padding' (K per rank % group), and
    # TritonW4A16 refuses it too (K % group): 11136 / 2 = 5568 = 43.5 groups of 128
    with pytest.raises(PlanError):
        _plan(tmp_path, _llama(GPTQ, inter=11136), hardware="a100-80", tp=2)


def test_compressed_tensors_group_straddling_a_tp_shard_is_refused(tmp_path: Path) -> None:
    # compressed_tensors_wNa16.py create_weights verify_group_size_divides_partition: down_proj K per rank % 128;
    # 11264 / 4 = 2816 = 22 x 128 starts, 11264 / 8 = 1408 = 11 x 128 starts, 11520 / 4 = 2880 = 22.5 x 128 fails
    ct = {"quant_method": "compressed-tensors", "ignore": ["lm_head"], "config_groups": {"g": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                                           "group_size": 128}}}}
    _plan(tmp_path, _llama(ct, inter=11264), tp=4)
    with pytest.raises(PlanError) as err:
        _plan(tmp_path, _llama(ct, inter=11520), tp=4)
    assert "2880" in err.value.message and "group_size 128" in err.value.message


# -------------------------------------------------------------------------------- kernels per capability


def test_fp8_on_ampere_runs_weight_only_and_says_so(tmp_path: Path) -> None:
    # scaled_mm/marlin.py is_supported: compute capability below 8.9 -> MarlinFP8ScaledMMLinearKernel (W8A16)
    fp8 = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    notes = _plan(tmp_path, _llama(fp8), hardware="a100-80").notes
    assert any("weight-only through Marlin" in n for n in notes)
    assert not any("weight-only" in n for n in _plan(tmp_path, _llama(fp8)).notes)  # SM 9.0: native FP8


def test_nvfp4_below_sm100_runs_weight_only_and_says_so(tmp_path: Path) -> None:
    # nvfp4_scaled_mm_entry.cu cutlass_scaled_mm_supports_fp4: SM 100-129 only; below, MarlinNvFp4LinearKernel
    nvfp4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}
    assert any("NVFP4" in n and "Marlin" in n for n in _plan(tmp_path, _llama(nvfp4)).notes)
    assert not any("NVFP4" in n and "Marlin" in n for n in _plan(tmp_path, _llama(nvfp4), hardware="b200").notes)

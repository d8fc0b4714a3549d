"""Weight bytes of quantized dense checkpoints as vLLM 0.26 stores them (which layers a method quantizes), with
expected figures computed here from Llama-8B's tensor shapes: per layer q/o 4096x4096, k/v 4096x1024,
gate/up 4096x14336, down 14336x4096; embeddings and lm_head 49152x4096; norms 65 x 4096; all bf16 unless quantized."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forklift.plan import load_replay, make
from tests.unit.plan.conftest import recipe_for

GIB = 1024**3
LAYERS, HIDDEN, VOCAB = 32, 4096, 49152
LINEAR = LAYERS * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)  # 6,979,321,856 parameters
VOCAB_BF16 = VOCAB * HIDDEN * 2  # one of embed_tokens / lm_head in bf16
NORMS = (2 * LAYERS + 1) * HIDDEN * 2 + 8192 * 128 * 2  # and the rotary cos/sin cache (max_position x head_dim, bf16)
BLOCKS = [["self_attn.k_proj", "self_attn.v_proj", "self_attn.q_proj"], ["self_attn.o_proj"],
          ["mlp.up_proj", "mlp.gate_proj"], ["mlp.down_proj"]]


def _llama(qc: dict[str, Any] | None) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN, "head_dim": 128,
        "intermediate_size": 14336, "num_hidden_layers": LAYERS, "num_attention_heads": 32,
        "num_key_value_heads": 8, "vocab_size": VOCAB, "max_position_embeddings": 8192, "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
    }
    if qc is not None:
        cfg["quantization_config"] = qc
    return cfg


def _weights_gib(tmp: Path, qc: dict[str, Any] | None, hardware: str = "h200") -> float:
    return make(recipe_for(tmp, _llama(qc), hardware=hardware, max_model_len=8192)).ranks[0].weights_gib


def _gptq(**kw: Any) -> dict[str, Any]:
    return {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True,
            "lm_head": False, **kw}


# vLLM's linear layers of one decoder layer with their input features K (q / k / v are one QKVParallelLinear):
# qkv 4096, o 4096, gate_up 4096, down 14336
K_PER_LAYER = 3 * 4096 + 14336



@pytest.fixture
def layout_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stored layout alone: without the caching allocator's slack the weights term adds for GPTQ / AWQ on
    Machete (plan/load_replay.py; tests/unit/plan/test_load_replay.py checks that against the H200 probes)."""
    monkeypatch.setattr(load_replay, "load_slack", lambda *args, **kw: None)

def test_gptq_with_a_module_list_quantizes_the_fused_projections_and_not_lm_head(tmp_path: Path) -> None:
    # On the A100 (Marlin): int4 values + one bf16 scale per 128 inputs, 0.5 + 2/128 bytes per parameter; Marlin
    # replaces the unused qzeros and g_idx by empty tensors (kernels/linear/mixed_precision/marlin.py
    # process_weights_after_loading); lm_head stays bf16
    expected = LINEAR * (0.5 + 2 / 128) + 2 * VOCAB_BF16 + NORMS
    got = _weights_gib(tmp_path, _gptq(modules_in_block_to_quantize=BLOCKS), "a100-80")
    assert got == pytest.approx(expected / GIB, abs=0.002)


def test_gptq_on_hopper_keeps_the_checkpoints_qzeros_and_g_idx(tmp_path: Path, layout_only: None) -> None:
    # On the H200 (Machete): AutoGPTQLinearMethod.create_weights registers qzeros (int32, K/128 x N/8) and g_idx (int32,
    # K) even for a symmetric checkpoint without act-order; Machete transforms zero points only when the layer has them
    # (machete.py process_weights_after_loading), so both stay: + 4 bits per group of 128 and 4 bytes per input feature
    expected = LINEAR * (0.5 + 2 / 128 + 0.5 / 128) + LAYERS * K_PER_LAYER * 4 + 2 * VOCAB_BF16 + NORMS
    got = _weights_gib(tmp_path, _gptq(modules_in_block_to_quantize=BLOCKS))
    assert got == pytest.approx(expected / GIB, abs=0.002)


def test_awq_on_hopper_stores_its_zero_points_in_bf16(tmp_path: Path, layout_only: None) -> None:
    # machete.py transform_w_zp: -scale x zero in the scales' dtype, one bf16 per group of 128 and output feature (the
    # checkpoint's 4-bit packed zeros become 16 bits); on the A100 Marlin keeps them packed (marlin_zero_points)
    awq = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}
    hopper = LINEAR * (0.5 + 2 / 128 + 2 / 128) + 2 * VOCAB_BF16 + NORMS
    ampere = LINEAR * (0.5 + 2 / 128 + 0.5 / 128) + 2 * VOCAB_BF16 + NORMS
    assert _weights_gib(tmp_path, awq) == pytest.approx(hopper / GIB, abs=0.002)
    assert _weights_gib(tmp_path, awq, "a100-80") == pytest.approx(ampere / GIB, abs=0.002)


def test_gptq_lm_head_true_quantizes_lm_head(tmp_path: Path) -> None:
    expected = (LINEAR + VOCAB * HIDDEN) * (0.5 + 2 / 128) + VOCAB_BF16 + NORMS
    got = _weights_gib(tmp_path, _gptq(modules_in_block_to_quantize=BLOCKS, lm_head=True), "a100-80")
    assert got == pytest.approx(expected / GIB, abs=0.002)


def test_gptq_without_a_module_list_on_a_dummy_load_stays_bf16(tmp_path: Path) -> None:
    # maybe_update_config reads the quantized layers from safetensors headers; a dummy load has none
    assert _weights_gib(tmp_path, _gptq()) == pytest.approx(_weights_gib(tmp_path, None), abs=1e-6)
    expected = (LINEAR * 2 + 2 * VOCAB_BF16 + NORMS) / GIB
    assert _weights_gib(tmp_path, _gptq()) == pytest.approx(expected, abs=0.002)


@pytest.mark.parametrize("qc", [
    {"quant_method": "fp8", "activation_scheme": "dynamic"},
    {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": [],
     "config_groups": {"g": {"targets": ["Linear"],
                             "weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}},
])
def test_fp8_methods_leave_lm_head_in_bf16_even_when_not_ignored(tmp_path: Path, qc: dict[str, Any]) -> None:
    # fp8 / compressed-tensors quantize LinearBase only; ParallelLMHead is an embedding. Per-channel scales are
    # fp32 per output row (< 0.01 GiB here), so 1 byte per parameter within the tolerance.
    expected = LINEAR * 1 + 2 * VOCAB_BF16 + NORMS
    assert _weights_gib(tmp_path, qc) == pytest.approx(expected / GIB, abs=0.01)

"""Will it start: block-FP8 shapes per TP rank (vLLM 0.26 fp8_utils.py validate_fp8_block_shape and the first
forward's per-token-group activation quantization, group = block_k)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forklift.errors import PlanError
from forklift.plan import make
from tests.unit.plan.conftest import recipe_for


def _llama(intermediate: int, block: list[int] | None) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": intermediate, "num_hidden_layers": 4, "num_attention_heads": 32,
        "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
    }
    if block is not None:
        cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic",
                                      "weight_block_size": block}
    return cfg


def test_dense_width_not_a_multiple_of_the_block_is_refused_with_the_tp_that_works(tmp_path: Path) -> None:
    # 10944 = 85.5 x 128: no TP makes 10944 / tp a multiple of 128 except those dividing out the odd factor
    with pytest.raises(PlanError) as err:
        make(recipe_for(tmp_path, _llama(10944, [128, 128]), max_model_len=4096))
    assert "10944" in err.value.message and "group_size" in err.value.message
    assert err.value.fix and "intermediate_size" in err.value.fix


def test_tp_that_splits_a_block_is_refused_and_names_a_tp_that_fits(tmp_path: Path) -> None:
    # 14336 / 128 = 112 blocks: tp 8 leaves 1792 (14 blocks), tp 16 leaves 896 (7 blocks); 14336 / 3 is no integer,
    # and 5376 = 42 x 128 splits at tp 2 (2688 = 21 x 128) but not at tp 4 (1344 = 10.5 x 128)
    with pytest.raises(PlanError) as err:
        make(recipe_for(tmp_path, _llama(5376, [128, 128]), tp=4, max_model_len=4096))
    assert "1344" in err.value.message
    assert "parallel.tp in 1, 2" in (err.value.fix or "")
    make(recipe_for(tmp_path, _llama(5376, [128, 128]), tp=2, max_model_len=4096))


def test_the_same_width_without_blocks_plans(tmp_path: Path) -> None:
    make(recipe_for(tmp_path, _llama(10944, None), max_model_len=4096))

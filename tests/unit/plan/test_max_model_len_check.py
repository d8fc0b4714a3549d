"""vLLM's check of a requested max_model_len against the length the model's config allows (config/model.py
_get_and_verify_max_len and model_arch_config_convertor.derive_max_model_len_and_key @0.26): the plan refuses
what vLLM refuses, in its words, and takes the same default when the recipe names no length."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forklift.errors import ModelError
from forklift.model.archrules import derived_max_len
from forklift.plan import make
from forklift.recipe.load import validate
from tests.unit.plan.conftest import recipe_for

BUNDLED = Path(__file__).resolve().parents[3] / "src" / "forklift" / "model" / "configs"
LLAMA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 4,
    "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 2816, "vocab_size": 32000,
    "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(("extra", "expected"), [
    ({}, (4096, "max_position_embeddings")),
    ({"seq_length": 2048}, (2048, "seq_length")),  # the smallest length key wins
    ({"model_max_length": 8192}, (8192, "model_max_length")),  # Command-R style: model_max_length overrides
    ({"rope_scaling": {"type": "dynamic", "factor": 2.0}}, (8192, "max_position_embeddings")),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, (4096, "max_position_embeddings")),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}},
     (4096, "max_position_embeddings")),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}, (4096, "max_position_embeddings")),
])
def test_derived_length_follows_vllm(extra: dict[str, Any], expected: tuple[int, str]) -> None:
    assert derived_max_len({**LLAMA, **extra}) == expected


def test_no_length_key_and_gemma3_scaling() -> None:
    cfg = {k: v for k, v in LLAMA.items() if k != "max_position_embeddings"}
    assert derived_max_len(cfg) == (None, None)
    gemma = {"model_type": "gemma3_text", "max_position_embeddings": 131072,
             "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    assert derived_max_len(gemma) == (131072, "max_position_embeddings")  # already scaled: not multiplied again


def test_published_configs() -> None:
    llama = json.loads((BUNDLED / "llama-3.1-405b.json").read_text())
    assert llama["rope_scaling"]["rope_type"] == "llama3"  # vLLM does not scale llama3 rope lengths
    assert derived_max_len(llama) == (llama["max_position_embeddings"], "max_position_embeddings")
    vl = json.loads((BUNDLED.parents[3] / "tests" / "data" / "configs" / "qwen2.5-vl-7b-instruct.json").read_text())
    text = vl.get("text_config") or vl
    assert str((text.get("rope_scaling") or vl.get("rope_scaling"))["type"]) == "mrope"  # no factor: unscaled
    assert derived_max_len({**vl, **text})[0] == text.get("max_position_embeddings", vl["max_position_embeddings"])


def test_a_length_above_the_model_is_refused_unless_allowed(tmp_path: Path) -> None:
    plan = make(recipe_for(tmp_path, LLAMA, max_model_len=8192))
    assert not plan.fits
    assert plan.error is not None
    # vLLM multiplies the length by the rope factor (1.0 without scaling), so its message prints a float
    assert plan.error.startswith("User-specified max_model_len (8192) is greater than the derived max_model_len "
                                 "(max_position_embeddings=4096.0 or model_max_length=None")
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in plan.error

    allowed = recipe_for(tmp_path, LLAMA, max_model_len=8192).model_dump()
    allowed["env"] = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}
    plan = make(validate(allowed))
    assert plan.fits and plan.max_model_len == 8192
    assert any("above the model's max_position_embeddings" in n for n in plan.notes)


def test_within_the_length_and_the_default(tmp_path: Path) -> None:
    assert make(recipe_for(tmp_path, LLAMA, max_model_len=4096)).fits
    scaled = {**LLAMA, "rope_scaling": {"type": "dynamic", "factor": 2.0}}
    assert make(recipe_for(tmp_path, scaled)).max_model_len == 2 * LLAMA["max_position_embeddings"]
    assert make(recipe_for(tmp_path, scaled, max_model_len=8192)).fits


def test_the_advice_names_the_models_length_and_the_override(tmp_path: Path) -> None:
    plan = make(recipe_for(tmp_path, LLAMA, max_model_len=8192))
    assert [a.set for a in plan.advice] == [[f"serve.max_model_len={LLAMA['max_position_embeddings']}"],
                                            ["env.VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"]]
    assert all(a.fits for a in plan.advice)


def test_ties_longrope_and_bad_values(tmp_path: Path) -> None:
    # equal lengths: the first key in vLLM's list wins (n_positions before max_seq_len)
    assert derived_max_len({"n_positions": 2048, "max_seq_len": 2048}) == (2048, "n_positions")
    # longrope (Phi-3-128k style): not scaled; with no max_model_len vLLM starts at original_max_position_embeddings
    phi = {**LLAMA, "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
           "rope_scaling": {"type": "longrope", "long_factor": [1.0], "short_factor": [1.0]}}
    assert derived_max_len(phi) == (131072, "max_position_embeddings")
    assert make(recipe_for(tmp_path, phi)).max_model_len == 4096
    assert make(recipe_for(tmp_path, phi, max_model_len=131072)).fits
    # a null factor counts 1.0; a factor that is not a number is the user's config error, not a traceback
    assert derived_max_len({**LLAMA, "rope_scaling": {"type": "dynamic", "factor": None}})[0] == 4096
    with pytest.raises(ModelError, match="rope factor"):
        derived_max_len({**LLAMA, "rope_scaling": {"type": "dynamic", "factor": "x"}})


def test_the_override_counts_on_the_first_node(tmp_path: Path) -> None:
    data = recipe_for(tmp_path, LLAMA, max_model_len=8192).model_dump()
    data["nodes"] = [{"host": "node0", "hardware": "h200", "env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}},
                     {"host": "node1", "hardware": "h200"}]
    data["parallel"]["pp"] = 2
    assert make(validate(data)).fits
    data["env"] = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}
    data["nodes"][0]["env"] = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "0"}
    assert not make(validate(data)).fits

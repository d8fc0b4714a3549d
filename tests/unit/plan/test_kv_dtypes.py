"""Every --kv-cache-dtype stock vLLM accepts: the recipe takes it, the planner refuses it on a release without it,
and a layer's bytes per token follow from the tensors vLLM allocates (v1/kv_cache_interface.py @0.26.0): K and V
rows of head_size values, packed where the format packs, plus the fp32 per-token-head scales it carves from the
same pool. Expectations are written from those shapes here, not read from the planner's data."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest

from forklift.errors import PlanError
from forklift.model import configs_index
from forklift.plan import make, rules
from forklift.recipe.schema import KvCacheDtype
from tests.unit.plan.conftest import CONFIGS, cdiv, recipe_for

FP32 = 4


def _bundled(name: str) -> dict[str, object]:
    entry = configs_index.find(name)
    assert entry is not None
    data: dict[str, object] = json.loads(configs_index.read(entry))
    return data


def _dense(dtype: str) -> int:
    """qwen3-235b-a22b: 94 layers, 4 KV heads of 128 per rank at TP=1."""
    layers, heads, head = 94, 4, 128
    per_head = {
        "auto": 2 * head * 2, "float16": 2 * head * 2, "bfloat16": 2 * head * 2,
        "fp8": 2 * head, "fp8_e4m3": 2 * head, "fp8_e5m2": 2 * head, "fp8_inc": 2 * head,
        "int8_per_token_head": 2 * head + 2 * FP32, "fp8_per_token_head": 2 * head + 2 * FP32,
        "int4_per_token_head": 2 * (head // 2) + 2 * FP32,   # two int4 values a byte
        "nvfp4": 2 * (head // 2 + head // 16),              # fp4 values + one fp8 scale per 16
    }[dtype]
    return layers * heads * per_head


DENSE = ["auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "int8_per_token_head",
         "fp8_per_token_head", "int4_per_token_head", "nvfp4"]


@pytest.mark.parametrize("dtype", DENSE)
def test_dense_bytes_per_token_per_dtype(tmp_path: Path, dtype: str) -> None:
    plan = make(recipe_for(tmp_path, _bundled("qwen3-235b-a22b"), kv_cache_dtype=dtype, max_model_len=4096),
                vllm_version="0.26.0")
    assert plan.ranks[0].kv_bytes_per_token == _dense(dtype)


def _tq_slot(head: int, key_bits: int, value_bits: int) -> int:
    """turboquant/config.py docstrings: FP8 keys take head bytes; MSE keys ceil(head*bits/8) + 2 B fp16 norm;
    values ceil(head*bits/8) + 2 B scale + 2 B zero; the slot is rounded up to an even byte count."""
    key = head if key_bits == 8 else cdiv(head * key_bits, 8) + 2
    slot = key + cdiv(head * value_bits, 8) + 4
    return slot + slot % 2


@pytest.mark.parametrize(("dtype", "kbits", "vbits"), [
    ("turboquant_k8v4", 8, 4), ("turboquant_4bit_nc", 4, 4), ("turboquant_k3v4_nc", 3, 4),
    ("turboquant_3bit_nc", 3, 3),
])
def test_turboquant_on_a_hybrid_packs_k_and_v_per_head(tmp_path: Path, dtype: str, kbits: int, vbits: int) -> None:
    cfg = json.loads((CONFIGS / "qwen3.5-27b.json").read_text())
    text = cfg.get("text_config", cfg)
    full = sum(1 for t in text["layer_types"] if t == "full_attention")
    heads, head = text["num_key_value_heads"], text["head_dim"]
    plan = make(recipe_for(tmp_path, cfg, kv_cache_dtype=dtype, max_model_len=4096), vllm_version="0.26.0")
    assert plan.ranks[0].kv_bytes_per_token == full * heads * _tq_slot(head, kbits, vbits)


def test_turboquant_on_a_dense_model_is_refused_with_a_fix(tmp_path: Path) -> None:
    # vLLM keeps the first and last two layers in the model dtype there; that layout is not modelled
    with pytest.raises(PlanError) as err:
        make(recipe_for(tmp_path, _bundled("qwen3-235b-a22b"), kv_cache_dtype="turboquant_k8v4",
                        max_model_len=4096), vllm_version="0.26.0")
    assert err.value.fix and "kv_cache_dtype" in err.value.fix


@pytest.mark.parametrize(("dtype", "per_layer"), [
    ("auto", 576 * 2), ("fp8", 576), ("fp8_ds_mla", 656),     # 656: the FlashMLA layout (flashmla_sparse.py)
    ("int8_per_token_head", 576 + 2 * FP32), ("int4_per_token_head", 576 // 2 + 2 * FP32),
])
def test_mla_latent_bytes_per_dtype(tmp_path: Path, dtype: str, per_layer: int) -> None:
    plan = make(recipe_for(tmp_path, _bundled("deepseek-v3"), kv_cache_dtype=dtype, max_model_len=4096),
                vllm_version="0.26.0")
    assert plan.ranks[0].kv_bytes_per_token == 61 * per_layer


@pytest.mark.parametrize(("dtype", "refused", "accepted"), [
    ("int4_per_token_head", "0.24.0", "0.25.1"),
    ("nvfp4_4over6", "0.26.0", None),
    ("ultraquant_4bit", "0.25.1", None),
])
def test_a_release_without_the_dtype_refuses_it(tmp_path: Path, dtype: str, refused: str,
                                                accepted: str | None) -> None:
    cfg = _bundled("qwen3-235b-a22b")
    with pytest.raises(PlanError) as err:
        make(recipe_for(tmp_path, cfg, kv_cache_dtype=dtype, max_model_len=4096), vllm_version=refused)
    assert dtype in err.value.message and err.value.fix
    if accepted:
        make(recipe_for(tmp_path, cfg, kv_cache_dtype=dtype, max_model_len=4096), vllm_version=accepted)


def test_a_dtype_whose_pages_were_not_read_is_refused_not_guessed(tmp_path: Path) -> None:
    with pytest.raises(PlanError) as err:
        make(recipe_for(tmp_path, _bundled("qwen3-235b-a22b"), kv_cache_dtype="octave_k3v4", max_model_len=4096),
             vllm_version="0.33.0")
    assert "octave_k3v4" in err.value.message and err.value.fix


@pytest.mark.parametrize("dtype", ["octave_k3v4", "octave_k3v3", "octave_k3v3_compact", "ultraquant_4bit"])
def test_vllm_0_31_has_no_octave_or_ultraquant_kv(tmp_path: Path, dtype: str) -> None:
    # vLLM 0.31.0 config/cache.py CacheDType ends at fp8_per_token_head, nvfp4, nvfp4_4over6 (nvfp4_ds_mla after
    # fp8_ds_mla): a release that lacks the name refuses it, not "pages not read"
    with pytest.raises(PlanError) as err:
        make(recipe_for(tmp_path, _bundled("qwen3-235b-a22b"), kv_cache_dtype=dtype, max_model_len=4096),
             vllm_version="0.31.0")
    assert "does not accept" in err.value.message


def test_int8_per_token_head_plans_on_the_first_release_read(tmp_path: Path) -> None:
    plan = make(recipe_for(tmp_path, _bundled("qwen3-235b-a22b"), kv_cache_dtype="int8_per_token_head",
                           max_model_len=4096), vllm_version="0.23.0")
    assert plan.ranks[0].kv_bytes_per_token == _dense("int8_per_token_head")


def test_an_older_release_than_read_plans_with_a_note(tmp_path: Path) -> None:
    plan = make(recipe_for(tmp_path, _bundled("qwen3-235b-a22b"), kv_cache_dtype="fp8_per_token_head",
                           max_model_len=4096), vllm_version="0.20.0")
    assert any("fp8_per_token_head" in n and "not for 0.20.0" in n for n in plan.notes)


def test_schema_and_planner_data_name_the_same_dtypes() -> None:
    assert set(typing.get_args(KvCacheDtype)) == set(rules.data()["kv_cache_dtypes"])

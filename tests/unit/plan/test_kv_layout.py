"""KV bytes per token per attention kind, PP split, blocks and concurrency, from first principles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forklift.errors import PlanError
from forklift.model import configs_index
from forklift.model.archrules import from_config
from forklift.plan import make, pp_partition
from tests.unit.plan.conftest import recipe_for


def _bundled(name: str) -> dict[str, object]:
    entry = configs_index.find(name)
    assert entry is not None
    data: dict[str, object] = json.loads(configs_index.read(entry))
    return data


@pytest.mark.parametrize(("layers", "pp", "expected"), [
    (78, 3, [26, 26, 26]),
    (79, 3, [26, 27, 26]),
    (80, 3, [27, 27, 26]),
    (61, 4, [15, 15, 16, 15]),
    (92, 2, [46, 46]),
    (30, 1, [30]),
])
def test_pp_partition_follows_get_pp_indices(layers: int, pp: int, expected: list[int]) -> None:
    assert pp_partition(layers, pp) == expected


def test_pp_larger_than_layers_is_a_plan_error() -> None:
    with pytest.raises(PlanError) as err:
        pp_partition(4, 5)
    assert err.value.fix


def test_gqa_kv_split_by_tp_and_replicated_beyond_kv_heads(tmp_path: Path) -> None:
    cfg = _bundled("qwen3-235b-a22b")  # 94 layers, 4 KV heads x 128
    for tp, heads_per_rank in ((1, 4), (2, 2), (4, 1), (8, 1)):
        plan = make(recipe_for(tmp_path, cfg, hardware="h200", nodes=1, tp=tp, kv_cache_dtype="fp8",
                               max_model_len=4096))
        assert plan.ranks[0].kv_bytes_per_token == 94 * 2 * heads_per_rank * 128 * 1


def test_mla_kv_is_not_split_by_tp(tmp_path: Path) -> None:
    cfg = _bundled("deepseek-v3")  # 61 layers, kv_lora 512 + rope 64
    for tp in (1, 8):
        plan = make(recipe_for(tmp_path, cfg, hardware="h200", nodes=1, tp=tp, max_model_len=4096))
        assert plan.ranks[0].kv_bytes_per_token == 61 * (512 + 64) * 2


@pytest.mark.parametrize(("hardware", "kv", "per_layer", "name"), [
    ("h200", "fp8", 656, "fp8_ds_mla"),    # FLASH_ATTN_MLA_SPARSE rejects fp8 -> FLASHMLA_SPARSE, fp8_ds_mla
    ("h200", "auto", 1152, "bfloat16"),    # FLASH_ATTN_MLA_SPARSE keeps bf16: 576 x 2
    ("b200", "fp8", 576, "fp8_e4m3"),      # FLASHINFER_MLA_SPARSE: no ds_mla rewrite
    ("gb10", "auto", 656, "fp8_ds_mla"),   # FLASHINFER_MLA_SPARSE_SM120 stores fp8_ds_mla even for auto
])
def test_dsa_indexer_owners_and_sparse_mla_bytes_per_gpu(tmp_path: Path, hardware: str, kv: str, per_layer: int,
                                                         name: str) -> None:
    glm51 = from_config(_bundled("glm-5.1"))
    glm52 = from_config(_bundled("glm-5.2"))
    assert glm51.indexer is not None and len(glm51.indexer.layers) == 78
    # vLLM's rule (index_topk_freq 4, offset 3): layers 0, 1, 2, then every 4th from 6
    assert glm52.indexer is not None and glm52.indexer.layers[:5] == (0, 1, 2, 6, 10)
    assert len(glm52.indexer.layers) == 21
    nodes, tp = (4, 4) if hardware == "gb10" else (1, 8)
    plan = make(recipe_for(tmp_path, _bundled("glm-5.2"), hardware=hardware, nodes=nodes, tp=tp,
                           kv_cache_dtype=kv, max_model_len=8192), vllm_version="0.26.0")
    assert plan.ranks[0].kv_bytes_per_token == 78 * per_layer + 21 * 132
    assert plan.kv_cache_dtype == name and plan.block_size == 64


def test_dcp_multiplies_tokens(tmp_path: Path) -> None:
    cfg = _bundled("deepseek-v3")
    one = make(recipe_for(tmp_path, cfg, hardware="h200", nodes=1, tp=8, max_model_len=8192))
    four = make(recipe_for(tmp_path, cfg, hardware="h200", nodes=1, tp=8, dcp=4, max_model_len=8192))
    assert four.num_blocks == one.num_blocks
    assert four.kv_tokens == 4 * one.kv_tokens


def test_sliding_window_layers_group_like_vllm(tmp_path: Path) -> None:
    cfg = _bundled("gpt-oss-120b")  # 18 sliding + 18 full layers, 8 KV heads x 64
    plan = make(recipe_for(tmp_path, cfg, hardware="h200", nodes=1, tp=1, max_model_len=65536))
    rank = plan.ranks[0]
    assert rank.kv_bytes_per_token == 36 * 2 * 8 * 64 * 2
    per_layer_page = 2 * 8 * 64 * 2 * plan.block_size
    # two KV groups of 18 layers share each block id
    assert plan.num_blocks == int(rank.kv_pool_gib * 2**30) // (per_layer_page * 18) or \
        abs(plan.num_blocks - int(rank.kv_pool_gib * 2**30) // (per_layer_page * 18)) <= 1
    # a request holds every full-attention block of its length, but only the window (127 tokens) plus the tokens
    # of two batches in flight (2 x 8192) of the sliding ones, +1 block; tokens = int(concurrency x length)
    per_request = 65536 // 16 + (-(-(127 + 2 * 8192) // 16) + 1)
    assert plan.max_concurrency == pytest.approx(plan.num_blocks / per_request, abs=0.01)
    assert plan.kv_tokens == int(plan.num_blocks / per_request * 65536)


def test_cpu_pool_is_fixed_and_rounded_to_blocks(tmp_path: Path) -> None:
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 576, "num_hidden_layers": 30,
           "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "intermediate_size": 1536,
           "vocab_size": 49152, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}
    plan = make(recipe_for(tmp_path, cfg, hardware="cpu", cpu_kv_cache_gib=2, max_model_len=8192))
    per_token = 30 * 2 * 3 * 64 * 2
    assert plan.kv_tokens == (2 * 2**30 // (per_token * plan.block_size)) * plan.block_size
    assert plan.max_concurrency == pytest.approx(plan.num_blocks / (8192 // plan.block_size), abs=0.01)

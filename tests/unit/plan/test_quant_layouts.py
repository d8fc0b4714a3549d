"""Quantized layouts as data (forklift/model/quant_layouts.yaml) and the kernel vLLM 0.26 picks per GPU family.

Expected figures are computed here from the model's shapes and the vLLM source each test names; never read from
the planner."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from forklift.model.quant import layouts, scheme_from_config
from forklift.plan import load_replay, make, quant_layout
from tests.unit.plan.conftest import recipe_for

GIB = 1024**3
LAYERS, HIDDEN, VOCAB = 4, 4096, 32000
ROPE = 4096 * 128 * 2  # the rotary cos/sin cache: max_position x head_dim, bf16 (rotary_embedding/base.py)
BF16_REST = 2 * VOCAB * HIDDEN * 2 + (2 * LAYERS + 1) * HIDDEN * 2 + ROPE  # embed + lm_head + norms + rope (bf16)


def _llama(qc: dict[str, Any] | None, *, inter: int = 14336, kv: int = 8) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN, "head_dim": 128,
        "intermediate_size": inter, "num_hidden_layers": LAYERS, "num_attention_heads": 32,
        "num_key_value_heads": kv, "vocab_size": VOCAB, "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
    }
    if qc is not None:
        cfg["quantization_config"] = qc
    return cfg


def _plan(tmp: Path, qc: dict[str, Any] | None, hardware: str = "h200", tp: int = 1, **kw: Any) -> Any:
    nodes = 1 if hardware in ("h200", "a100-80", "b200") else tp
    return make(recipe_for(tmp, _llama(qc, **kw), hardware=hardware, tp=tp, nodes=nodes, max_model_len=4096))


def _weights(tmp: Path, qc: dict[str, Any] | None, hardware: str = "h200", tp: int = 1, **kw: Any) -> float:
    return float(_plan(tmp, qc, hardware, tp, **kw).ranks[0].weights_gib) * GIB


def _gptq(**kw: Any) -> dict[str, Any]:
    blocks = [["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"], ["self_attn.o_proj"],
              ["mlp.gate_proj", "mlp.up_proj"], ["mlp.down_proj"]]
    return {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False,
            "modules_in_block_to_quantize": blocks, **kw}


# ------------------------------------------------------------------------------------------------ the data



@pytest.fixture
def layout_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stored layout alone: without the caching allocator's slack the weights term adds for GPTQ / AWQ on
    Machete (plan/load_replay.py; tests/unit/plan/test_load_replay.py checks that against the H200 probes)."""
    monkeypatch.setattr(load_replay, "load_slack", lambda *args, **kw: None)

def test_every_row_cites_the_vllm_source_it_was_read_from() -> None:
    data = layouts()
    for name, row in data["methods"].items():
        assert "@0." in row["source"], name
        assert row["checkpoint"], name
        for rule in row.get("start_rules", []):
            assert rule in data["start_rules"], (name, rule)
    for family, rows in data["kernels"].items():
        for row in rows:
            assert "@0." in row["source"] or ".py" in row["source"], (family, row["name"])
    aliases = [a for row in data["methods"].values() for a in row["checkpoint"]]
    assert len(aliases) == len(set(aliases))  # one method per checkpoint quant_method


@pytest.mark.parametrize(("method", "vllm_name"), [
    # layers/quantization/__init__.py get_quantization_config and each override_quantization_method @0.26.0
    ("awq", "auto_awq"), ("gptq", "auto_gptq"), ("auto-round", "inc"), ("fp8", "fp8"), ("mxfp8", "modelopt_mxfp8"),
])
def test_checkpoint_methods_map_to_vllms_method(method: str, vllm_name: str) -> None:
    qc: dict[str, Any] = {"quant_method": method, "bits": 4, "group_size": 128, "sym": True, "zero_point": True}
    if method == "mxfp8":
        qc["quant_algo"] = "MXFP8"
    assert scheme_from_config(qc).method == vllm_name


def test_bitsandbytes_keeps_lm_head_and_matches_dotted_components(tmp_path: Path) -> None:
    # bitsandbytes.py get_quant_method: LinearBase only (lm_head stays bf16); is_layer_skipped_bnb: an entry equal to
    # a dotted component of the name or to a leading prefix, not a substring
    s = scheme_from_config({"quant_method": "bitsandbytes", "load_in_4bit": True,
                            "llm_int8_skip_modules": ["down_proj", "model.layers.0"]})
    assert not s.lm_head
    assert s.excluded("model.layers.3.mlp.down_proj") and s.excluded("model.layers.0.self_attn.q_proj")
    assert not s.excluded("model.layers.10.self_attn.q_proj")  # "model.layers.0" is not a prefix of layers.10
    assert not scheme_from_config({"quant_method": "bitsandbytes", "load_in_4bit": True,
                                   "llm_int8_skip_modules": ["own_pro"]}).excluded("model.layers.3.mlp.down_proj")
    # double quantization: uint8 absmax per 64 values and one fp32 per 256 absmax blocks
    dq = scheme_from_config({"quant_method": "bitsandbytes", "load_in_4bit": True,
                             "bnb_4bit_use_double_quant": True})
    assert dq.linear_bytes == pytest.approx(0.5 + 1 / 64 + 4 / (64 * 256))


def test_auto_round_leaves_lm_head_in_the_model_dtype() -> None:
    # inc/config_parser.py INCConfigParser._resolve_raw: quantized = not isinstance(layer, ParallelLMHead)
    s = scheme_from_config({"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True})
    assert not s.lm_head


def test_compressed_tensors_block_fp8_carries_its_block() -> None:
    # compressed_tensors_w8a8_fp8.py create_weights validates block shapes like fp8.py (validate_fp8_block_shape)
    s = scheme_from_config({"quant_method": "compressed-tensors", "config_groups": {"g": {
        "targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "block",
                                           "block_structure": [128, 128]}}}})
    assert s.weight_block == (128, 128) and s.layout == "fp8_block"


# ----------------------------------------------------------------------------------------- kernels per GPU


LINEAR = LAYERS * (4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336)
K_SUM = LAYERS * (3 * 4096 + 14336)  # input features of qkv, o, gate_up, down per layer


def test_awq_zero_points_are_bf16_on_hopper_only(tmp_path: Path, layout_only: None) -> None:
    # Machete (SM 9.0 exactly: machete.py can_implement) pre-multiplies the zero points by the scales in bf16;
    # Marlin on SM 8.0 and 10.0 keeps them 4-bit packed (marlin_zero_points)
    awq = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}
    machete = LINEAR * (0.5 + 2 / 128 + 2 / 128) + BF16_REST
    marlin = LINEAR * (0.5 + 2 / 128 + 0.5 / 128) + BF16_REST
    assert _weights(tmp_path, awq) == pytest.approx(machete, abs=0.001 * GIB)
    assert _weights(tmp_path, awq, "a100-80") == pytest.approx(marlin, abs=0.001 * GIB)
    assert _weights(tmp_path, awq, "b200") == pytest.approx(marlin, abs=0.001 * GIB)


def test_act_order_at_tp2_on_hopper_puts_row_parallel_layers_on_marlin_with_full_scales(tmp_path: Path) -> None:
    # machete.py can_implement: act-order with K partitioned across devices -> Machete refuses o_proj / down_proj at
    # TP=2, Marlin takes them: g_idx and its sort indices (int32 per K on the rank), no qzeros; and
    # marlin_repeat_scales_on_all_ranks(act_order) keeps the full K / 128 scale rows on every rank.
    # qkv and gate_up stay on Machete: values, scales, the checkpoint's qzeros (4 bit per group) and g_idx + perm.
    tp = 2
    col = LAYERS * 4096 * ((4096 + 2 * 1024) + 2 * 14336) // tp  # qkv + gate_up elements on one rank
    row_n = LAYERS * 4096  # o_proj and down_proj output features (full) per layer
    row = LAYERS * (4096 + 14336) // tp * 4096  # o + down elements on one rank
    machete = col * (0.5 + 2 / 128 + 0.5 / 128) + LAYERS * 2 * 4096 * (4 + 4)  # two layers, K = 4096 each
    marlin = row * 0.5 + (4096 + 14336) // 128 * row_n * 2 + LAYERS * (4096 + 14336) // tp * (4 + 4)
    expected = machete + marlin + BF16_REST / tp + ((2 * LAYERS + 1) * HIDDEN * 2 + ROPE) * (1 - 1 / tp)
    got = _weights(tmp_path, _gptq(desc_act=True), "h200", tp)
    assert got == pytest.approx(expected, abs=0.001 * GIB)


def test_block_fp8_on_ampere_stores_bf16_group_scales(tmp_path: Path) -> None:
    # marlin_utils_fp8.py prepare_fp8_layer_for_marlin: the [128, 128] block scales are repeated into one model-dtype
    # scale per 128 inputs and output channel (K / 128 x N); natively (SM 8.9+) the fp32 block scales stay
    qc = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    ampere = LINEAR * (1 + 2 / 128) + BF16_REST
    hopper = LINEAR * (1 + 4 / (128 * 128)) + BF16_REST
    assert _weights(tmp_path, qc, "a100-80") == pytest.approx(ampere, abs=0.001 * GIB)
    assert _weights(tmp_path, qc) == pytest.approx(hopper, abs=0.001 * GIB)


def _marlin_padded_nk(n: int, k: int, group: int) -> tuple[int, int]:
    """utils/marlin_utils.py marlin_padded_nk, from its docstring: (n % 64, k % 128) or (n % 128, k % 64), the
    cheaper; K stays a multiple of the group."""
    def up(x: int, m: int) -> int:
        return -(-x // m) * m
    options = [(up(n, 64), up(k, math.lcm(128, group))), (up(n, 128), up(k, math.lcm(64, group)))]
    return min(options, key=lambda nk: (nk[0] * nk[1], nk[0] + nk[1]))


def test_marlin_pads_a_misaligned_mlp_width(tmp_path: Path) -> None:
    # channelwise GPTQ (group -1), intermediate 11040: gate_up N = 22080 is a multiple of 64 (no padding); down
    # K = 11040 is neither a multiple of 128 nor of 64 -> Marlin zero-pads it to the cheaper tile family at weight prep
    # (values and the one row of channelwise scales follow)
    inter = 11040
    n, k = _marlin_padded_nk(4096, inter, -1)
    assert (n, k) == (4096, 11072)
    rest = LAYERS * (4096 * (4096 + 2 * 1024) + 4096 * 4096 + 2 * 4096 * inter) * 0.5
    rest_scales = LAYERS * ((4096 + 2 * 1024) + 4096 + 2 * inter) * 2
    down = LAYERS * (n * k * 0.5 + n * 2)
    expected = rest + rest_scales + down + BF16_REST
    got = _weights(tmp_path, _gptq(group_size=-1), "a100-80", inter=inter)
    assert got == pytest.approx(expected, abs=0.001 * GIB)


def test_gptq_8bit_channelwise_on_ampere_is_allspark() -> None:
    # allspark_utils.py check_allspark_supported_dtype_shape: Ampere (8.0 <= cc < 9.0), uint8b128, group -1, K and N
    # multiples of 16; with a group of 128 it refuses and Marlin takes the layer; on the H200 Machete comes first
    shape = quant_layout.Shape(k=4096, n=6144, k_full=4096, n_fused=6144)
    ch8 = scheme_from_config(_gptq(bits=8, group_size=-1))
    kernels = [quant_layout.choose(ch8, shape, 80), quant_layout.choose(scheme_from_config(_gptq(bits=8)), shape, 80),
               quant_layout.choose(ch8, shape, 90)]
    assert [k.name if k else None for k in kernels] == ["AllSparkLinearKernel", "MarlinLinearKernel",
                                                         "MacheteLinearKernel"]


def test_gpt_oss_mxfp4_on_ampere_uses_marlin_padding(tmp_path: Path) -> None:
    # fused_moe/oracle/mxfp4.py: TRITON needs 9.0 <= capability < 11.0 (gpt_oss_triton_kernels_moe.py), so the A100
    # falls to MARLIN, which pads the expert intermediate per partition to 128 and hidden to 256
    cfg = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880, "head_dim": 64,
           "intermediate_size": 2880, "num_hidden_layers": 2, "num_attention_heads": 64, "num_key_value_heads": 8,
           "num_local_experts": 32, "num_experts_per_tok": 4, "vocab_size": 201088, "sliding_window": 128,
           "layer_types": ["sliding_attention", "full_attention"], "max_position_embeddings": 4096,
           "torch_dtype": "bfloat16", "tie_word_embeddings": False, "quantization_config": {"quant_method": "mxfp4"}}
    a100 = make(recipe_for(tmp_path, cfg, hardware="a100-80", max_model_len=4096)).ranks[0].weights_gib * GIB
    bf16_cfg = {k: v for k, v in cfg.items() if k != "quantization_config"}
    bf16 = make(recipe_for(tmp_path, bf16_cfg, hardware="a100-80", max_model_len=4096)).ranks[0].weights_gib * GIB
    layers, experts, h, i = 2, 32, 2880, 2880
    bias = layers * experts * (2 * i + h) * 2  # w13 / w2 biases, bf16
    non_expert = bf16 - layers * experts * 3 * h * i * 2 - bias
    hidden, inter = 3072, 2944  # 2880 up to 256 / 128 (mxfp4_round_up_hidden_size_and_intermediate_size, MARLIN)
    padded = layers * experts * (3 * hidden * inter * (0.5 + 1 / 32) + (2 * inter + hidden) * 2)
    assert a100 == pytest.approx(non_expert + padded, abs=0.002 * GIB)


def test_native_nvfp4_and_fp8_keep_the_checkpoint_layout(tmp_path: Path) -> None:
    # CUTLASS FP4 on SM 10.0 and FP8 CUTLASS on SM 9.0 keep the loaded sizes (aligned shapes: no padding)
    nvfp4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}
    assert _weights(tmp_path, nvfp4, "b200") == pytest.approx(LINEAR * (0.5 + 1 / 16) + BF16_REST, abs=0.001 * GIB)
    fp8 = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    assert _weights(tmp_path, fp8) == pytest.approx(LINEAR * 1 + BF16_REST, abs=0.001 * GIB)


# ------------------------------------------------------------------------------- against the H200 grid logs


def _logged_kernels(text: str) -> set[str]:
    """The linear kernels vLLM names at load: 'Using MacheteLinearKernel for ...' / 'Selected X for ...'."""
    import re
    return set(re.findall(r"(?:Using|Selected) (\w+Kernel) for (?:AutoAWQ|AutoGPTQ|CompressedTensors|Fp8)", text))


def test_the_kernel_chosen_per_layer_is_the_one_each_h200_grid_log_names(tmp_path: Path) -> None:
    # tests/data/calibration/h200-grid/q*.log (vLLM 0.26.0 on an H200): the planner's kernel for every quantized dense
    # layer must be the kernel vLLM logged for that checkpoint
    from benchmarks import plan_accuracy as pa

    from forklift.model.load import spec_for
    from forklift.plan.make import deployment_of

    checked = 0
    for point, log, _ in pa.points():
        if log is None or not point["id"].startswith("q"):
            continue
        logged = _logged_kernels(log.read_text(errors="replace"))
        deployment = deployment_of(pa.recipe_for(point, tmp_path))
        spec = spec_for(deployment.recipe.model).spec
        linears = [t for t, _ in quant_layout.quantized_linears(spec, spec.quant, 1)]
        layout = quant_layout.StoredLayout(spec, spec.quant, linears, tp=1, capability="9.0", act_bytes=2.0)
        ours = {found[0].name for t in linears if (found := layout.kernel_for(t)) is not None}
        if point["model"].endswith("gptq-nolist"):  # dummy load: no layer quantized, no kernel logged
            assert not logged
            continue
        assert ours == logged, (point["id"], ours, logged)
        checked += 1
    assert checked >= 8

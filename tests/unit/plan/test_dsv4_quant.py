"""fp8 checkpoints with MXFP4 routed experts, planned from vLLM 0.32.0's source: DeepSeek-V4's deepseek_v4_fp8
(models/deepseek_v4/quant_config.py DeepseekV4FP8Config) and MiMo-V2's fp8 + store_dtype mxfp4
(layers/quantization/fp8.py Fp8Config.get_quant_method).

Bytes per parameter by hand from the create_weights of vLLM's methods: Fp8LinearMethod holds an e4m3 weight and one
weight_scale_inv per 128 x 128 block, float8_e8m0fnu (1 byte) when the config's is_scale_e8m0 (expert_dtype fp4)
and float32 otherwise; Mxfp4MoEMethod holds uint8 values two per byte and one uint8 e8m0 scale per 32.

The totals below were counted from the parameters and buffers vLLM builds (scripts/vllm/model_bytes_in_process.py on
the meta device, one process per TP rank, with only the fp8 kernel choice and the MXFP4 backend choice stubbed,
2026-12-03; docs/lab-notebook.md): they are measurements, not the planner's output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forklift import recipe as recipes
from forklift.errors import ModelError
from forklift.model import archrules
from forklift.model.quant import scheme_from_config
from forklift.model.tensors import model_tensors
from forklift.plan import make
from forklift.plan.weights import weight_table
from tests.helpers import CALIBRATION
from tests.unit.plan.conftest import recipe_for

DATA = Path(__file__).resolve().parents[2] / "data" / "configs"
FLASH = json.loads((DATA / "deepseek-v4-flash.json").read_text())
TINY = json.loads((CALIBRATION / "cpu-tiny" / "dsv4.config.json").read_text())
MIMO = json.loads((CALIBRATION / "cpu-tiny" / "mimo_v2.config.json").read_text())
QC = {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0", "activation_scheme": "dynamic",
      "weight_block_size": [128, 128]}
E8M0_BLOCK = 1 + 1 / (128 * 128)
FP32_BLOCK = 1 + 4 / (128 * 128)
MXFP4 = 0.5 + 1 / 32


def _dsv4(experts: str | None = "fp4", **qc: Any) -> dict[str, Any]:
    cfg = {**TINY, "quantization_config": {**QC, **qc}}
    return cfg if experts is None else {**cfg, "expert_dtype": experts}


def _bytes(cfg: dict[str, Any], tp: int) -> int:
    spec = archrules.from_config(cfg)
    table = weight_table(spec, spec.quant, 2.0, tp, 1, include_mtp=False)
    total = table.stage(0, spec.num_layers, True, True) + sum(c.nbytes for c in spec.rope_caches)
    assert total == int(total)
    return int(total)


def test_deepseek_v4_fp8_is_read_by_expert_dtype() -> None:
    fp4 = archrules.from_config(_dsv4("fp4")).quant
    assert (fp4.method, fp4.linear_bytes, fp4.expert_bytes) == ("deepseek_v4_fp8", E8M0_BLOCK, MXFP4)
    assert archrules.from_config(_dsv4(None)).quant == fp4  # DeepseekV4FP8Config.expert_dtype defaults to fp4
    fp8 = archrules.from_config(_dsv4("fp8")).quant  # Flash-Base: Fp8MoEMethod, float32 block scales
    assert (fp8.linear_bytes, fp8.expert_bytes) == (FP32_BLOCK, FP32_BLOCK)
    named = archrules.from_config({**_dsv4("fp4"), "quantization_config": {**QC, "quant_method": "deepseek_v4_fp8"}})
    assert named.quant == fp4


def test_what_deepseek_v4_fp8_leaves_unquantized() -> None:
    """quant_config=None in vLLM: compressor fused_wkv_wgate, the indexer's weights_proj, the gate; lm_head is a
    ParallelLMHead; hc / ape / sinks are plain fp32 parameters. The rest of the linears are fp8, experts MXFP4."""
    spec = archrules.from_config(_dsv4("fp4"))
    fmt = {t.module.split(".", 3)[-1] if ".layers." in t.module else t.module:
           spec.quant.format_for(t.module, linear=t.linear, role=t.role, base="bf16") for t in model_tensors(spec)}
    for name in ("attn.compressor.fused_wkv_wgate", "attn.indexer.weights_proj", "mlp.gate", "lm_head",
                 "model.embed_tokens"):
        assert fmt[name] == "bf16", name
    for name in ("attn.fused_wqa_wkv", "attn.wq_b", "attn.wo_a", "attn.wo_b", "attn.indexer.wq_b"):
        assert fmt[name] == "fp8_block_e8m0", name
    assert fmt["mlp.experts"] == "mxfp4"


@pytest.mark.parametrize(("expert_dtype", "counted"), [("fp4", 144_107_756), ("fp8", 145_583_732)])
def test_tiny_weights_equal_what_vllm_builds(expert_dtype: str, counted: int) -> None:
    """cpu-tiny/dsv4 with the published quantization_config, TP 1: fp32 84,993,044 (rope caches, hc, ape, sinks,
    bias), bf16 53,511,168, e4m3 3,538,944, e8m0 216, uint8 1,671,168 (MXFP4 experts), int32 393,216 as counted for
    fp4; fp8 experts: e4m3 6,684,672 with float32 block scales."""
    assert _bytes(_dsv4(expert_dtype), 1) == counted


@pytest.mark.parametrize(("tp", "counted"), [(1, 156_543_260_892), (2, 79_193_833_052), (4, 40_519_119_132)])
def test_published_flash_weights_equal_what_vllm_builds(tp: int, counted: int) -> None:
    """DeepSeek-V4-Flash's published config (fp8 block 128 ue8m0, expert_dtype fp4), bytes per TP rank; at TP 2:
    uint8 73,584,869,376 (experts), e4m3 3,152,019,456, e8m0 192,384, bf16 1,769,315,584, fp32 678,128,092,
    int32 9,308,160."""
    assert _bytes(FLASH, tp) == counted


def test_mixed_formats_are_refused_where_vllm_uses_another_method() -> None:
    with pytest.raises(ModelError, match="ModelOptNvFp4FusedMoE"):
        archrules.from_config(_dsv4("fp4", moe_quant_algo="nvfp4"))
    with pytest.raises(ModelError, match="expert_dtype"):
        archrules.from_config(_dsv4("int4"))
    with pytest.raises(ModelError, match="store_dtype 'nvfp4'"):
        scheme_from_config({"quant_method": "fp8", "store_dtype": "nvfp4"})


def test_mimo_store_dtype_mxfp4_quantized_roles_equal_what_vllm_builds() -> None:
    """cpu-tiny/mimo_v2 with quantization_config {fp8, store_dtype mxfp4, dynamic}, TP 1, counted: uint8 2,924,544
    (MXFP4 experts) and e4m3 4,161,536 (every other linear). The rest of the 553,404 bytes vLLM builds beyond the
    plan are outside the quantization (not counted by the planner for MiMo-V2 before either): the bf16 rope cache
    (524,288), the fp32 router gate and its bias (28,672 + 112 over the bf16 planned), the per-tensor fp8
    weight_scale (140) and the attention's q / k / v / prob scales (192)."""
    spec = archrules.from_config({**MIMO, "quantization_config": {"quant_method": "fp8", "store_dtype": "mxfp4",
                                                                  "activation_scheme": "dynamic"}})
    experts = fp8 = 0.0
    for t in model_tensors(spec):
        per = spec.quant.bytes_for(t.module, linear=t.linear, role=t.role, base_bytes=2.0)
        if t.role == "experts":
            experts += t.numel * per
        elif per == 1.0 and not t.dtype_bytes:
            fp8 += t.numel
    assert (experts, fp8) == (2_924_544, 4_161_536)


def test_published_mimo_plans_with_experts_at_mxfp4(tmp_path: Path) -> None:
    """MiMo-V2.6-Flash's published quantization (fp8, store_dtype mxfp4) against the same model with plain fp8:
    only the routed experts change, from 1 byte to 0.53125 per parameter."""
    cfg = json.loads((DATA / "mimo-v2.6-flash.json").read_text())
    plain = {**cfg, "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}}
    spec = archrules.from_config(cfg)
    assert spec.moe is not None
    routed = sum(t.numel for t in model_tensors(spec) if t.role == "experts")

    def weights(c: dict[str, Any]) -> int:
        plan = make(recipe_for(tmp_path, c, hardware="gb10", nodes=2, tp=2, max_model_len=131072),
                    vllm_version="0.32.0")
        return round(plan.ranks[0].weights_gib * 2**30)

    assert abs(weights(plain) - weights(cfg) - routed / 2 * (1 - MXFP4)) < 2**30 / 1000  # weights_gib: 3 places


def test_bundled_flash_config_is_the_test_geometry() -> None:
    bundled = json.loads((Path(archrules.__file__).parent / "configs" / "deepseek-v4-flash.json").read_text())
    assert {k: v for k, v in bundled.items() if k != "attention_bias"} == FLASH


@pytest.mark.parametrize(("name", "counted"), [("deepseek-v4-flash-2x-spark", 79_193_833_052),
                                               ("deepseek-v4-flash-4x-spark", 40_519_119_132)])
def test_bundled_spark_recipes_plan_the_counted_weights(name: str, counted: int) -> None:
    """The bundled recipes on GB10 (capability 12.1: the fp8 block kernel keeps the checkpoint layout) without their
    MTP draft (test_dsv4_mtp.py adds it) plan each rank's weights at what vLLM builds for that TP, and a KV pool for
    the 1M context."""
    recipe = recipes.load(name)
    plan = make(recipe.model_copy(update={"serve": recipe.serve.model_copy(update={"speculative": None})}),
                vllm_version="0.32.0")
    assert [r.weights_gib for r in plan.ranks] == [round(counted / 2**30, 3)] * len(plan.ranks)
    assert plan.fits and plan.kv_tokens >= 1_048_576

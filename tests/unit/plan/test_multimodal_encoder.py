"""serve.multimodal: what each knob changes in the plan, against hand arithmetic from the config's shapes
(Qwen3.6-27B: a 27-block Qwen3.5 ViT, hidden 1152, patch 16, merge 2, out 5120) and vLLM 0.26.0's rules
(plan/encoder.py cites them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from forklift.launch.flags import serve_flags
from forklift.plan import make
from forklift.plan.result import Plan
from forklift.recipe import validate
from forklift.recipe.schema import Serve

CONFIG = Path(__file__).parents[2] / "data" / "calibration" / "h200-hybrid" / "qwen36-27b-mtp-vl.config.json"
GIB = 2**30
# Qwen3.5 ViT parameters, by hand: patch embed Conv3d 3*2*16*16*1152 + bias, 2304 position rows, 27 blocks of
# (2 LayerNorms, qkv + bias, proj + bias, fc1 + bias, fc2 + bias), merger (LayerNorm, 4608^2 + bias, 4608*5120 + bias)
H, INTER, WIDE, OUT = 1152, 4304, 4608, 5120
BLOCK = 4 * H + (3 * H * H + 3 * H) + (H * H + H) + (H * INTER + INTER) + (INTER * H + H)
TOWER = (3 * 2 * 16 * 16 * H + H) + 2304 * H + 27 * BLOCK + 2 * H + (WIDE * WIDE + WIDE) + (WIDE * OUT + OUT)


def _plan(tmp: Path, serve: dict[str, Any], tp: int = 1) -> Plan:
    model = tmp / "m"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(CONFIG.read_text())
    return make(validate({"model": {"source": str(model), "load_format": "dummy"},
                          "nodes": [{"host": "h", "hardware": "h200"}], "parallel": {"tp": tp},
                          "serve": {"max_model_len": 32768, **serve}}), vllm_version="0.26.0")


def test_a_tower_limited_to_zero_items_is_not_built(tmp_path: Path) -> None:
    full = _plan(tmp_path, {})
    text_only = _plan(tmp_path, {"multimodal": {"limit_mm_per_prompt": {"image": 0, "video": 0}}})
    dropped = (full.ranks[0].weights_gib - text_only.ranks[0].weights_gib) * GIB
    assert abs(dropped - TOWER * 2) < 0.002 * GIB
    assert any("encoder profiling: none" in n and "not built" in n for n in text_only.notes)


def test_one_modality_left_keeps_the_tower(tmp_path: Path) -> None:
    video_only = _plan(tmp_path, {"multimodal": {"limit_mm_per_prompt": {"image": 0}}})
    assert video_only.ranks[0].weights_gib == _plan(tmp_path, {}).ranks[0].weights_gib


def test_the_encoder_budget_sets_how_many_dummy_images_are_held(tmp_path: Path) -> None:
    """max_num_batched_tokens 40,000 >= two 16,384-token images (16,777,216 px / 32^2): two items, and their
    outputs (tokens x 5120 x 2 B) are held through the language model's dummy run."""
    plan = _plan(tmp_path, {"max_num_batched_tokens": 40000})
    note = next(n for n in plan.notes if n.startswith("multimodal encoder profiling"))
    held = 2 * 16384 * OUT * 2 / GIB
    assert "2 dummy image(s) of 16,384 tokens" in note and f"{held:.2f} GiB" in note


def test_max_pixels_shrinks_the_dummy_image(tmp_path: Path) -> None:
    """1,048,576 px / 32^2 = 1,024 tokens per image; the budget stays max_num_batched_tokens (8,192 on the H200
    default), so 8 images are profiled."""
    plan = _plan(tmp_path, {"multimodal": {"max_pixels": 1024 * 1024}})
    assert any("8 dummy image(s) of 1,024 tokens" in n for n in plan.notes)


def test_data_mode_keeps_a_whole_tower_on_each_tp_rank(tmp_path: Path) -> None:
    weights_mode = _plan(tmp_path, {}, tp=2)
    data_mode = _plan(tmp_path, {"multimodal": {"mm_encoder_tp_mode": "data"}}, tp=2)
    extra = (data_mode.ranks[0].weights_gib - weights_mode.ranks[0].weights_gib) * GIB
    assert abs(extra - TOWER * 2 / 2) < 0.01 * GIB


def test_multimodal_knobs_render_as_vllm_flags() -> None:
    serve = Serve.model_validate({"multimodal": {"limit_mm_per_prompt": {"video": 0, "image": 2},
                                                 "skip_mm_profiling": True, "mm_encoder_tp_mode": "data",
                                                 "max_pixels": 1048576}})
    flags = serve_flags(serve)
    assert flags[flags.index("--limit-mm-per-prompt") + 1] == '{"image": 2, "video": 0}'
    assert "--skip-mm-profiling" in flags
    assert flags[flags.index("--mm-encoder-tp-mode") + 1] == "data"
    assert flags[flags.index("--mm-processor-kwargs") + 1] == '{"max_pixels": 1048576}'
    assert not any(f.startswith(("--limit-mm", "--mm-", "--skip-mm")) for f in serve_flags(Serve()))

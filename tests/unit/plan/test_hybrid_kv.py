"""vLLM's hybrid KV cache manager: block-size raising, Mamba page padding, groups, tokens and concurrency.

The public figures (tests/data/configs/SOURCES.md) check the arithmetic given vLLM's own pool; no constant is
fitted to them. The version rules are read from vLLM's source (plan/data/vllm.yaml cites where).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forklift.model.archrules import from_config
from forklift.model.spec import ModelSpec
from forklift.plan import make, rules
from forklift.plan.kvcache import KvLayout, layout
from forklift.plan.kvspecs import KvInputs, kv_config, layer_specs
from tests.unit.plan.conftest import recipe_for

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "tests" / "data" / "configs"
GRID = ROOT / "scripts" / "gpu" / "grid" / "models"
GIB = 2**30


def _cfg(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIGS / name).read_text())
    return data


def _layout(spec: ModelSpec, *, tp: int = 1, kv: str = "auto", length: int = 131072, prefix: bool | None = None,
            version: str = "0.26.0", capability: str = "9.0") -> KvLayout:
    vr = rules.rules_for(version)
    x = KvInputs(tp=tp, kv_dtype=kv, model_dtype_bytes=2, capability=capability, platform="cuda",
                 max_model_len=length, mnbt=8192, block=None, amx=False, dcp=1, pp=1, runner="v1", num_spec=0,
                 include_mtp=False, prefix_caching=prefix)
    return layout(layer_specs(spec, 0, spec.num_layers, True, x, vr), kv_config(spec, x, vr))


def test_qwen3_6_35b_on_an_rtx_5090_log() -> None:
    """noonghunna/club-3090#612 (0.24.0): 5.98 GiB -> 567,978 tokens, 4.33x for 131,072."""
    lay = _layout(from_config(_cfg("qwen3.5-35b-a3b.json")), kv="fp8", prefix=True, version="0.24.0",
                  capability="12.0")
    assert lay.block_size == 2096 and lay.padded_state is None and lay.group_size == 10
    blocks = lay.num_blocks(int(5.98 * GIB))
    assert lay.tokens(blocks) == 567_978 and f"{lay.concurrency(blocks):.2f}" == "4.33"


def test_qwen3_5_27b_tp2_log() -> None:
    """mitchross/talos-argocd-proxmox#1995: TP 2, fp8 KV, block 1568, 4.99 GiB -> 302,921 tokens, 2.31x."""
    lay = _layout(from_config(_cfg("qwen3.5-27b.json")), tp=2, kv="fp8", prefix=True, version="0.24.0",
                  capability="8.6")
    assert lay.block_size == 1568 and lay.group_size == 16
    blocks = lay.num_blocks(int(4.99 * GIB))
    assert lay.tokens(blocks) == 302_921 and f"{lay.concurrency(blocks):.2f}" == "2.31"


def test_qwen3_5_9b_shape_block_and_padding() -> None:
    """vllm-project/vllm#37467: 'Setting attention block size to 528 tokens ... Padding mamba page size by 0.76%'."""
    cfg = {**_cfg("qwen3.5-35b-a3b.json")}
    text = dict(cfg["text_config"]) if "text_config" in cfg else cfg
    text["num_key_value_heads"] = 4
    spec = from_config({**cfg, "text_config": text} if "text_config" in cfg else text)
    lay = _layout(spec, prefix=False)
    assert lay.block_size == 528 and lay.padded_state is not None
    state = max(b.spec.state for b in lay.buckets if b.spec.kind == "mamba")
    assert f"{100 * (lay.padded_state - state) / state:.2f}" == "0.76"


def test_prefix_caching_default_for_hybrids_changes_with_the_release() -> None:
    spec = from_config(json.loads((GRID / "qwen3next-8L.config.json").read_text()))
    off = _layout(spec, length=65536, version="0.26.0")  # 0.26/0.27: opt-in -> mode none, 1 state block
    on = _layout(spec, length=65536, version="0.28.0")  # 0.28+: on -> align, 2 state blocks
    assert off.cfg.mamba_mode == "none" and on.cfg.mamba_mode == "align"
    assert off.block_size == on.block_size == 544
    assert on.blocks_per_request() - off.blocks_per_request() == 3  # three GDN groups, one more block each


def test_nemotron_all_mode_aligns_mamba_blocks_to_its_chunk() -> None:
    spec = from_config(json.loads((GRID / "nemotronh-14L.config.json").read_text()))
    lay = _layout(spec, length=65536, prefix=True, version="0.26.0")
    assert lay.cfg.mamba_mode == "all" and lay.mamba_block % 256 == 0
    per_mamba = lay._blocks_for(next(b.spec for b in lay.buckets if b.spec.kind == "mamba"), 65536)
    assert per_mamba == -(-65536 // lay.mamba_block)
    assert _layout(spec, length=65536, prefix=True, version="0.32.0").cfg.mamba_mode == "align"


def test_mla_hybrid_block_is_a_multiple_of_128_from_0_33() -> None:
    spec = from_config(json.loads((GRID / "kimilinear-8L.config.json").read_text()))
    assert _layout(spec, length=65536, version="0.26.0").block_size == 1888
    assert _layout(spec, length=65536, prefix=False, version="0.33.0").block_size % 128 == 0


def test_plan_headline_is_max_concurrency_and_int_tokens(tmp_path: Path) -> None:
    cfg = json.loads((GRID / "qwen3next-8L.config.json").read_text())
    plan = make(recipe_for(tmp_path, cfg, max_model_len=65536), vllm_version="0.26.0")
    assert plan.block_size == 544
    assert plan.kv_tokens == int(plan.num_blocks / (-(-65536 // 544) + 3) * 65536)
    assert any("hybrid KV cache" in n and "544" in n for n in plan.notes)


@pytest.mark.parametrize(("version", "rule"), [("0.14.0", "global_min"), ("0.13.0", "per_worker"),
                                               ("0.17.0", "per_worker")])
def test_pp_startup_check_per_release(tmp_path: Path, version: str, rule: str) -> None:
    """0.14-0.16 compared the whole model's KV per request with one stage's memory (nw §5.2)."""
    cfg = json.loads((ROOT / "scripts" / "gpu" / "models" / "llama8b-like.config.json").read_text())
    recipe = recipe_for(tmp_path, cfg, nodes=2, pp=2, max_model_len=32768, gpu_memory_utilization=0.085)
    plan = make(recipe, vllm_version=version)
    assert rules.rules_for(version).kv_fit_check == rule
    per_stage = plan.ranks[0].kv_needed_gib
    if rule == "global_min":
        assert not plan.fits and plan.error is not None and f"{2 * per_stage:.2f}" in plan.error
    else:
        assert plan.fits


def test_a_state_kind_without_a_cache_shape_is_refused_naming_the_known_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cache kinds dispatch through kvspecs' tables: a kind missing from STATE_KINDS is a PlanError, not a guess."""
    from forklift.errors import PlanError
    from forklift.plan import kvspecs

    spec = from_config(_cfg("qwen3.5-27b.json"))
    assert spec.state is not None and spec.state.kind in kvspecs.STATE_KINDS
    monkeypatch.delitem(kvspecs.STATE_KINDS, spec.state.kind)
    with pytest.raises(PlanError) as err:
        _layout(spec)
    assert repr(spec.state.kind) in err.value.message and "mamba2" in (err.value.fix or "")

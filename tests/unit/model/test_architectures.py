"""Architectures as data: each family's layer rule, read from config.json the way vLLM's model code reads it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forklift.errors import ModelError, UnknownArchitectureError
from forklift.model import archrules
from forklift.model.archrules import from_config
from forklift.model.tensors import param_count

ROOT = Path(__file__).resolve().parents[3]
GRID = ROOT / "scripts" / "gpu" / "grid" / "models"
CONFIGS = ROOT / "tests" / "data" / "configs"


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _mixers(cfg: dict[str, Any]) -> list[str]:
    return [layer.mixer for layer in from_config(cfg).layers]


@pytest.mark.parametrize("path", sorted(GRID.glob("*.config.json")), ids=lambda p: p.stem)
def test_every_grid_config_is_described(path: Path) -> None:
    spec = from_config(_load(path))
    assert spec.num_layers == len(spec.layers) > 0
    assert param_count(spec) > 0


def test_qwen3_next_layer_types_and_published_size() -> None:
    cfg = _load(CONFIGS / "qwen3-next-80b-a3b.json")  # no layer_types: vLLM's interval rule (full every 4th)
    mixers = _mixers(cfg)
    assert mixers.count("attention") == 12 and mixers.count("gdn") == 36
    assert all(m == "attention" for i, m in enumerate(mixers) if (i + 1) % 4 == 0)
    spec = from_config(cfg)
    assert param_count(spec) == 79_674_391_296  # the size a public test asserts for this shape
    assert spec.state is not None and spec.state.ssm_dtype is None  # no hook: the state takes the model dtype


def test_qwen3_5_reads_text_config_and_its_ssm_dtype_hook() -> None:
    spec = from_config(_load(CONFIGS / "qwen3.5-27b.json"))
    assert spec.family == "qwen3_5" and spec.num_layers == 64
    assert [layer.mixer for layer in spec.layers].count("attention") == 16
    assert spec.state is not None and spec.state.ssm_dtype == "float32" and spec.state.heads == 48


def test_nemotron_h_pattern_decides_mixer_and_mlp() -> None:
    cfg = _load(GRID / "nemotronh-14L.config.json")
    spec = from_config(cfg)
    pattern = cfg["hybrid_override_pattern"]
    assert [layer.mixer for layer in spec.layers] == [
        {"M": "mamba2", "*": "attention", "-": "none"}[ch] for ch in pattern]
    assert [layer.mlp for layer in spec.layers] == ["dense" if ch == "-" else "none" for ch in pattern]
    assert spec.state is not None and spec.state.ssm_dtype == "float32"  # NemotronH hook default
    assert spec.supports_mamba_prefix_caching


def test_kimi_linear_kda_layers_are_one_indexed() -> None:
    cfg = _load(GRID / "kimilinear-8L.config.json")
    kda = set(cfg["linear_attn_config"]["kda_layers"])
    assert _mixers(cfg) == ["kda" if i + 1 in kda else "attention" for i in range(cfg["num_hidden_layers"])]
    assert from_config(cfg).attention == "mla"


def test_gpt_oss_slides_on_even_layers_whatever_layer_types_says() -> None:
    cfg = _load(GRID / "gptoss-8L.config.json")
    cfg["layer_types"] = ["full_attention"] * cfg["num_hidden_layers"]  # vLLM ignores it
    assert _mixers(cfg) == ["sliding" if i % 2 == 0 else "attention" for i in range(cfg["num_hidden_layers"])]


def test_dsa_indexer_follows_vllm_not_indexer_types() -> None:
    cfg = _load(CONFIGS / "deepseek-v3.2-exp.json")
    assert archrules.indexer_owners(cfg, 61) == tuple(range(61))  # defaults: freq 1 -> every layer
    glm52_like = {**cfg, "index_topk_freq": 4, "index_skip_topk_offset": 3, "indexer_types": ["full"] * 61}
    owners = archrules.indexer_owners(glm52_like, 78)
    assert owners[:4] == (0, 1, 2, 6) and all(max(i - 2, 0) % 4 == 0 for i in owners)
    only_types = {**cfg, "indexer_types": ["full", "shared", "shared", "shared"] * 20}
    assert len(archrules.indexer_owners(only_types, 78)) == 78
    pattern = {**cfg, "index_topk_pattern": "FS" * 39}
    assert archrules.indexer_owners(pattern, 78) == tuple(range(0, 78, 2))


def test_minimax_m2_is_plain_gqa_with_routing_bias() -> None:
    spec = from_config(_load(GRID / "minimaxm2-6L.config.json"))
    assert spec.family == "minimax_m2" and {layer.mixer for layer in spec.layers} == {"attention"}
    assert spec.moe is not None and spec.moe.n_routed == 256 and spec.moe.router_bias


@pytest.mark.parametrize("arch", ["DeepseekV41ForCausalLM", "Glm5NextForCausalLM", "MiniMaxM1ForCausalLM"])
def test_refused_architectures_say_why(arch: str) -> None:
    with pytest.raises(UnknownArchitectureError) as err:
        from_config({"architectures": [arch], "hidden_size": 64, "num_hidden_layers": 2})
    assert arch in err.value.message and "not model" in err.value.message or "removed" in err.value.message


def test_qwen38_flash_next_is_refused_naming_the_release_and_the_missing_pieces() -> None:
    """Qwen3.8-Flash-Next's config says Qwen4ExpForConditionalGeneration over a Qwen3.5-style text_config: planning
    it as qwen3_5 would drop its sparse-attention indexer and n-gram tables, so the plan names them and the release."""
    cfg = {"architectures": ["Qwen4ExpForConditionalGeneration"], "model_type": "qwen4_exp",
           "text_config": {"hidden_size": 2560, "num_hidden_layers": 48, "full_attention_interval": 4}}
    with pytest.raises(UnknownArchitectureError) as err:
        from_config(cfg)
    msg = err.value.message
    assert "0.29.0" in msg and "indexer" in msg and "n-gram" in msg
    assert "models/qwen4_exp/nvidia/model.py" in msg and "QSACompressedKeyCache" in msg and "CircularBufferSpec" in msg


def test_unknown_hybrid_is_named_with_what_its_config_shows() -> None:
    cfg = {"architectures": ["NewHybridForCausalLM"], "hybrid_override_pattern": "M*", "kv_lora_rank": 512}
    with pytest.raises(UnknownArchitectureError) as err:
        from_config(cfg)
    assert "hybrid_override_pattern" in err.value.message and "kv_lora_rank" in err.value.message
    assert err.value.fix and "look-alike" in err.value.fix


def test_missing_state_key_is_named() -> None:
    cfg = _load(GRID / "qwen3next-8L.config.json")
    del cfg["linear_num_value_heads"]
    with pytest.raises(ModelError) as err:
        from_config(cfg)
    assert "linear_num_value_heads" in err.value.message


@pytest.mark.parametrize("bad", [True, "64", 48.5, [48]])
def test_a_config_integer_that_is_not_one_is_named_not_read_as_one(bad: object) -> None:
    cfg = _load(GRID / "qwen3next-8L.config.json")
    cfg["linear_num_value_heads"] = bad
    with pytest.raises(ModelError) as err:
        from_config(cfg)
    assert "'linear_num_value_heads' must be an integer" in err.value.message

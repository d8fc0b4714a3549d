"""Bad input becomes a ForkliftError subclass that says what is wrong and what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from forklift import recipe as recipes
from forklift.errors import HardwareError, ModelError, PlanError, UnknownArchitectureError
from forklift.plan import make
from tests.unit.plan.conftest import recipe_for

DENSE = {"architectures": ["LlamaForCausalLM"], "hidden_size": 512, "num_hidden_layers": 4,
         "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 1024,
         "vocab_size": 1000, "max_position_embeddings": 4096}


def test_unknown_architecture_says_what_is_missing_and_never_suggests_a_look_alike(tmp_path: Path) -> None:
    cfg = {**DENSE, "architectures": ["MysteryForCausalLM"], "layer_types": ["linear_attention", "full_attention"] * 2}
    with pytest.raises(UnknownArchitectureError) as err:
        make(recipe_for(tmp_path, cfg))
    message = err.value.message
    assert "MysteryForCausalLM" in message
    # names what a plan would need, and what the config itself shows (a hybrid layer list)
    assert "KV cache" in message and "state" in message and "linear_attention" in message
    assert err.value.fix and "architectures.yaml" in err.value.fix
    assert ": dense" not in err.value.fix and "FAMILY" not in err.value.fix  # no relabelling advice


def test_refused_architecture_names_the_layout_it_lacks(tmp_path: Path) -> None:
    cfg = {**DENSE, "architectures": ["DeepseekV41ForCausalLM"]}
    with pytest.raises(UnknownArchitectureError) as err:
        make(recipe_for(tmp_path, cfg))
    assert "DeepseekV41ForCausalLM" in err.value.message and "compress" in err.value.message


def test_missing_field_is_named(tmp_path: Path) -> None:
    cfg = {k: v for k, v in DENSE.items() if k != "intermediate_size"}
    with pytest.raises(ModelError) as err:
        make(recipe_for(tmp_path, cfg))
    assert "intermediate_size" in err.value.message and err.value.fix


def test_tp_not_dividing_heads(tmp_path: Path) -> None:
    with pytest.raises(PlanError) as err:
        make(recipe_for(tmp_path, DENSE, hardware="h100", tp=3, max_model_len=1024))
    assert "heads" in err.value.message and err.value.fix


def test_pp_larger_than_layers(tmp_path: Path) -> None:
    with pytest.raises(PlanError) as err:
        make(recipe_for(tmp_path, DENSE, hardware="gb10", nodes=5, pp=5, max_model_len=1024))
    assert "layers" in err.value.message and err.value.fix


def test_unknown_hardware_lists_known_profiles(tmp_path: Path) -> None:
    with pytest.raises(HardwareError) as err:
        make(recipe_for(tmp_path, DENSE, hardware="h300", max_model_len=1024))
    assert err.value.fix is not None
    for known in ("gb10", "h100", "h200", "b200", "cpu"):
        assert known in err.value.fix


def test_partition_not_summing_to_layers() -> None:
    recipe = recipes.load("glm-5.2-reap-3x-spark-pp3", ["parallel.pp_layer_partition=[26,27,26]"])
    with pytest.raises(PlanError) as err:
        make(recipe)
    assert "78" in err.value.message


def test_does_not_fit_is_reported_not_raised(tmp_path: Path) -> None:
    plan = make(recipe_for(tmp_path, DENSE, hardware="cpu", cpu_kv_cache_gib=0.001, max_model_len=4096))
    assert not plan.fits
    assert plan.error is not None and "max seq len (4096)" in plan.error
    assert 0 < plan.largest_max_model_len < 4096
    assert str(plan.largest_max_model_len) in plan.error

"""serve.speculative: typed per method, rendered as vLLM's --speculative-config JSON."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from forklift import recipe as recipes
from forklift.recipe.schema import Serve
from forklift.recipe.speculative import SpeculativeConfig
from forklift.speculative.render import config_dict, config_json, flags
from tests.helpers import launch_of


def _spec(cfg: dict[str, object]) -> SpeculativeConfig:
    spec = Serve(speculative=cfg).speculative
    assert spec is not None
    return spec


def test_ngram_renders_vllm_docs_benchmark_config() -> None:
    # vLLM docs/benchmarking/cli.md @0.33: --speculative-config '{"method": "ngram", "num_speculative_tokens": 5,
    # "prompt_lookup_max": 5, "prompt_lookup_min": 2}'
    text = config_json(_spec({"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 5,
                              "prompt_lookup_min": 2}))
    assert json.loads(text) == {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 5,
                                "prompt_lookup_min": 2}
    assert text.startswith('{"method":"ngram","num_speculative_tokens":5,') and " " not in text


def test_null_knobs_are_left_to_vllm_and_k_is_always_sent() -> None:
    assert config_dict(_spec({"method": "suffix"})) == {"method": "suffix", "num_speculative_tokens": 1}
    assert config_dict(_spec({"method": "eagle3", "model": "/d"})) == {
        "method": "eagle3", "num_speculative_tokens": 1, "model": "/d"}


@pytest.mark.parametrize("alias", ["deepseek_mtp", "glm4_moe_mtp", "qwen3_next_mtp", "step5_mtp"])
def test_deprecated_mtp_aliases_render_as_mtp(alias: str) -> None:
    assert config_dict(_spec({"method": alias, "num_speculative_tokens": 2})) == {
        "method": "mtp", "num_speculative_tokens": 2}


def test_extra_keys_pass_through_after_the_typed_ones() -> None:
    d = config_dict(_spec({"method": "mtp", "extra": {"rejection_sample_method": "standard"}}))
    assert list(d) == ["method", "num_speculative_tokens", "rejection_sample_method"]


def test_dynamic_k_renders_as_lists() -> None:
    d = config_dict(_spec({"method": "mtp", "num_speculative_tokens": 3,
                           "num_speculative_tokens_per_batch_size": [[1, 8, 3], [9, 64, 1]]}))
    assert d["num_speculative_tokens_per_batch_size"] == [[1, 8, 3], [9, 64, 1]]


@pytest.mark.parametrize(("cfg", "words"), [
    ({"method": "ngram", "prompt_lookup_min": 5, "prompt_lookup_max": 2},
     "prompt_lookup_min=5 must be <= prompt_lookup_max=2"),  # vLLM's SpeculativeConfig.__post_init__ wording
    ({"method": "eagle"}, "needs model"),
    ({"method": "draft_model"}, "needs model"),
    ({"method": "mlp_speculator"}, "no proposer"),
    ({"method": "ngram", "model": "x"}, "Extra inputs are not permitted"),
    ({"method": "ngram", "suffix_decoding_max_tree_depth": 4}, "Extra inputs are not permitted"),
    ({"method": "suffix", "suffix_decoding_min_token_prob": 1.5}, "less than or equal to 1"),
    ({"method": "mtp", "num_speculative_tokens": 0}, "greater than or equal to 1"),
    ({"method": "mtp", "extra": {"tensor_parallel_size": 2}}, "draft_tensor_parallel_size"),
    ({"method": "mtp", "extra": {"num_speculative_tokens": 2}}, "extra repeats typed key"),
    ({"method": "fancy"}, "does not match any of the expected tags"),
])
def test_invalid_configs_are_refused_at_load(cfg: dict[str, object], words: str) -> None:
    with pytest.raises(ValidationError) as err:
        Serve(speculative=cfg)
    assert words in str(err.value)


def test_no_speculative_config_no_flag() -> None:
    assert flags(None) == []


def test_seed_002_4x_recipe_renders_its_dspark_draft() -> None:
    launch = launch_of(recipes.load("glm-5.2-4x-spark-dcp4"))
    argv = launch.ranks[0].argv
    cfg = json.loads(argv[argv.index("--speculative-config") + 1])
    # vLLM's own GLM-5.2 DSpark line (recipes/models/zai-org/GLM-5.2.yaml @0.33), the draft at a local path
    assert cfg == {"method": "dspark", "num_speculative_tokens": 7, "model": "/models/GLM-5.2-speculator.dspark"}
    docker = " ".join(launch.ranks[0].argv)
    assert "GLM-5.2-speculator.dspark:/models/GLM-5.2-speculator.dspark:ro" in docker


def test_a_record_written_with_the_old_flat_model_still_loads() -> None:
    # Before the per-method models every knob was dumped, null when unset.
    old = {"method": "mtp", "num_speculative_tokens": 1, "model": None, "prompt_lookup_max": None,
           "prompt_lookup_min": None}
    assert config_dict(_spec(old)) == {"method": "mtp", "num_speculative_tokens": 1}

"""Compatibility rules: what vLLM rejects (or breaks on) is refused by plan, render and up before any start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from forklift import recipe as recipes
from forklift.cli.main import app
from forklift.errors import SpeculativeConfigError
from forklift.plan import Unplanned, for_launch, make
from forklift.speculative.rules import Finding
from tests.unit.plan.conftest import recipe_for

# Seed 002's experiment (bird/GLM-spark experimental/ngram-patches/README.md): ngram on the PP=3 recipe.
SEED_NGRAM = "serve.speculative={method: ngram, num_speculative_tokens: 3, prompt_lookup_max: 4, prompt_lookup_min: 2}"
DENSE = {"architectures": ["LlamaForCausalLM"], "hidden_size": 512, "num_hidden_layers": 4,
         "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 1024,
         "vocab_size": 1000, "max_position_embeddings": 4096}
GLM_MOE = {"architectures": ["Glm4MoeForCausalLM"], "hidden_size": 512, "num_hidden_layers": 4,
           "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 1024,
           "moe_intermediate_size": 128, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
           "first_k_dense_replace": 1, "vocab_size": 1000, "max_position_embeddings": 4096,
           "num_nextn_predict_layers": 1}


def _findings(exc: SpeculativeConfigError) -> list[Finding]:
    """The rules that refused the config (errors.py types them ``object``: it may not import the rules)."""
    found = [f for f in exc.findings if isinstance(f, Finding)]
    assert len(found) == len(exc.findings)
    return found


def _ids(exc: SpeculativeConfigError) -> list[str]:
    return [f.id for f in _findings(exc)]


def test_seed_002_ngram_with_pp3_is_refused_with_the_fix_and_sources() -> None:
    recipe = recipes.load("glm-5.2-reap-3x-spark-pp3", [SEED_NGRAM])
    with pytest.raises(SpeculativeConfigError) as err:
        make(recipe)
    assert _ids(err.value) == ["lookup-drafter-with-pp"]
    assert "pp=3" in err.value.message and err.value.fix and "parallel.pp=1" in err.value.fix
    sources = " ".join(_findings(err.value)[0].sources)
    assert "vllm#30436" in sources and "GLM-spark" in sources


def test_render_plan_and_up_refuse_before_anything_starts(_isolated_home: Path) -> None:
    sets = ["--set", "parallel.pp=2", "--set", SEED_NGRAM]
    runner = CliRunner()
    for cmd in (["render", "default"], ["plan", "default"], ["up", "default", "--name", "refused"]):
        res = runner.invoke(app, [*cmd, *sets])
        assert isinstance(res.exception, SpeculativeConfigError), (cmd, res.output)
        assert "pipeline parallelism (pp=2)" in str(res.exception)
    assert not (_isolated_home / "runs" / "refused").exists()  # no run record: nothing was started


def test_force_turns_the_refusal_into_an_unplanned_launch() -> None:
    recipe = recipes.load("glm-5.2-reap-3x-spark-pp3", [SEED_NGRAM])
    plan = for_launch(recipe, force=True)
    assert isinstance(plan, Unplanned) and plan.error_type == "SpeculativeConfigError"


@pytest.mark.parametrize(("version", "refused"), [("0.26.0", True), ("0.29.0", True), ("0.30.0", False),
                                                  ("0.33.0", False)])
def test_mtp_with_pp_is_refused_before_0_30_and_allowed_with_a_warning_after(version: str, refused: bool) -> None:
    recipe = recipes.load("glm-5.2-reap-3x-spark-pp3", ["serve.speculative={method: mtp}"])
    if refused:
        with pytest.raises(SpeculativeConfigError) as err:
            make(recipe, vllm_version=version)
        assert _ids(err.value) == ["draft-network-with-pp-before-0.30"]
        assert "SupportsPP" in err.value.message
    else:
        notes = " ".join(make(recipe, vllm_version=version).notes)
        assert "drafter-with-pp-pays-little" in notes


def test_eagle3_with_pp_on_a_moe_target_is_refused_even_on_0_30(tmp_path: Path) -> None:
    recipe = recipe_for(tmp_path, GLM_MOE, hardware="h200", nodes=2, pp=2, max_model_len=1024,
                        speculative={"method": "eagle3", "model": "/drafts/eagle3"})
    with pytest.raises(SpeculativeConfigError) as err:
        make(recipe, vllm_version="0.30.0")
    assert _ids(err.value) == ["aux-hidden-states-over-pp"]
    dense = recipe_for(tmp_path, DENSE, hardware="h200", nodes=2, pp=2, max_model_len=1024,
                       speculative={"method": "eagle3", "model": "/drafts/eagle3"})
    assert make(dense, vllm_version="0.30.0").fits


@pytest.mark.parametrize(("version", "ok"), [("0.19.0", False), ("0.20.0", True), ("0.32.0+cpu", True)])
def test_vllm_cpu_has_speculative_decoding_from_0_20(tmp_path: Path, version: str, ok: bool) -> None:
    recipe = recipe_for(tmp_path, DENSE, hardware="cpu", max_model_len=1024,
                        speculative={"method": "ngram", "num_speculative_tokens": 3})
    if ok:
        make(recipe, vllm_version=version)
    else:
        with pytest.raises(SpeculativeConfigError, match="spec decode is not supported"):
            make(recipe, vllm_version=version)


@pytest.mark.parametrize(("cfg", "version", "rule", "words"), [
    ({"method": "dspark"}, "0.21.0", "method-not-in-release", "added in vLLM 0.25.0"),
    ({"method": "medusa", "model": "/m"}, "0.33.0", "method-not-in-release", "removed in vLLM 0.33.0"),
    ({"method": "mtp", "kv_cache_dtype": "fp8"}, "0.21.0", "key-not-in-release", "Unexpected keyword argument"),
    ({"method": "eagle", "model": "/e", "parallel_drafting": True}, "0.14.0", "key-not-in-release",
     "drops it silently"),
    ({"method": "draft_model", "model": "/d"}, "0.14.0", "draft-model-before-0.16", "not supported yet"),
])
def test_methods_and_keys_must_exist_in_the_release(tmp_path: Path, cfg: dict[str, Any], version: str, rule: str,
                                                    words: str) -> None:
    recipe = recipe_for(tmp_path, GLM_MOE, hardware="h200", max_model_len=1024, speculative=cfg)
    with pytest.raises(SpeculativeConfigError) as err:
        make(recipe, vllm_version=version)
    assert rule in _ids(err.value) and words in err.value.message


def test_mtp_needs_mtp_layers(tmp_path: Path) -> None:
    no_layers = recipe_for(tmp_path, {**GLM_MOE, "num_nextn_predict_layers": 0}, max_model_len=1024,
                           speculative={"method": "mtp"})
    with pytest.raises(SpeculativeConfigError) as err:
        make(no_layers)
    assert _ids(err.value) == ["mtp-needs-mtp-layers"]
    llama = recipe_for(tmp_path, DENSE, max_model_len=1024, speculative={"method": "mtp"})
    with pytest.raises(SpeculativeConfigError) as err2:
        make(llama)
    assert _ids(err2.value) == ["mtp-without-mtp-head"]


@pytest.mark.parametrize("config", ["mimo_v2", "gemma4"])
def test_mtp_on_a_family_whose_draft_is_not_counted_is_refused(tmp_path: Path, config: str) -> None:
    """MiMo-V2 and Gemma 4 plan without drafts; their MTP drafts (mimo_v2_mtp.py, gemma4_mtp.py) are not counted,
    so method mtp must refuse rather than plan a draft of zero bytes."""
    cpu_tiny = Path(__file__).resolve().parents[2] / "data" / "calibration" / "cpu-tiny"
    cfg = json.loads((cpu_tiny / f"{config}.config.json").read_text())
    make(recipe_for(tmp_path, cfg, max_model_len=1024))  # plans without the draft
    with pytest.raises(SpeculativeConfigError) as err:
        make(recipe_for(tmp_path, cfg, max_model_len=1024, speculative={"method": "mtp"}))
    assert _ids(err.value) == ["mtp-layers-not-modelled"]
    assert "forklift probe" in (err.value.fix or "")


def test_draft_tensor_parallel_size_in_vllms_words(tmp_path: Path) -> None:
    recipe = recipe_for(tmp_path, DENSE, max_model_len=1024, tp=2,
                        speculative={"method": "draft_model", "model": "/d", "draft_tensor_parallel_size": 1})
    with pytest.raises(SpeculativeConfigError) as err:
        make(recipe)
    assert "must be the same. Got 1 and 2" in err.value.message
    eagle = recipe_for(tmp_path, DENSE, max_model_len=1024, tp=2,
                       speculative={"method": "eagle", "model": "/e", "draft_tensor_parallel_size": 1})
    make(eagle)  # 1 is allowed for EAGLE heads


def test_seed_002_4x_plan_warns_about_drafts_under_dcp() -> None:
    notes = " ".join(make(recipes.load("glm-5.2-4x-spark-dcp4")).notes)
    assert "dcp-drafts-on-v1" in notes and "local-inference-lab/vllm#72" in notes

"""Draft weights and KV on the last stage, the batch budget with drafts, the roofline at a stated acceptance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forklift.plan import make
from forklift.recipe.schema import Serve
from forklift.recipe.speculative import SpeculativeConfig
from forklift.speculative import sizing
from tests.unit.plan.conftest import recipe_for

GIB = 2**30
GLM_MOE = {"architectures": ["Glm4MoeForCausalLM"], "hidden_size": 1024, "num_hidden_layers": 8,
           "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 64, "intermediate_size": 2048,
           "moe_intermediate_size": 256, "n_routed_experts": 16, "num_experts_per_tok": 2, "n_shared_experts": 1,
           "first_k_dense_replace": 1, "vocab_size": 32000, "max_position_embeddings": 8192,
           "num_nextn_predict_layers": 1, "torch_dtype": "bfloat16"}
DENSE = {"architectures": ["LlamaForCausalLM"], "hidden_size": 1024, "num_hidden_layers": 8,
         "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 64, "intermediate_size": 2048,
         "vocab_size": 32000, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}


def _spec(cfg: dict[str, object]) -> SpeculativeConfig:
    spec = Serve(speculative=cfg).speculative
    assert spec is not None
    return spec


def test_mtp_kv_is_one_more_layer_of_the_target_on_the_last_stage(tmp_path: Path) -> None:
    # An MTP layer joins the same KV pool with the target's attention shape: KV/token x (L + 1) / L
    # (vllm kv_cache_interface.py@0.33: is_draft never affects grouping).
    base = make(recipe_for(tmp_path, GLM_MOE, max_model_len=4096))
    mtp = make(recipe_for(tmp_path, GLM_MOE, max_model_len=4096, speculative={"method": "mtp"}))
    assert mtp.ranks[-1].kv_bytes_per_token * 8 == base.ranks[-1].kv_bytes_per_token * 9
    assert mtp.ranks[-1].weights_gib > base.ranks[-1].weights_gib  # the MTP layer's weights
    assert mtp.kv_tokens < base.kv_tokens


def test_under_pp_only_the_last_stage_carries_the_draft(tmp_path: Path) -> None:
    base = make(recipe_for(tmp_path, GLM_MOE, hardware="h200", nodes=2, pp=2, max_model_len=4096),
                vllm_version="0.30.0")
    mtp = make(recipe_for(tmp_path, GLM_MOE, hardware="h200", nodes=2, pp=2, max_model_len=4096,
                          speculative={"method": "mtp"}), vllm_version="0.30.0")
    assert mtp.ranks[0].weights_gib == base.ranks[0].weights_gib
    assert mtp.ranks[0].kv_bytes_per_token == base.ranks[0].kv_bytes_per_token
    extra = (mtp.ranks[1].weights_gib - base.ranks[1].weights_gib) * GIB
    embed_copy = 32000 * 1024 * 2  # vocab x hidden x bf16: the MTP layer's own embedding under PP
    assert extra > embed_copy


def test_a_local_draft_checkpoint_is_counted(tmp_path: Path) -> None:
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 8,
                                                   "num_key_value_heads": 2, "hidden_size": 512}))
    (draft / "model.safetensors").write_bytes(b"\0" * 3_000_000)
    base = make(recipe_for(tmp_path, DENSE, max_model_len=4096))
    spec = make(recipe_for(tmp_path, DENSE, max_model_len=4096,
                           speculative={"method": "draft_model", "model": str(draft), "num_speculative_tokens": 4}))
    assert (spec.ranks[0].weights_gib - base.ranks[0].weights_gib) * GIB == pytest.approx(3_000_000, abs=GIB * 0.001)
    # 2 layers x K and V x 2 KV heads x head_dim 64 x 2 bytes
    assert spec.ranks[0].kv_bytes_per_token - base.ranks[0].kv_bytes_per_token == 2 * 2 * 2 * 64 * 2


def test_lookup_methods_cost_no_weights_or_kv(tmp_path: Path) -> None:
    """No draft weights and no draft KV; the profile still runs the rejection sampler on dummy drafts for every
    speculative method (gpu_model_runner.py _dummy_sampler_run @0.26.0: `if self.speculative_config`), so the
    activation term may grow, never shrink."""
    base = make(recipe_for(tmp_path, DENSE, max_model_len=4096))
    ngram = make(recipe_for(tmp_path, DENSE, max_model_len=4096, speculative={"method": "ngram"}))
    assert ngram.ranks[0].weights_gib == base.ranks[0].weights_gib
    assert ngram.ranks[0].kv_bytes_per_token == base.ranks[0].kv_bytes_per_token
    assert ngram.ranks[0].activation_gib >= base.ranks[0].activation_gib


@pytest.mark.parametrize(("cfg", "per_request"), [
    ({"method": "ngram", "num_speculative_tokens": 4}, 5),
    ({"method": "mtp", "num_speculative_tokens": 3}, 4),
    ({"method": "draft_model", "model": "/d", "num_speculative_tokens": 3}, 5),  # + 1 draft slot
    ({"method": "draft_model", "model": "/d", "num_speculative_tokens": 3, "parallel_drafting": True}, 7),  # PARD
    ({"method": "eagle3", "model": "/e", "num_speculative_tokens": 3, "parallel_drafting": True}, 6),  # P-EAGLE
])
def test_budget_per_request(cfg: dict[str, object], per_request: int) -> None:
    # speculative.py:max_num_new_slots_for_drafting@0.33: 0 / K-1 (P-EAGLE) / 1 (draft_model) / K (PARD)
    b = sizing.budget(_spec(cfg), max_num_seqs=8, max_num_batched_tokens=8192)
    assert b.per_request == per_request and b.required == 8 * per_request and not b.truncates


def test_truncation_is_advised_in_the_plan(tmp_path: Path) -> None:
    plan = make(recipe_for(tmp_path, DENSE, max_model_len=4096, max_num_seqs=256, max_num_batched_tokens=1024,
                           speculative={"method": "ngram", "num_speculative_tokens": 4}))
    note = next(n for n in plan.notes if "truncated" in n)
    assert "256 x 5 = 1,280" in note and "serve.max_num_batched_tokens=1280" in note
    assert "serve.max_num_seqs=204" in note


def test_roofline_states_the_assumption_and_the_break_even() -> None:
    r = sizing.roofline(_spec({"method": "ngram", "num_speculative_tokens": 5}), base_tok_s=100.0,
                        draft_bytes_per_token=0.0, bandwidth_gbs=1000.0)
    assert r.break_even_length == 1.0 and r.assumed_length == 2.96 and "vllm#24344" in (r.assumption or "")
    assert r.tok_s_at_assumed == pytest.approx(296.0)
    capped = sizing.roofline(_spec({"method": "ngram", "num_speculative_tokens": 1}), base_tok_s=100.0,
                             draft_bytes_per_token=0.0, bandwidth_gbs=1000.0)
    assert capped.assumed_length == 2.0  # never more than K + 1 tokens per step
    # a draft that reads 1 GB per drafted token at 1000 GB/s costs 1 ms per draft: step 10 ms + 2 ms
    mtp = sizing.roofline(_spec({"method": "mtp", "num_speculative_tokens": 2}), base_tok_s=100.0,
                          draft_bytes_per_token=1e9, bandwidth_gbs=1000.0)
    assert mtp.break_even_length == pytest.approx(1.2)
    none = sizing.roofline(_spec({"method": "eagle3", "model": "/e"}), base_tok_s=100.0,
                           draft_bytes_per_token=0.0, bandwidth_gbs=1000.0)
    assert none.assumed_length is None and none.tok_s_at_assumed is None


def test_plan_notes_carry_the_roofline_with_its_assumption(tmp_path: Path) -> None:
    plan = make(recipe_for(tmp_path, GLM_MOE, max_model_len=4096, speculative={"method": "mtp"}))
    note = next(n for n in plan.notes if n.startswith("speculative roofline"))
    assert "assumed: DeepSeek-V3 technical report" in note and "tok/s instead of" in note

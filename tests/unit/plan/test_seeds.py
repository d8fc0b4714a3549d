"""The seeds' published figures, reproduced from the bundled recipes (or explained in the plan's notes)."""

from __future__ import annotations

import pytest

from forklift import recipe as recipes
from forklift.plan import make

GIB = 2**30


def test_seed000_weights_and_kv_per_node() -> None:
    plan = make(recipes.load("glm-4.7-nvfp4-2x-spark"))
    assert plan.tp == 2 and len(plan.ranks) == 2
    for rank in plan.ranks:
        assert rank.weights_gib == pytest.approx(94, abs=1.0)
        assert rank.kv_bytes_per_token == 92 * 2 * (8 // 2) * 128 * 1  # fp8 KV, 4 KV heads per rank
    assert plan.ranks[0].kv_needed_gib == pytest.approx(5.75, abs=0.01)  # 65,536 tokens
    short = make(recipes.load("glm-4.7-nvfp4-2x-spark", ["serve.max_model_len=32000"]))
    assert short.ranks[0].kv_needed_gib == pytest.approx(2.81, abs=0.01)


def test_seed000_first_try_shows_the_batch_limit_terms() -> None:
    """The seed's first try (utilization 0.88, vLLM's default batch limits, 32K): vLLM 0.26 on a GB10 takes
    8192 / 1024. What the batch limits change there, from vLLM's code: the dummy sampler over 1024 x 151,552 logits
    (14 B each, nw 2.5), which overlaps FlashInfer's per-call NVFP4 MoE workspace (SM12x: no persistent Triton
    workspace), and 51 + 51 CUDA graphs instead of 5 + 4, each FULL one with its own FlashInfer decode wrapper
    (8 MiB on the device + 8 MiB pinned, both in a unified GPU's free memory); fp8 KV on SM12x runs FlashInfer,
    whose workspace max(394 MiB, 8192 x 48 heads x 128 x 16 B) is the first FULL capture in both."""
    final = make(recipes.load("glm-4.7-nvfp4-2x-spark"))
    first = make(recipes.load("glm-4.7-nvfp4-2x-spark", [
        "serve.gpu_memory_utilization=0.88", "serve.max_num_batched_tokens=null", "serve.max_num_seqs=null",
        "serve.max_model_len=32768"]))
    assert (first.max_num_batched_tokens, first.max_num_seqs) == (8192, 1024)
    f, g = final.ranks[0], first.ranks[0]
    sampler = 14 * 1024 * 151552 / GIB
    assert 0 < g.activation_gib - f.activation_gib < sampler - 1.0  # the sampler peak overlaps the MoE transient
    workspace = 8192 * (96 // 2) * 128 * 16 / GIB
    assert f.cudagraph_gib >= workspace and f.cudagraph_subtracted
    # 46 more PIECEWISE graphs (>= the 1 MiB floor each) and 47 more FULL ones (>= 8 + 8 MiB FlashInfer wrappers
    # each); on top, every graph holds 92 layers' kernels and their host memory (measured on the H200 grid)
    assert g.cudagraph_gib - f.cudagraph_gib > ((51 - 5) * 1 + (51 - 4) * 16) / 1024 + 1.0
    assert g.kv_pool_gib < f.kv_pool_gib - 2.4  # 2.43 GiB from utilization (0.02 x 121.69), more from the limits
    assert any("max_num_seqs 1,024 x 151,552" in n for n in first.notes)


SEED000_LOGGED_KV_GIB = 8.89  # "Final numbers at 64K: 8.89 GiB of KV available" (seed 000)
FIRST_TRY = ["serve.gpu_memory_utilization=0.88", "serve.max_num_batched_tokens=null", "serve.max_num_seqs=null",
             "serve.max_model_len=32768"]


def test_seed000_final_setup_plans_within_ten_percent_of_the_pool_it_logged() -> None:
    """No planner constant comes from the seed: the unified-memory terms are fitted on public GB10 threads
    (test_gb10_public.py checks the fit)."""
    plan = make(recipes.load("glm-4.7-nvfp4-2x-spark"))
    pool = min(r.kv_pool_gib for r in plan.ranks)
    assert abs(pool - SEED000_LOGGED_KV_GIB) / SEED000_LOGGED_KV_GIB < 0.10
    assert plan.fits and plan.verdict != "does not fit"


def test_seed000_first_try_does_not_fit_or_is_too_close_naming_the_probe() -> None:
    """The seed's first try got 0.16 GiB of KV and did not start."""
    plan = make(recipes.load("glm-4.7-nvfp4-2x-spark", FIRST_TRY))
    assert plan.verdict in ("does not fit", "too close to call")
    if plan.verdict == "too close to call":
        assert any("too close to call" in n and "forklift probe glm-4.7-nvfp4-2x-spark" in n for n in plan.notes)


def test_seed002_weights_split_and_roofline_notes() -> None:
    plan = make(recipes.load("glm-5.2-reap-3x-spark-pp3"))
    assert plan.pp_partition == [26, 26, 26]
    for rank, published in zip(plan.ranks, (83.9, 90.3, 92.1), strict=True):
        assert rank.weights_gib == pytest.approx(published, abs=0.6)
    # one stream walks the three stages in sequence: 273 GB/s over ~49 GB of active bytes
    assert 4.0 < plan.decode_tok_s_single < 7.0
    notes = " ".join(plan.notes)
    assert "26/27/26" in notes and "79" in notes
    assert "28.4" in notes
    assert plan.suggested_pp_partition is not None and sum(plan.suggested_pp_partition) == 78


def test_dcp4_recipe_reports_vllms_no_memory_error_under_0_26_rules() -> None:
    plan = make(recipes.load("glm-5.2-4x-spark-dcp4"))  # the seed ran a dev build; 0.26's rules leave no pool
    assert plan.dcp == 4 and not plan.fits and plan.error is not None
    pool = min(r.kv_pool_gib for r in plan.ranks)
    assert pool < 0
    assert plan.error.startswith("No available memory for the cache blocks") and f"{pool:.2f}" in plan.error


def test_a_context_above_the_pool_gets_vllms_error_with_the_largest_length() -> None:
    plan = make(recipes.resolve("glm-4.7-nvfp4-2x-spark", ["serve.max_model_len=200000"]).recipe)
    assert not plan.fits and plan.error is not None and plan.advice
    assert min(r.kv_pool_gib for r in plan.ranks) > 0
    assert plan.largest_max_model_len is not None and plan.largest_max_model_len < 200_000
    assert "max seq len (200000)" in plan.error
    assert f"estimated maximum model length is {plan.largest_max_model_len}" in plan.error
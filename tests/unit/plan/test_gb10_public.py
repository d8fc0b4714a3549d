"""The GB10 unified-memory terms: the public-log set and its split, the constants' provenance (train threads
only), the kernel watermark form, and how the planner uses the terms (startup check, CUDA-graph estimate,
verdict band)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from benchmarks import gb10_public as bench

from forklift.hardware import facts
from forklift.hardware.facts import MeasuredNode
from forklift.plan import gb10, make
from forklift.recipe import load as load_recipe
from forklift.recipe.deployment import from_recipe
from tests.unit.plan.conftest import recipe_for

ROOT = Path(__file__).resolve().parents[3]
GLM47 = ROOT / "scripts" / "gpu" / "grid" / "models" / "glm47-6L.config.json"


@pytest.fixture(scope="module")
def threads() -> list[dict[str, Any]]:
    return bench.load_threads()


def test_the_set_has_thirty_distinct_addressed_threads_split_by_their_hash(threads: list[dict[str, Any]]) -> None:
    urls = [t["url"] for t in threads]
    assert len(set(urls)) == len(urls) >= 30 and len({t["id"] for t in threads}) == len(threads)
    for thread in threads:
        assert thread["url"].startswith("https://")
        assert thread["split"] == bench.split_of(thread["url"]), thread["id"]
    heldout = sum(t["split"] == "heldout" for t in threads)
    assert 0.15 * len(threads) < heldout < 0.5 * len(threads)


def test_shipped_constants_are_the_fit_of_the_train_threads(threads: list[dict[str, Any]]) -> None:
    assert bench.fit(threads) == gb10.data()["fitted"]


def test_held_out_figures_do_not_move_the_fit(threads: list[dict[str, Any]]) -> None:
    changed = copy.deepcopy(threads)
    for thread in changed:
        if thread["split"] != "heldout":
            continue
        for obs in thread["observations"]:
            for key in ("free_gib", "mem_available_gib", "estimated_gib"):
                if key in obs:
                    obs[key] = float(obs[key]) + 37.0
            if obs["kind"] == "repeat":
                obs["kv_gib"] = [1.0, 40.0]
    assert bench.fit(changed) == bench.fit(threads)


def test_a_repeat_given_in_tokens_is_scored_in_percent_only() -> None:
    thread = {"id": "t", "split": "heldout", "observations": [
        {"kind": "repeat", "kv_tokens": [500000, 400000]}, {"kind": "repeat", "util": 0.8, "kv_gib": [10.0, 8.0]}]}
    tokens, gib = bench._repeat_rows([thread], "heldout")
    assert tokens.err_pct == gib.err_pct == 25.0  # the first boot predicts the second, in either unit
    assert tokens.err_gib is None and gib.err_gib == 2.0


def test_a_graph_estimate_is_the_pool_gained_by_switching_the_estimate_off() -> None:
    assert bench._logged_graph_estimate({"kv_gib_estimate_on": 20.5, "kv_gib_estimate_off": 23.0}) == 2.5
    assert bench._logged_graph_estimate({"estimated_gib": -4.0, "kv_gib_estimate_on": 1.0,
                                         "kv_gib_estimate_off": 2.0}) == -4.0  # a printed estimate wins


def test_repeats_in_tokens_do_not_enter_the_gib_band(threads: list[dict[str, Any]]) -> None:
    changed = copy.deepcopy(threads)
    changed.append({"id": "x", "url": "https://example.invalid/x", "split": "train",
                    "observations": [{"kind": "repeat", "kv_tokens": [1, 10**9]}]})
    assert bench.fit(changed) == bench.fit(threads)


def test_default_floor_follows_the_kernel_sqrt_rule_and_its_clamp() -> None:
    assert gb10.default_min_free_kbytes(119.7) == pytest.approx((119.7 * 2**20 * 16) ** 0.5, abs=1)
    assert gb10.default_min_free_kbytes(1e6) == 262144  # clamped
    wm = gb10.watermarks(4 * 2**20, 100.0, 10)
    assert wm.low - wm.min == pytest.approx(1.0) and wm.high - wm.low == pytest.approx(1.0)  # min / 4 step
    wide = gb10.watermarks(4 * 2**20, 100.0, 300)
    assert wide.high - wide.low == pytest.approx(3.0)  # managed x scale factor / 10000 step


def test_a_raised_floor_costs_memavailable_and_kv_and_the_default_costs_nothing() -> None:
    none = gb10.watermark_cost({})
    assert none.reserve == none.page_cache == 0.0
    small = gb10.watermark_cost({"vm.min_free_kbytes": 262144})
    seed002 = gb10.watermark_cost({"vm.min_free_kbytes": 2097152})
    steep = gb10.watermark_cost({"vm.min_free_kbytes": 4194304, "vm.watermark_scale_factor": 300})
    assert 0 < small.reserve < seed002.reserve < steep.reserve
    assert 0 < small.page_cache < seed002.page_cache < steep.page_cache
    # a 2 GiB floor with the min / 4 step: high = 1.5 x 2 GiB held out, low = 1.25 x 2 GiB of page cache kept
    base = gb10.watermarks(gb10.default_min_free_kbytes(119.7), 119.7, 10)
    assert seed002.reserve == pytest.approx(3.0 - base.high) and seed002.page_cache == pytest.approx(2.5 - base.low)
    assert seed002.page_cache > 2.0 and small.page_cache < 0.3
    assert steep.reserve > 2 * seed002.reserve  # field reports: ~9 GiB against ~6 GiB for other floors
    assert seed002.boost == pytest.approx(3.0 * 1.5, rel=0.01)
    assert gb10.watermark_cost({"vm.min_free_kbytes": 2097152, "vm.watermark_boost_factor": 0}).boost == 0


def test_the_bundled_gb10_profile_costs_well_under_a_gib() -> None:
    cost = gb10.watermark_cost(gb10.node_profile_sysctl("gb10"))
    assert cost.reserve + cost.page_cache < 0.5


def test_verdict_is_decided_only_outside_the_band() -> None:
    assert gb10.verdict(1.3, 1.2) == "fits" and gb10.verdict(-1.3, 1.2) == "does not fit"
    assert gb10.verdict(0.5, 1.2) == gb10.verdict(-1.1, 1.2) == "too close to call"


def _glm47(tmp_path: Path, **serve: Any) -> Any:
    return recipe_for(tmp_path, json.loads(GLM47.read_text()), hardware="gb10", nodes=2, tp=2,
                      max_model_len=65536, max_num_batched_tokens=8192, max_num_seqs=8, kv_cache_dtype="fp8",
                      **serve)


def test_unified_graph_estimate_carries_the_excess_only_with_graphs(tmp_path: Path) -> None:
    excess = gb10.terms_for("0.26.0").cudagraph_excess_gib
    graphs = make(_glm47(tmp_path))
    eager = make(_glm47(tmp_path, enforce_eager=True))
    h200 = make(recipe_for(tmp_path, json.loads(GLM47.read_text()), hardware="h200", tp=2, max_model_len=65536,
                           max_num_batched_tokens=8192, max_num_seqs=8, kv_cache_dtype="fp8"))
    assert graphs.ranks[0].cudagraph_gib > excess > 0 and eager.ranks[0].cudagraph_gib == 0
    assert graphs.ranks[0].cudagraph_gib - h200.ranks[0].cudagraph_gib >= excess


def test_unmeasured_startup_check_is_a_range_measured_is_memavailable_less_the_pre_snapshot(tmp_path: Path) -> None:
    g = gb10.terms_for("0.26.0")
    total = 121.69
    inside = (g.free_at_init.low + g.free_at_init.high) / 2 / total
    above = (g.free_at_init.high + 0.5) / total
    below = (g.free_at_init.low - 2.0) / total
    middle = make(_glm47(tmp_path, gpu_memory_utilization=round(inside, 3)))
    assert middle.verdict == "too close to call" and middle.error is None
    assert any("forklift probe" in n for n in middle.notes)
    refused = make(_glm47(tmp_path, gpu_memory_utilization=round(above, 3)))
    assert refused.verdict == "does not fit" and refused.error and "Free memory on device" in refused.error
    assert make(_glm47(tmp_path, gpu_memory_utilization=round(below, 3))).verdict == "fits"


def test_a_measured_node_is_read_pre_snapshot_lower(tmp_path: Path) -> None:
    g = gb10.terms_for("0.26.0")
    recipe = load_recipe("glm-4.7-nvfp4-2x-spark")
    requested = 0.90 * 121.69
    for host in ("spark-1", "spark-2"):  # MemAvailable just above the request, not above it plus the pre-snapshot
        facts.save(MeasuredNode(host=host, mem_available_gib=round(requested + g.pre_snapshot_gib / 2, 2),
                                mem_total_gib=121.69, hardware="gb10"))
    plan = make(from_recipe(recipe))
    assert plan.error is not None and "Free memory on device" in plan.error and plan.verdict == "does not fit"
    for host in ("spark-1", "spark-2"):
        facts.save(MeasuredNode(host=host, mem_available_gib=round(requested + g.pre_snapshot_gib + 1, 2),
                                mem_total_gib=121.69, hardware="gb10"))
    assert make(from_recipe(recipe)).verdict == "fits"


def test_speculative_decoding_on_unified_memory_is_never_decided_fits(tmp_path: Path) -> None:
    plan = make(_glm47(tmp_path, gpu_memory_utilization=0.7,
                       speculative={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}))
    assert plan.verdict == "too close to call"


def test_discrete_gpus_keep_vllms_verdict(tmp_path: Path) -> None:
    plan = make(recipe_for(tmp_path, json.loads(GLM47.read_text()), hardware="h200", tp=2, max_model_len=8192))
    assert plan.verdict == "fits" and plan.uncertainty_gib is not None  # the GPU band, not the GB10 spread


def test_tokens_per_gib_tell_two_kv_configurations_apart() -> None:
    # miaai-glm53-47's boots as the thread gives them: 1,750,000 / 18.67 = 93,733 and 1,497,584 / 16.53 = 90,598
    # tokens per GiB, 3.46 % apart; one configuration keeps them within a block (GEOMETRY_TOLERANCE, 1 %)
    two = {"kind": "repeat", "kv_gib": [18.67, 16.53], "kv_tokens": [1750000, 1497584]}
    spread = bench.tokens_per_gib_spread(two)
    assert spread is not None and abs(spread - 0.0346) < 5e-4
    assert not bench.one_configuration(two)
    one = {"kind": "repeat", "kv_gib": [10.0, 12.0], "kv_tokens": [600000, 720000]}  # 60,000 per GiB both times
    assert bench.tokens_per_gib_spread(one) == 0.0 and bench.one_configuration(one)
    assert bench.tokens_per_gib_spread({"kind": "repeat", "kv_gib": [10.0, 12.0]}) is None
    assert bench.one_configuration({"kind": "repeat", "kv_gib": [10.0, 12.0]})


def test_a_repeat_of_two_configurations_is_labelled_scored_and_kept_out_of_the_band(
        threads: list[dict[str, Any]]) -> None:
    thread = {"id": "t", "split": "heldout", "observations": [
        {"kind": "repeat", "util": 0.87, "kv_gib": [18.67, 16.53], "kv_tokens": [1750000, 1497584]},
        {"kind": "repeat", "util": 0.8, "kv_gib": [10.0, 8.0]}]}
    labelled, plain = bench._repeat_rows([thread], "heldout")
    assert "not one KV configuration" in labelled.what and "3.5%" in labelled.what
    assert labelled.err_pct == 12.95 and labelled.err_gib == 2.14  # (18.67 - 16.53) / 16.53: still scored
    assert "not one KV configuration" not in plain.what and plain.err_pct == 25.0
    summ = bench.summary([labelled, plain], [thread])["heldout"]
    assert summ["pool_rows"] == 2 and summ["pool_err_median_pct"] == 18.98  # (12.95 + 25) / 2, every row
    assert summ["pool_rows_one_configuration"] == 1 and summ["pool_err_median_pct_one_configuration"] == 25.0
    # the band is the spread of one configuration's boots: a 39 GiB "spread" across two geometries stays out of it,
    # the same spread with tokens that follow the bytes goes in
    apart = copy.deepcopy(threads) + [{"id": "x", "url": "https://example.invalid/x", "split": "train",
                                       "observations": [{"kind": "repeat", "kv_gib": [1.0, 40.0],
                                                         "kv_tokens": [100000, 100000]}]}]
    assert bench.fit(apart) == bench.fit(threads)
    together = copy.deepcopy(threads) + [{"id": "x", "url": "https://example.invalid/x", "split": "train",
                                         "observations": [{"kind": "repeat", "kv_gib": [1.0, 40.0],
                                                           "kv_tokens": [100000, 4000000]}]}]
    assert bench.fit(together)["pool_band_gib"] == 39.0

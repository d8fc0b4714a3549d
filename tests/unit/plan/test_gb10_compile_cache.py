"""The compile-cache term on unified memory (plan/gb10.py, "Compile cache"): a cold torch.compile start's pool is a
constant per rank smaller than a warm restart's, fitted from TRAIN repeat boots that state both cache states.

Expected figures are the made-up boots of each test (warm minus cold), the constant each test sets, and the H200's
L2 (60 MiB, torch's L2_cache_size on the grid's H200): none is read from the code under test."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from benchmarks import gb10_public as bench

from forklift.model.load import spec_for
from forklift.plan import gb10, rules
from forklift.plan.core import context, core
from forklift.plan.make import deployment_of, make
from tests.unit.plan.conftest import recipe_for

ROOT = Path(__file__).resolve().parents[3]
GLM47 = ROOT / "scripts" / "gpu" / "grid" / "models" / "glm47-6L.config.json"
GIB = 2**30


def _pair(split: str, boots: list[float], states: list[str] | None = None) -> dict[str, Any]:
    obs: dict[str, Any] = {"kind": "repeat", "util": 0.85, "kv_gib": boots}
    if states is not None:
        obs["compile_cache"] = states
    return {"id": f"pair-{split}-{len(boots)}", "url": f"https://example.invalid/{split}", "split": split,
            "observations": [obs]}


@pytest.fixture(scope="module")
def threads() -> list[dict[str, Any]]:
    return bench.load_threads()


def test_no_train_thread_gives_a_cold_warm_pair_so_nothing_is_fitted_or_applied(
        threads: list[dict[str, Any]]) -> None:
    paired = [t for t in threads for o in t["observations"]
              if o["kind"] == "repeat" and bench.cold_warm_gain(o) is not None]
    assert paired and all(t["split"] == "heldout" for t in paired)  # the only cold/warm pairs are held out
    one_state = [t for t in threads for o in t["observations"] if o["kind"] == "repeat" and o.get("compile_cache")
                 and bench.cold_warm_gain(o) is None]
    assert any(t["split"] == "train" for t in one_state)  # train boots all of one state: a spread, not a pair
    assert gb10.data()["fitted"]["cold_compile_gib"] is None
    g = gb10.terms_for("0.26.0")
    assert g.cold_compile_gib is None
    assert gb10.cold_compile_bytes(g, compiled=True, compile_cache="cold") == 0.0


def test_the_fit_is_the_median_warm_gain_of_train_pairs(threads: list[dict[str, Any]]) -> None:
    grown = copy.deepcopy(threads) + [
        _pair("train", [12.0, 12.8], ["cold", "warm"]),
        _pair("train", [20.0, 19.5, 20.7], ["warm", "cold", "warm"]),  # warm mean 20.35, cold 19.5: +0.85
        _pair("train", [9.0, 9.6, 10.0], ["cold", "cold", "warm"]),     # warm 10.0, cold mean 9.3: +0.7
        _pair("heldout", [1.0, 40.0], ["cold", "warm"]),                # held out: never fitted
    ]
    assert bench.fit(grown)["cold_compile_gib"] == 0.8


def test_a_cold_warm_pair_is_a_term_not_run_to_run_spread(threads: list[dict[str, Any]]) -> None:
    band = bench.fit(threads)["pool_band_gib"]
    grown = copy.deepcopy(threads) + [_pair("train", [10.0, 10.0 + band + 2.0], ["cold", "warm"])]
    assert bench.fit(grown)["pool_band_gib"] == band
    unstated = copy.deepcopy(threads) + [_pair("train", [10.0, 10.0 + band + 2.0])]
    assert bench.fit(unstated)["pool_band_gib"] == round(band + 2.0, 2)  # no states given: spread as before


def test_the_benchmark_predicts_a_warm_boot_from_a_cold_one_plus_the_term() -> None:
    thread = _pair("heldout", [13.0, 13.7], ["cold", "warm"])
    (without,) = bench._repeat_rows([thread], "heldout")
    assert without.predicted == 13.0 and without.err_gib == -0.7 and "cold -> warm" in without.what
    (fitted,) = bench._repeat_rows([thread], "heldout", cold_compile_gib=0.5)
    assert fitted.predicted == 13.5 and fitted.err_gib == -0.2
    backwards = _pair("heldout", [13.7, 13.0], ["warm", "cold"])
    (back,) = bench._repeat_rows([backwards], "heldout", cold_compile_gib=0.5)
    assert back.predicted == 13.2


def _pools(tmp: Path, cache: str, hardware: str = "gb10", **serve: Any) -> list[int]:
    recipe = recipe_for(tmp, json.loads(GLM47.read_text()), hardware=hardware, nodes=2 if hardware == "gb10" else 1,
                        tp=2, max_model_len=65536, max_num_batched_tokens=8192, max_num_seqs=8,
                        kv_cache_dtype="fp8", **serve)
    deployment = deployment_of(recipe)
    ctx = context(deployment, spec_for(deployment.recipe.model), rules.rules_for("0.26.0"), cache)
    return core(ctx).pools


def test_a_cold_start_on_unified_memory_plans_the_constant_less_per_rank(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    unfitted = {c: _pools(tmp_path, c) for c in ("cold", "warm")}
    assert unfitted["cold"] == unfitted["warm"]  # no L2 in the gb10 profile and no constant: no difference
    fitted = replace(gb10.terms_for("0.26.0"), cold_compile_gib=0.75)
    monkeypatch.setattr(gb10, "terms_for", lambda version: fitted)
    cold, warm = _pools(tmp_path, "cold"), _pools(tmp_path, "warm")
    assert warm == unfitted["warm"]  # a warm restart carries no compile residue
    assert [w - c for w, c in zip(warm, cold, strict=True)] == [int(0.75 * GIB)] * 2
    eager = {c: _pools(tmp_path, c, enforce_eager=True) for c in ("cold", "warm")}
    assert eager["cold"] == eager["warm"]  # nothing compiles


def test_a_discrete_gpu_gains_only_its_flush_buffer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fitted = replace(gb10.terms_for("0.26.0"), cold_compile_gib=5.0)
    monkeypatch.setattr(gb10, "terms_for", lambda version: fitted)
    cold, warm = _pools(tmp_path, "cold", "h200"), _pools(tmp_path, "warm", "h200")
    assert all(w - c in (0, 60 * 2**20) for w, c in zip(warm, cold, strict=True))


def test_the_plan_says_what_it_assumes_of_the_compile_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def recipe(**serve: Any) -> Any:
        return recipe_for(tmp_path, json.loads(GLM47.read_text()), hardware="gb10", nodes=2, tp=2,
                          max_model_len=65536, max_num_batched_tokens=8192, max_num_seqs=8, kv_cache_dtype="fp8",
                          **serve)

    def cache_notes(plan: Any) -> list[str]:
        return [n for n in plan.notes if "torch.compile cache" in n]

    (unfitted,) = cache_notes(make(recipe()))
    assert "not modelled" in unfitted
    assert cache_notes(make(recipe(enforce_eager=True))) == []
    fitted = replace(gb10.terms_for("0.26.0"), cold_compile_gib=0.75)
    monkeypatch.setattr(gb10, "terms_for", lambda version: fitted)
    (cold,) = cache_notes(make(recipe()))
    assert "0.75 GiB per rank" in cold

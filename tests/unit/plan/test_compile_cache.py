"""A warm torch.compile cache (a restart) against a cold one (a first start): Inductor's first-call autotuning
allocates an L2-sized flush buffer inside vLLM's profile run only on a cold start (plan/terms.py compile_flush).

Expected figures: the H200's L2 is 60 MiB (torch printed L2_cache_size 62914560 on the grid's H200, call r6q), so a
warm start's pool is 60 x 2**20 bytes larger where the dense MLP is the profile's peak, and equal where it is not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks import plan_accuracy as pa

from forklift.hardware.profiles import get as get_profile
from forklift.model.load import spec_for
from forklift.plan import rules, terms
from forklift.plan.calibrate import parse_log
from forklift.plan.core import context, core
from forklift.plan.make import deployment_of

from .conftest import recipe_for

GRID_MODELS = Path(__file__).resolve().parents[3] / "scripts" / "gpu" / "grid" / "models"
CALIBRATION = Path(__file__).resolve().parents[3] / "tests" / "data" / "calibration"
L2_H200 = 60 * 2**20


def _pools(tmp: Path, config: Path, cache: str, **serve: Any) -> list[int]:
    deployment = deployment_of(recipe_for(tmp, config, **serve))
    ctx = context(deployment, spec_for(deployment.recipe.model), rules.rules_for("0.26.0"), cache)
    return core(ctx).pools


def test_the_flush_buffer_is_the_gpus_l2_and_only_when_compiled() -> None:
    assert get_profile("h200").l2_cache_mib == 60
    assert terms.compile_flush(60, compiled=True) == L2_H200
    assert terms.compile_flush(60, compiled=False) == 0.0
    assert terms.compile_flush(None, compiled=True) == 0.0


def test_the_log_says_whether_the_start_compiled() -> None:
    grid = CALIBRATION / "h200-grid"
    assert parse_log((grid / "q09-llama8b-q-awq.log").read_text(errors="replace")).compile_cache == "warm"
    assert parse_log((grid / "q01-llama8b-q-awq.log").read_text(errors="replace")).compile_cache == "cold"
    assert parse_log((grid / "p21-llama8b-like.log").read_text(errors="replace")).compile_cache is None  # eager


def test_a_warm_start_gains_the_flush_where_the_dense_mlp_is_the_peak(tmp_path: Path) -> None:
    config = CALIBRATION / "llama8b-like.config.json"
    cold = _pools(tmp_path, config, "cold", max_model_len=8192)
    warm = _pools(tmp_path, config, "warm", max_model_len=8192)
    assert [w - c for w, c in zip(warm, cold, strict=True)] == [L2_H200]


def test_nothing_changes_where_the_peak_is_not_an_inductor_kernel_or_nothing_compiles(tmp_path: Path) -> None:
    gptoss = GRID_MODELS / "gptoss-8L.config.json"  # the sampler is its profile peak (MXFP4 MoE, vocab 201088)
    assert _pools(tmp_path, gptoss, "warm", max_model_len=8192) == _pools(tmp_path, gptoss, "cold",
                                                                           max_model_len=8192)
    llama = CALIBRATION / "llama8b-like.config.json"
    eager = {"max_model_len": 8192, "enforce_eager": True}
    assert _pools(tmp_path, llama, "warm", **eager) == _pools(tmp_path, llama, "cold", **eager)


def test_the_grid_benchmark_plans_each_start_as_its_log_says(tmp_path: Path) -> None:
    point = next(p for p, _, _ in pa.points() if p["id"] == "q09")
    log = CALIBRATION / "h200-grid" / "q09-llama8b-q-awq.log"
    row = pa.evaluate(point, log, "0.26.0", tmp_path)
    assert row.compile_cache == "warm"

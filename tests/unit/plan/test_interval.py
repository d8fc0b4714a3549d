"""Every GPU plan carries an interval from its terms' bands (plan/interval.py, plan/data/uncertainty.yaml).

Expected figures come from the data file read here as plain YAML and from the H200 grid's logs, never from the
interval code: a verified term's band is its held-out maximum error times the term plus the logs' rounding (0.005
GiB), an unverified one the wider fraction; a 'fits' never lies inside its own interval."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml
from benchmarks import plan_accuracy as pa

from forklift.plan import Plan, make
from forklift.plan.calibrate import parse_log
from tests.helpers import forklift

from .conftest import recipe_for

ROOT = Path(__file__).resolve().parents[3]
DATA = yaml.safe_load((ROOT / "src" / "forklift" / "plan" / "data" / "uncertainty.yaml").read_text())
AWQ = ROOT / "scripts" / "gpu" / "grid" / "models" / "llama8b-q-awq.config.json"
VERIFIED = DATA["verified"][0]
POINTS = [(p, log, v) for p, log, v in pa.points() if log is not None]


def _bands(plan: Plan) -> dict[str, float]:
    assert plan.interval is not None
    return {b.term: b.band_gib for b in plan.interval.terms}


def test_the_data_holds_what_the_held_out_grid_shows() -> None:
    """Each verified figure is the largest error of its term and key over the held-out points (the logs)."""
    found = pa.term_errors("heldout")
    assert (VERIFIED["vllm"], VERIFIED["capability"]) == ("0.26.0", "9.0")
    for term in ("weights", "activation", "non_torch", "cudagraph"):
        assert {k: v["max"] for k, v in found[term].items()} == pytest.approx(VERIFIED[term], abs=1e-4), term


def test_a_verified_plan_adds_each_terms_held_out_error(tmp_path: Path) -> None:
    plan = make(recipe_for(tmp_path, AWQ, max_model_len=8192, gpu_memory_utilization=0.05))
    r = plan.ranks[0]
    expected = {"weights": VERIFIED["weights"]["auto_awq"] * r.weights_gib + 0.005,
                "activation": VERIFIED["activation"]["dense"] * r.activation_gib + 0.005,
                "non_torch": VERIFIED["non_torch"]["single"] + 0.005}
    assert _bands(plan) == pytest.approx(expected, abs=2e-3)  # each band rounded to 0.001 GiB
    assert plan.interval is not None
    assert {b.basis for b in plan.interval.terms} == {"verified"}
    below = sum(expected.values())
    lo, hi = plan.interval.kv_pool_gib
    assert lo == pytest.approx(r.kv_pool_gib - below, abs=3e-3)
    assert hi == pytest.approx(r.kv_pool_gib + below + 60 / 1024, abs=3e-3)  # a warm restart: + the H200's L2
    assert plan.uncertainty_gib == pytest.approx(below, abs=3e-3)


@pytest.mark.parametrize(("hardware", "version"), [("b200", "0.26.0"), ("h200", "0.25.1")])
def test_a_release_or_gpu_family_without_grid_points_is_unverified_and_wider(tmp_path: Path, hardware: str,
                                                                            version: str) -> None:
    recipe = recipe_for(tmp_path, AWQ, hardware=hardware, max_model_len=8192, gpu_memory_utilization=0.05)
    plan = make(recipe, vllm_version=version)
    r = plan.ranks[0]
    wide = DATA["unverified"]
    expected = {"weights": wide["weights"] * r.weights_gib, "activation": wide["activation"] * r.activation_gib,
                "non_torch": wide["non_torch"]}
    if r.cudagraph_subtracted:
        expected["cudagraph"] = wide["cudagraph"] * r.cudagraph_gib
    assert _bands(plan) == pytest.approx(expected, abs=2e-3)
    assert plan.interval is not None
    assert {b.basis for b in plan.interval.terms} == {"unverified"}
    verified = make(recipe_for(tmp_path, AWQ, max_model_len=8192, gpu_memory_utilization=0.05))
    assert plan.uncertainty_gib is not None and verified.uncertainty_gib is not None
    assert plan.uncertainty_gib > verified.uncertainty_gib


def test_the_verdict_is_decided_only_outside_the_interval(tmp_path: Path) -> None:
    seen = set()
    for util in [0.040 + 0.001 * i for i in range(15)]:
        plan = make(recipe_for(tmp_path, AWQ, max_model_len=8192, gpu_memory_utilization=round(util, 3)))
        assert plan.interval is not None
        lo, hi = plan.interval.margin_gib
        seen.add(plan.verdict)
        if plan.verdict == "fits":
            assert lo > 0 and plan.fits
        elif plan.verdict == "does not fit":
            assert hi < 0 and not plan.fits
        else:
            assert lo <= 0 <= hi
            assert any("forklift probe" in n for n in plan.notes)
    assert seen == {"fits", "does not fit", "too close to call"}


def test_on_the_grid_no_fits_lies_inside_its_interval_and_decided_verdicts_are_right() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for point, log, version in POINTS:
            facts = parse_log(log.read_text(errors="replace"))
            plan = make(pa.recipe_for(point, Path(tmp)), vllm_version=facts.vllm_version or version,
                        compile_cache=facts.compile_cache or "cold")
            if plan.verdict == "fits":
                assert plan.interval is not None and plan.interval.margin_gib[0] > 0, point["id"]
            if plan.verdict != "too close to call":
                assert facts.fits == (plan.verdict == "fits"), point["id"]


def test_json_and_text_show_the_interval(tmp_path: Path) -> None:
    plan = make(recipe_for(tmp_path, AWQ, max_model_len=8192, gpu_memory_utilization=0.05))
    data = plan.to_json()
    assert set(data["interval"]) == {"kv_pool_gib", "margin_gib", "terms"}
    assert [t["term"] for t in data["interval"]["terms"]] == ["weights", "activation", "non_torch"]
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(AWQ.read_text())
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({
        "model": {"source": str(model), "load_format": "dummy"}, "nodes": [{"host": "n0", "hardware": "h200"}],
        "serve": {"max_model_len": 8192, "gpu_memory_utilization": 0.05}}))
    out = forklift("plan", str(recipe), home=tmp_path / "home", env={"COLUMNS": "250"})
    lo, hi = data["interval"]["kv_pool_gib"]
    assert f"KV pool {lo:.2f}..{hi:.2f} GiB" in out.stdout
    assert "verified (vLLM 0.26.0, sm 9.0, auto_awq)" in out.stdout

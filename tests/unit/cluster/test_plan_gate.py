"""`up` asks the planner first: a layout vLLM rejects at startup is refused before any rank starts."""

from __future__ import annotations

import pytest

from forklift import recipe as recipes
from forklift.cluster.up import gate
from forklift.errors import DoesNotFitError, PlanError
from forklift.plan import Plan, Unplanned, for_launch


def test_tp_that_does_not_divide_the_heads_is_refused_with_the_key_and_divisors() -> None:
    # SmolLM2-135M has 9 attention heads (its config.json); vLLM 0.32 stops with
    # "Total number of attention heads (9) must be divisible by tensor parallel size (2)".
    r = recipes.load("default", ["parallel.tp=2"])
    with pytest.raises(PlanError) as err:
        for_launch(r, vllm_version="0.32.0+cpu", force=False)
    assert "tp=2" in str(err.value) and "9 attention heads" in str(err.value)
    assert "1, 3, 9" in (err.value.fix or "")


def test_force_starts_anyway_and_records_why_the_plan_is_missing() -> None:
    r = recipes.load("default", ["parallel.tp=2"])
    plan = for_launch(r, vllm_version="0.32.0+cpu", force=True)
    assert isinstance(plan, Unplanned) and plan.forced and "9 attention heads" in plan.error


def test_a_valid_layout_returns_the_plan() -> None:
    plan = for_launch(recipes.load("default", []), vllm_version="0.32.0+cpu", force=False)
    assert isinstance(plan, Plan) and plan.fits and plan.tp == 1
    gate(plan, force=False)  # a plan that fits passes the gate


def test_a_plan_that_does_not_fit_is_refused_with_the_advice_unless_forced() -> None:
    r = recipes.load("glm-4.7-nvfp4-2x-spark", ["serve.max_model_len=200000", "serve.kv_cache_dtype=auto"])
    plan = for_launch(r)
    assert isinstance(plan, Plan) and not plan.fits
    with pytest.raises(DoesNotFitError) as err:
        gate(plan, force=False)
    assert "--force" in (err.value.fix or "") and "--apply" in (err.value.fix or "")
    gate(plan, force=True)

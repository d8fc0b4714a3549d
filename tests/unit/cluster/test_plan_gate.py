"""`up` asks the planner first: a layout vLLM rejects at startup is refused before any rank starts."""

from __future__ import annotations

import pytest

from forklift import recipe as recipes
from forklift.cluster.hooks import plan_for
from forklift.errors import DoesNotFitError


def test_tp_that_does_not_divide_the_heads_is_refused_with_the_key_and_divisors() -> None:
    # SmolLM2-135M has 9 attention heads (its config.json); vLLM 0.32 stops with
    # "Total number of attention heads (9) must be divisible by tensor parallel size (2)".
    r = recipes.load("default", ["parallel.tp=2"])
    with pytest.raises(DoesNotFitError) as err:
        plan_for(r, "0.32.0+cpu", force=False)
    assert "tp=2" in str(err.value) and "9 attention heads" in str(err.value)
    assert "1, 3, 9" in (err.value.fix or "") and "--force" in (err.value.fix or "")


def test_force_starts_anyway_and_records_why_the_plan_is_missing() -> None:
    r = recipes.load("default", ["parallel.tp=2"])
    data = plan_for(r, "0.32.0+cpu", force=True)
    assert data["available"] is False and "9 attention heads" in data["error"]


def test_a_valid_layout_returns_the_plan() -> None:
    data = plan_for(recipes.load("default", []), "0.32.0+cpu", force=False)
    assert data["fits"] is True and data["tp"] == 1

"""The stack's joint plan: budgets per shared device, the refusal with its per-device table, STACK.yaml errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from forklift.errors import RecipeError, StackDoesNotFitError
from forklift.stack import joint_plan, parse

pytestmark = pytest.mark.unit


def _stack(big_kv: float, small: str = "") -> str:
    return f"""
name: duo
members:
  - {{name: big, recipe: default, port: 18101, served_name: big, kv_gib: {big_kv}}}
  - {{name: small, recipe: default, port: 18102, served_name: small {small}}}
"""


def test_budgets_split_the_free_memory_and_reach_each_member(tmp_path: Path) -> None:
    joint = joint_plan(parse(_stack(2)), tmp_path)
    (dev,) = joint.devices  # both on localhost: one CPU host shared
    assert dev.host == "localhost" and dev.fits
    uses = {u.member: u for u in dev.uses}
    assert uses["big"].kv_gib == 2
    # the other takes what is left of the usable share (the cpu profile is unified: 80 %), in whole GiB
    left = dev.usable_gib - uses["big"].total_gib - uses["small"].fixed_gib
    assert uses["small"].kv_gib == int(left)
    assert dev.used_gib <= dev.usable_gib
    assert joint.sets["big"] == ["serve.cpu_kv_cache_gib=2"]
    # each member planned again with its budget, its port and served name: what `up` starts
    for name, plan in joint.plans.items():
        serve = plan.deployment.recipe.serve
        assert serve.cpu_kv_cache_gib == uses[name].kv_gib
        assert plan.deployment.recipe.served_name == name
    assert joint.order == ["small", "big"]  # largest budget first


def test_a_pair_that_does_not_fit_together_is_refused_with_a_per_node_table(tmp_path: Path) -> None:
    with pytest.raises(StackDoesNotFitError) as err:
        joint_plan(parse(_stack(7, ", kv_gib: 7")), tmp_path)
    text = str(err.value)
    assert "do not fit together on localhost" in text
    assert "big" in err.value.table and "small" in err.value.table and "DOES NOT FIT" in err.value.table
    assert "budgets sum to" in text and err.value.fix
    # each alone fits: only the sum is refused
    alone = _stack(7).split("  - {name: small")[0]
    assert joint_plan(parse(alone), tmp_path).fits


def test_stack_file_errors_name_the_field_and_a_close_key() -> None:
    with pytest.raises(RecipeError, match=r"members\.0\.kv_gb: unknown field; did you mean 'kv_gib'"):
        parse("name: x\nmembers: [{name: a, recipe: default, kv_gb: 1}]")
    with pytest.raises(RecipeError, match="ports repeat"):
        parse("name: x\nmembers: [{name: a, recipe: default, port: 1}, {name: b, recipe: default, port: 1}]")

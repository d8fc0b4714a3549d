"""The stack's joint plan: budgets per shared device, the refusal with its per-device table, STACK.yaml errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from forklift.errors import RecipeError, StackDoesNotFitError
from forklift.hardware import facts
from forklift.hardware.profiles import get as hardware_profile
from forklift.plan import gb10
from forklift.stack import joint_plan, parse
from forklift.stack.joint import JointPlan

pytestmark = pytest.mark.unit


def _two_cores(host: str, is_local: bool) -> list[int]:
    return [0, 1] if is_local else []


def _stack(big_kv: float, small: str = "") -> str:
    return f"""
name: duo
members:
  - {{name: big, recipe: default, port: 18101, served_name: big, kv_gib: {big_kv}}}
  - {{name: small, recipe: default, port: 18102, served_name: small {small}}}
"""


def test_budgets_split_the_free_memory_and_reach_each_member(tmp_path: Path) -> None:
    joint = joint_plan(parse(_stack(2)), tmp_path, cores=_two_cores, environ={})
    (dev,) = joint.devices  # both on localhost: one CPU host shared
    assert dev.host == "localhost" and dev.fits
    uses = {u.member: u for u in dev.uses}
    assert uses["big"].kv_gib == 2
    # the other takes what is left of the usable share (the cpu profile is unified: 80 %), in whole GiB
    left = dev.usable_gib - uses["big"].total_gib - uses["small"].fixed_gib
    assert uses["small"].kv_gib == int(left)
    assert dev.used_gib <= dev.usable_gib
    assert joint.sets["big"][0] == "serve.cpu_kv_cache_gib=2"
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


def test_members_sharing_a_cpu_host_compute_on_cores_of_their_own(tmp_path: Path) -> None:
    joint = joint_plan(parse(_stack(2)), tmp_path, cores=_two_cores, environ={})
    assert joint.order == ["small", "big"]
    assert joint.sets["small"][-1] == "env.VLLM_CPU_OMP_THREADS_BIND=0"  # started first: the first core
    assert joint.sets["big"][-1] == "env.VLLM_CPU_OMP_THREADS_BIND=1"
    for name, core in (("small", "0"), ("big", "1")):  # what `up` starts: each member's rank env
        assert joint.plans[name].deployment.recipe.env["VLLM_CPU_OMP_THREADS_BIND"] == core
    assert "cores on localhost (VLLM_CPU_OMP_THREADS_BIND): small 0; big 1" in joint.table()
    assert joint.to_json()["cpu_binds"] == {"small": "0", "big": "1"}


def test_the_users_own_core_setting_wins(tmp_path: Path) -> None:
    own = joint_plan(parse(_stack(2, ", set: [env.VLLM_CPU_OMP_THREADS_BIND=1]")), tmp_path, cores=_two_cores,
                     environ={})
    assert own.plans["small"].deployment.recipe.env["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    assert own.sets["big"][-1] == "env.VLLM_CPU_OMP_THREADS_BIND=0"  # the core the user left
    shell = joint_plan(parse(_stack(2)), tmp_path, cores=_two_cores, environ={"VLLM_CPU_OMP_THREADS_BIND": "0"})
    assert not any("THREADS_BIND" in x for sets in shell.sets.values() for x in sets)
    assert any("forklift's environment" in n for n in shell.notes) and "note:" in shell.table()


def _gb10_stack(extra: str = "") -> str:
    node = '["nodes=[{host: spark, hardware: gb10}]", serve.max_model_len=4096]'
    return f"""
name: spark
members:
  - {{name: big, recipe: default, port: 18111, set: {node}}}
  - {{name: small, recipe: default, port: 18112, set: {node}{extra}}}
"""


def _device(joint: JointPlan, host: str) -> tuple[float, float]:
    (dev,) = [d for d in joint.devices if d.host == host]
    return dev.usable_gib, dev.total_gib


def test_a_shared_gb10_leaves_what_the_gb10_terms_say_not_a_fixed_share(tmp_path: Path) -> None:
    joint = joint_plan(parse(_gb10_stack()), tmp_path)
    usable, total = _device(joint, "spark")
    version = joint.plans["big"].vllm_version
    g = gb10.terms_for(version)
    reserve = gb10.watermark_cost(gb10.node_profile_sysctl(str(hardware_profile("gb10").node_profile))).reserve
    # vLLM's free reading at startup on a clean GB10 (the median of the public logs), less the node profile's
    # watermark reserve, less the second member's own CUDA context (it reads after the first has started), less
    # the pool's spread across boots
    assert usable == pytest.approx(g.free_at_init.median - reserve - g.pre_snapshot_gib - g.pool_band_gib)
    assert usable != pytest.approx(0.8 * total) and usable < total
    assert "median of clean GB10 nodes" in joint.table() and "1 x" in joint.table()
    # each member's budget reaches vLLM as bytes plus a utilization whose request the last to start still finds
    # free: what the clean node reads, less the first member's context and its whole request
    requests = {n: float(dict(x.split("=", 1) for x in joint.sets[n])["serve.gpu_memory_utilization"]) * total
                for n in ("big", "small")}
    assert requests["small"] <= g.free_at_init.median - reserve - g.pre_snapshot_gib - requests["big"]


def test_a_measured_gb10_uses_its_own_memavailable(tmp_path: Path) -> None:
    facts.save(facts.MeasuredNode(host="spark", mem_total_gib=119.7, mem_available_gib=90.0, hardware="gb10"))
    joint = joint_plan(parse(_gb10_stack()), tmp_path)
    g = gb10.terms_for(joint.plans["big"].vllm_version)
    assert _device(joint, "spark")[0] == pytest.approx(90.0 - 2 * g.pre_snapshot_gib - g.pool_band_gib)
    assert "measured MemAvailable 90.00" in joint.table()


def test_members_on_gpus_the_recipe_names_are_not_assumed_to_share_gpu_0(tmp_path: Path) -> None:
    def member(name: str, port: int, gpu: str) -> str:
        return (f"  - {{name: {name}, recipe: default, port: {port}, set: [\"nodes=[{{host: box, hardware: "
                f"rtx4090, env: {{CUDA_VISIBLE_DEVICES: '{gpu}'}}}}]\"]}}\n")

    split = joint_plan(parse("name: two\nmembers:\n" + member("a", 18121, "1") + member("b", 18122, "0")), tmp_path)
    assert sorted((d.index, [u.member for u in d.uses]) for d in split.devices) == [(0, ["b"]), (1, ["a"])]
    shared = joint_plan(parse("name: two\nmembers:\n" + member("a", 18121, "1") + member("b", 18122, "1")),
                        tmp_path)
    assert [(d.index, [u.member for u in d.uses]) for d in shared.devices] == [(1, ["a", "b"])]


def test_members_left_on_one_port_of_one_host_are_refused(tmp_path: Path) -> None:
    clash = "name: duo\nmembers:\n  - {name: a, recipe: default}\n  - {name: b, recipe: default}\n"
    with pytest.raises(RecipeError, match="members a and b both serve on port 8000 of localhost") as err:
        joint_plan(parse(clash), tmp_path, cores=_two_cores, environ={})
    assert "port:" in (err.value.fix or "")

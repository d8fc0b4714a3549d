"""DP and DP+EP expert shares, the explicit KV budget, unified memory measured over SSH, user hardware profiles."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from forklift import hardware
from forklift.errors import HardwareError, PlanError
from forklift.hardware import facts
from forklift.hardware.profiles import bundled as bundled_profiles
from forklift.hardware.profiles import user_dir
from forklift.launch.flags import engine_args
from forklift.plan import make
from forklift.recipe import load as load_recipe
from forklift.recipe.deployment import from_recipe
from forklift.runner import FakeRunner
from tests.unit.plan.conftest import recipe_for

ROOT = Path(__file__).resolve().parents[3]
GLM = ROOT / "scripts" / "gpu" / "models" / "glm45air-16L-like.config.json"
GIB = 2**30


def _glm() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(GLM.read_text())
    return data


def _dp_recipe(tmp_path: Path, dp: int, ep: bool) -> Any:
    base = recipe_for(tmp_path, _glm(), max_model_len=16384, enable_expert_parallel=ep)
    return base.model_copy(update={"parallel": base.parallel.model_copy(update={"dp": dp})})


def test_dp_without_ep_splits_experts_over_tp_x_dp_and_replicates_the_rest(tmp_path: Path) -> None:
    tp2 = make(recipe_for(tmp_path, _glm(), tp=2, max_model_len=16384))
    dp2 = make(_dp_recipe(tmp_path, 2, False))
    assert len(dp2.ranks) == 2 and dp2.dp == 2
    # experts are split two ways in both; attention and the dense layer are whole on each DP rank
    assert dp2.ranks[0].weights_gib > tp2.ranks[0].weights_gib
    assert any("experts split 2 ways" in n for n in dp2.notes)


def test_ep_gives_each_rank_whole_experts_and_the_moe_sees_every_dp_rank_tokens(tmp_path: Path) -> None:
    one = make(_dp_recipe(tmp_path, 1, False))
    ep = make(_dp_recipe(tmp_path, 2, True))
    assert any("experts whole per rank" in n for n in ep.notes)
    # half the routed experts per rank (64 of 128): the weights drop by about half the expert bytes
    expert_gib = one.ranks[0].weights_gib - ep.ranks[0].weights_gib
    assert expert_gib == pytest.approx(15 * 128 * 3 * 4096 * 1408 * 2 / 2 / GIB, rel=0.01)
    # the MoE workspace holds M = dp x max_num_batched_tokens tokens (the DP all-gather)
    assert ep.ranks[0].activation_gib > one.ranks[0].activation_gib + 0.9
    assert "--enable-expert-parallel" in engine_args(ep.deployment.recipe, ep.decisions, "m")


def test_kv_budget_bytes_and_plan(tmp_path: Path) -> None:
    fixed = make(recipe_for(tmp_path, _glm(), max_model_len=16384, kv_cache_memory_bytes=20 * GIB))
    assert fixed.decisions.kv_cache_memory_bytes == 20 * GIB
    assert fixed.ranks[0].kv_pool_gib == pytest.approx(20.0)
    planned = make(recipe_for(tmp_path, _glm(), max_model_len=16384, kv_cache_memory_bytes="plan"))
    profiled = make(recipe_for(tmp_path, _glm(), max_model_len=16384))
    budget = planned.decisions.kv_cache_memory_bytes
    assert budget is not None
    pool = profiled.ranks[0].kv_pool_gib * GIB
    assert budget == int(pool) or abs(budget - pool) < 2**21
    argv = engine_args(planned.deployment.recipe, planned.decisions, "m")
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(planned.decisions.kv_cache_memory_bytes)
    assert argv.count("--kv-cache-memory-bytes") == 1
    with pytest.raises(PlanError) as err:
        make(recipe_for(tmp_path, _glm(), max_model_len=16384, kv_cache_memory_bytes="plan"), vllm_version="0.9.2")
    assert "kv-cache-memory-bytes" in err.value.message


MEMINFO = "MemTotal:       127605084 kB\nMemFree:         1000000 kB\nMemAvailable:   104857600 kB\n"


def test_hw_node_measures_over_a_runner_and_the_plan_uses_it() -> None:
    runner = FakeRunner(host="spark-1").on(["cat", "/proc/meminfo"], stdout=MEMINFO).on(
        ["nvidia-smi"], stdout="0, NVIDIA GB10, [N/A], [N/A], [N/A], 580.95.05\n")
    measured = facts.measure(runner, host="spark-1")
    assert measured.mem_available_gib == 100.0 and measured.hardware == "gb10"
    facts.save(measured)
    facts.save(measured.model_copy(update={"host": "spark-2"}))
    recipe = load_recipe("glm-4.7-nvfp4-2x-spark")
    plan = make(from_recipe(recipe))
    # 100 GiB free cannot hold 0.90 x total: vLLM's startup check refuses, and the plan says measured, not assumed
    assert not plan.fits and plan.error is not None and "Free memory on device" in plan.error
    assert any("100.00 GiB free when measured" in n for n in plan.notes)
    assert not any("ASSUMES" in n for n in plan.notes)


def test_without_measurement_the_plan_says_it_assumes() -> None:
    plan = make(from_recipe(load_recipe("glm-4.7-nvfp4-2x-spark")))
    assert any("ASSUMES" in n and "forklift hw --node spark-1" in n for n in plan.notes)


def test_user_profiles_are_validated_listed_and_usable(tmp_path: Path) -> None:
    folder = user_dir()
    folder.mkdir(parents=True)
    (folder / "mine.yaml").write_text(
        "rtx6000pro:\n  description: RTX PRO 6000 Blackwell 96GB\n  kind: cuda\n  gpus: 2\n  memory_gib: 94.97\n"
        "  unified: false\n  bandwidth_gbs: 1792\n  tflops: {bf16: 500}\n  compute_capability: '12.0'\n")
    profile = hardware.get("RTX6000PRO")
    assert profile.memory_gib == 94.97 and profile.source.endswith("mine.yaml")
    assert "rtx6000pro" in hardware.profiles() and "h200" in hardware.profiles()
    plan = make(recipe_for(tmp_path, _glm(), hardware="rtx6000pro", tp=2, max_model_len=8192))
    assert plan.ranks[0].hardware == "rtx6000pro"
    (folder / "bad.yaml").write_text("broken:\n  kind: tpu\n  memory_gib: -1\n")
    with pytest.raises(HardwareError) as err:
        hardware.profiles()
    assert "bad.yaml" in err.value.message and "kind" in err.value.message


@pytest.mark.parametrize("name", ["rtx3090", "rtx4090", "rtx5090", "rtx5070ti", "a100-40", "a100-80", "l40s", "h20",
                                  "gh200", "b200", "gb10", "dgx-spark", "asus-ascent-gx10", "dell-pro-max-gb10"])
def test_bundled_profiles(name: str) -> None:
    profile = hardware.get(name)
    assert profile.kind == "cuda" and profile.memory_gib > 0 and profile.compute_capability


def test_discrete_gpus_show_vllm_less_than_the_marketed_size() -> None:
    # torch.cuda.mem_get_info's total leaves out what the driver keeps: a "24GB" card is under 24 GiB to vLLM
    for name, prof in bundled_profiles().items():
        if prof.kind != "cuda" or prof.unified:
            continue
        marketed = re.search(r"(\d+)\s*GB", prof.description)
        assert marketed is not None, name
        assert prof.memory_gib < float(marketed.group(1)), name


def test_every_bundled_gpu_memory_figure_names_its_source() -> None:
    text = (resources.files("forklift.hardware") / "profiles.yaml").read_text()
    for block in re.split(r"\n(?=[a-z0-9-]+:\n)", text):
        if "kind: cuda" not in block:
            continue
        lines = block.splitlines()
        at = next(i for i, line in enumerate(lines) if line.strip().startswith("memory_gib:"))
        assert "#" in lines[at] or lines[at - 1].strip().startswith("#"), lines[0]

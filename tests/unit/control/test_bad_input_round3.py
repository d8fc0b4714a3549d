"""A fuzzing review's findings (round 3), each held: user mistakes end in forklift's own error naming the key and the
fix, with exit 2 for bad input (never a traceback, never a wrong "ok" / "fits"), and nothing of the user's is lost."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from forklift import canary
from forklift import recipe as recipes
from forklift.errors import CompareError, PlanError, RecipeError, RunnerError
from forklift.plan import make
from forklift.runner import LocalRunner
from tests.helpers import forklift

pytestmark = pytest.mark.unit


def _bench(path: Path, ttft_ms: float, **level: object) -> Path:
    reqs = [{"ttft_ms": ttft_ms, "tpot_ms": 10.0, "e2e_ms": ttft_ms + 300, "output_tokens": 32, "start_s": i * 0.1,
             "itl_ms": [10.0] * 31} for i in range(12)]
    path.write_text(json.dumps({"runs": [{"concurrency": 4, "per_request": reqs, "failed": 0,
                                          "output_tok_s": 1000 / ttft_ms, **level}]}))
    return path


def test_a_misspelt_gate_metric_is_refused_with_the_name_it_meant(tmp_path: Path) -> None:
    a, b = _bench(tmp_path / "a.json", 50.0), _bench(tmp_path / "b.json", 1000.0)
    assert canary.compare(canary.load(a), canary.load(b), gate=["ttft_p50_ms"]).verdict == "regressed"
    with pytest.raises(CompareError) as err:
        canary.compare(canary.load(a), canary.load(b), gate=["ttft_p50"])  # was "ok": the gate decided nothing
    assert "ttft_p50" in str(err.value) and "did you mean 'ttft_p50_ms'" in (err.value.fix or "")
    res = forklift("compare", str(a), str(b), "--gate", ",")
    assert res.returncode == 2 and "empty gate" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize(("level", "words"), [
    ({"rate": "x"}, "'x' is not a non-negative number"),
    ({"concurrency": "x"}, "concurrency 'x'"),
    ({"per_request": 5}, "TypeError"),
    ({"per_request": [1]}, "AttributeError"),
])
def test_a_saved_result_of_the_wrong_shape_is_a_compare_error(tmp_path: Path, level: dict[str, object],
                                                              words: str) -> None:
    bad = _bench(tmp_path / "bad.json", 50.0, **level)
    res = forklift("compare", str(bad), str(_bench(tmp_path / "a.json", 50.0)))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert str(bad) in res.stderr and words in res.stderr


@pytest.mark.parametrize("ttft", ["NaN", "Infinity", "-5"])
def test_a_time_that_is_not_a_time_is_refused(tmp_path: Path, ttft: str) -> None:
    good = _bench(tmp_path / "a.json", 50.0)
    bad = tmp_path / "b.json"
    bad.write_text(good.read_text().replace('"ttft_ms": 50.0', f'"ttft_ms": {ttft}'))
    with pytest.raises(CompareError, match="not a non-negative number"):
        canary.load(bad)


def test_compare_html_into_a_missing_folder_is_refused_before_comparing(tmp_path: Path) -> None:
    a = _bench(tmp_path / "a.json", 50.0)
    res = forklift("compare", str(a), str(a), "--html", str(tmp_path / "no" / "x.html"))
    assert res.returncode == 2 and "no folder" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize(("sets", "key"), [
    (["serve.cpu_kv_cache_gib=100"], "serve.cpu_kv_cache_gib"),
])
def test_a_set_kv_pool_larger_than_the_memory_does_not_fit(sets: list[str], key: str) -> None:
    plan = make(recipes.load("default", sets))
    assert not plan.fits and plan.error is not None and key in plan.error and "runs out of memory" in plan.error
    most = float(plan.error.rsplit("at most ", 1)[1].split()[0])
    assert make(recipes.load("default", [f"{key}={most}"])).fits  # the value it names fits
    assert not make(recipes.load("default", [f"{key}={most + 0.5}"])).fits
    assert plan.advice and plan.advice[0].set == [f"{key}={most:g}"]


def test_a_pinned_gpu_pool_beyond_the_device_does_not_fit() -> None:
    plan = make(recipes.load("glm-4.7-nvfp4-2x-spark", ["serve.kv_cache_memory_bytes=200000000000"]))
    assert not plan.fits and plan.error is not None and "serve.kv_cache_memory_bytes" in plan.error
    assert plan.advice[0].set[0].startswith("serve.kv_cache_memory_bytes=")
    assert make(recipes.load("glm-4.7-nvfp4-2x-spark", [plan.advice[0].set[0]])).fits


def test_a_key_written_twice_is_an_error_naming_both_lines(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("model: {source: \"bundled:smollm2-135m-instruct\"}\nserve:\n  port: 8001\n"
                    "  api_key_env: MY_KEY\nenv: {}\nserve: {enforce_eager: true}\n")
    with pytest.raises(RecipeError, match=r"the key 'serve' twice \(first on line 2\)"):
        recipes.load(str(path))
    merged = tmp_path / "merge.yaml"  # a merge key's values may still be overridden
    merged.write_text("model: {source: \"bundled:smollm2-135m-instruct\"}\nenv: &e {A: \"1\", B: \"1\"}\n"
                      "nodes: [{host: localhost, env: {<<: *e, A: \"2\"}}]\n")
    assert recipes.load(str(merged)).nodes[0].env == {"A": "2", "B": "1"}


def test_nested_aliases_are_refused_quickly(tmp_path: Path) -> None:
    lines = ["extends: default", 'l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(lines) + "\n")
    t0 = time.monotonic()
    with pytest.raises(RecipeError, match="more than 100,000 values"):
        recipes.load(str(path))
    assert time.monotonic() - t0 < 30  # a guard against a hang, not a speed target


@pytest.mark.parametrize("item", ["serve.cpu_kv_cache_gib=.inf", "serve.gpu_memory_utilization=.nan",
                                  "timeouts.ready_s=.inf", "parallel.dp=100000"])
def test_infinities_and_huge_parallel_sizes_are_refused(item: str) -> None:
    with pytest.raises(RecipeError) as err:
        recipes.load("default", [item])
    assert item.split("=")[0] in str(err.value)


@pytest.mark.parametrize("version", ["banana", "0.0.1", "0.11.0; rm -rf /"])
def test_a_vllm_version_that_is_no_release_is_a_usage_error(version: str) -> None:
    res = forklift("plan", "default", "--vllm-version", version)
    assert res.returncode == 2 and "--vllm-version" in res.stderr and "Traceback" not in res.stderr
    with pytest.raises(PlanError):
        make(recipes.load("default"), vllm_version="banana")


def test_a_program_that_cannot_run_is_a_runner_error(tmp_path: Path) -> None:
    script = tmp_path / "noshebang"
    script.write_text("echo hi\n")
    script.chmod(0o755)
    for program in (str(tmp_path), str(script)):
        with pytest.raises(RunnerError, match="cannot run"):
            LocalRunner().run([program])
        with pytest.raises(RunnerError, match="cannot run"):
            LocalRunner().spawn([program], log_path=str(tmp_path / "log"))


def test_service_names_are_checked() -> None:
    res = forklift("service", "remove", "../../../tmp/victim", "--dry-run")
    assert res.returncode == 2 and "invalid run name" in res.stderr


def test_bench_refuses_an_out_folder_it_would_write_over_before_any_request(tmp_path: Path) -> None:
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "results.json").write_text("{}")
    res = forklift("bench", "--url", "http://127.0.0.1:9", "--model", "m", "--out", str(earlier))
    assert res.returncode == 2 and "already holds" in res.stderr and (earlier / "results.json").read_text() == "{}"
    res = forklift("bench", "--url", "http://127.0.0.1:9", "--model", "m", "--out", str(tmp_path / "new"),
                   "--ladder", "--ladder-out", str(tmp_path / "l.txt"))
    assert res.returncode == 2 and ".md, .json or .csv" in res.stderr


@pytest.mark.parametrize("flag", [["--rate", "nan"], ["--rate", "inf"], ["--duration", "nan"]])
def test_bench_refuses_rates_and_durations_that_are_not_numbers(flag: list[str], tmp_path: Path) -> None:
    res = forklift("bench", "--url", "http://127.0.0.1:9", "--model", "m", "--out", str(tmp_path / "o"), *flag)
    assert res.returncode == 2 and flag[0] in res.stderr and "Traceback" not in res.stderr


def test_json_outputs_are_json() -> None:
    assert json.loads(forklift("plan", "--list-configs", "--json").stdout)
    assert json.loads(forklift("render", "default", "--format", "k8s", "--json").stdout)["kind"] == "LeaderWorkerSet"
    res = forklift("recipe", "validate", "default", "--set", "serve.port=0", "--json")
    assert res.returncode == 2 and json.loads(res.stdout)["ok"] is False


def test_a_cluster_file_is_found_beside_the_recipe_that_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "lab.yaml").write_text("nodes:\n  - {host: localhost, hardware: cpu}\n")
    (tmp_path / "sub" / "r.yaml").write_text("extends: default\ncluster: lab.yaml\n")
    monkeypatch.chdir(tmp_path)  # not the recipe's folder
    deployment = recipes.resolve(str(tmp_path / "sub" / "r.yaml"))
    assert deployment.cluster_file == str(tmp_path / "sub" / "lab.yaml")
    (tmp_path / "sub" / "r2.yaml").write_text("extends: default\ncluster: nope.yaml\n")
    with pytest.raises(RecipeError) as err:
        recipes.resolve(str(tmp_path / "sub" / "r2.yaml"))
    assert "nope.yaml.yaml" not in str(err.value) + (err.value.fix or "")


def test_node_check_of_a_missing_recipe_file_says_so() -> None:
    res = forklift("node", "check", "typo.yaml")
    assert res.returncode == 2 and "not found" in res.stderr and "ssh" not in res.stderr


def test_logs_of_a_rank_whose_log_is_gone_say_so(tmp_path: Path) -> None:
    from forklift.cluster.down import read_log
    from forklift.plan import for_launch
    from forklift.record import RankState, RunRecord
    from tests.helpers import launch_of

    record = RunRecord(name="gone", run_id="abc", plan=for_launch(recipes.resolve("default"), force=True),
                       launch=launch_of("default", "/models/smol", run_id="abc"), endpoint="http://127.0.0.1:8000",
                       served_name="smollm2",
                       ranks=[RankState(rank=0, host="localhost", log_path=str(tmp_path / "vllm.log"))])
    with pytest.raises(Exception, match="not on localhost any more"):
        read_log(record)
    (tmp_path / "vllm.log").write_text("a\nb\n")
    assert read_log(record) == ["a", "b"] and read_log(record, tail=1) == ["b"] and read_log(record, tail=0) == []


def test_small_input_mistakes_name_themselves() -> None:
    res = forklift("stack", "status", "a/b")
    assert res.returncode == 2 and "invalid stack name" in res.stderr
    res = forklift("check", "--url", "http://127.0.0.1:9", "--model", "m", "--api-key-env", "A B")
    assert res.returncode == 2 and "not an environment variable name" in res.stderr
    res = forklift("doctor", "vllm.log")
    assert res.returncode == 2 and "no file vllm.log" in res.stderr


def test_a_config_whose_architectures_is_one_string_is_read(tmp_path: Path) -> None:
    from forklift.model.archrules import family_for

    arch, family, _ = family_for({"architectures": "LlamaForCausalLM", "model_type": "llama"}, "config.json")
    assert arch == "LlamaForCausalLM" and family


def test_a_fractional_vllm_cpu_pool_does_not_fit_and_the_advice_rounds_it() -> None:
    plan = make(recipes.load("default", ["serve.cpu_kv_cache_gib=1.5"]))
    assert not plan.fits and plan.error is not None and "whole number of GiB" in plan.error
    assert plan.advice[0].set == ["serve.cpu_kv_cache_gib=2"] and plan.advice[0].fits
    advised = make(recipes.load("default", ["serve.cpu_kv_cache_gib=100"])).advice[0].set[0]
    assert float(advised.split("=")[1]).is_integer()  # vLLM-CPU reads VLLM_CPU_KVCACHE_SPACE with int()

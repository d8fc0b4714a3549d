from __future__ import annotations

import json

import pytest

from forklift import recipe as recipes
from forklift.errors import RecipeError
from tests.helpers import launch_of


def test_single_node_cpu_render() -> None:
    r = recipes.load("default", ["serve.port=8123"])
    launch = launch_of(r, "/models/smol")
    assert len(launch.ranks) == 1
    rank = launch.head
    argv = rank.argv
    assert argv[1:5] == ["-m", "forklift.engine.vllm_main", "serve", "/models/smol"]
    assert argv[argv.index("--port") + 1] == "8123"
    assert argv[argv.index("--max-model-len") + 1] == "4096"
    assert "--enforce-eager" in argv and "--headless" not in argv
    assert rank.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert launch.endpoint == "http://127.0.0.1:8123"
    # vLLM's own process layout (its worker binds its OpenMP threads): serve.engine_in_process is opt-in
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in rank.env


def test_an_in_process_engine_is_asked_for() -> None:
    on = launch_of(recipes.load("default", ["serve.engine_in_process=true"]), "/m").head
    assert on.env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"


@pytest.mark.parametrize(("sets", "why"), [
    (["nodes=[{host: a, data_ip: 10.0.0.1, ssh: u@a}, {host: b, ssh: u@b}]", "parallel.pp=2"], "2 nodes"),
    (["parallel.dp=2"], "parallel.dp = 2"),
    (["nodes.0.hardware=h200"], "GPU node localhost"),
])
def test_an_in_process_engine_beyond_one_cpu_node_is_refused_naming_the_key(sets: list[str], why: str) -> None:
    r = recipes.load("default", [*sets, "serve.engine_in_process=true"])
    with pytest.raises(RecipeError) as err:
        launch_of(r, "/m")
    assert f"serve.engine_in_process with {why}" in str(err.value) and "engine_in_process" in (err.value.fix or "")


def test_every_typed_knob_becomes_a_flag() -> None:
    r = recipes.load("default", [
        "serve.gpu_memory_utilization=0.9", "serve.max_num_batched_tokens=8192", "serve.max_num_seqs=8",
        "serve.kv_cache_dtype=fp8", "serve.quantization=fp8", "serve.dtype=bfloat16", "serve.block_size=32",
        "serve.reasoning_parser=glm45", "serve.speculative={method: mtp, num_speculative_tokens: 2}",
        "serve.extra_args=[--foo, bar]", "parallel.tp=2", "parallel.dcp=2",
    ])
    argv = launch_of(r, "/m").head.argv
    pairs = {argv[i]: argv[i + 1] for i in range(len(argv) - 1)}
    assert pairs["--gpu-memory-utilization"] == "0.9"
    assert pairs["--max-num-batched-tokens"] == "8192"
    assert pairs["--max-num-seqs"] == "8"
    assert pairs["--kv-cache-dtype"] == "fp8"
    assert pairs["--quantization"] == "fp8"
    assert pairs["--dtype"] == "bfloat16"
    assert pairs["--block-size"] == "32"
    assert pairs["--reasoning-parser"] == "glm45"
    assert json.loads(pairs["--speculative-config"]) == {"method": "mtp", "num_speculative_tokens": 2}
    assert pairs["--tensor-parallel-size"] == "2"
    assert pairs["--decode-context-parallel-size"] == "2"
    assert argv[-6:-4] == ["--foo", "bar"]


def test_native_multinode_orders_workers_first_head_last() -> None:
    r = recipes.load("default", [
        "nodes=[{host: a, data_ip: 10.0.0.1, ssh: u@a}, {host: b, ssh: u@b}]", "parallel.pp=2",
        "network.master_port=29555", "network.nccl_socket_ifname=enp1",
    ])
    launch = launch_of(r, "/m")
    assert [x.rank for x in launch.ranks] == [1, 0]
    worker, head = launch.ranks
    assert worker.headless and "--headless" in worker.argv and "--port" not in worker.argv
    for rl, idx in ((worker, "1"), (head, "0")):
        a = rl.argv
        assert a[a.index("--nnodes") + 1] == "2"
        assert a[a.index("--node-rank") + 1] == idx
        assert a[a.index("--master-addr") + 1] == "10.0.0.1"
        assert a[a.index("--master-port") + 1] == "29555"
        assert rl.env["NCCL_SOCKET_IFNAME"] == "enp1"
    assert launch.endpoint.startswith("http://10.0.0.1:")


def test_api_key_is_never_in_argv_or_env() -> None:
    r = recipes.load("default", ["serve.api_key_env=MY_KEY"])
    rank = launch_of(r, "/m").head
    assert rank.secret_env == {"VLLM_API_KEY": "MY_KEY"}
    assert "VLLM_API_KEY" not in rank.env and "--api-key" not in rank.argv


def test_node_env_applies_to_that_node_only() -> None:
    r = recipes.load("default", [
        "nodes=[{host: localhost, env: {CUDA_VISIBLE_DEVICES: 0}},"
        " {host: 127.0.0.1, env: {CUDA_VISIBLE_DEVICES: '1'}}]",
        "parallel.pp=2", "env.SHARED=on-both",
    ])
    launch = launch_of(r, "/m")
    by_rank = {x.rank: x.env for x in launch.ranks}
    assert by_rank[0]["CUDA_VISIBLE_DEVICES"] == "0" and by_rank[1]["CUDA_VISIBLE_DEVICES"] == "1"
    assert by_rank[0]["SHARED"] == by_rank[1]["SHARED"] == "on-both"

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from forklift import recipe as recipes
from forklift.cluster.start import ray_node_count
from forklift.errors import RecipeError
from forklift.launch.k8s import leader_worker_set
from forklift.launch.launch_spec import NodePaths
from forklift.launch.render import LAUNCHER_MODULE
from forklift.plan import for_launch
from forklift.recipe.schema import Recipe
from tests.helpers import launch_of

TWO_NODES = "nodes=[{host: a, ssh: root@10.231.0.1, data_ip: 10.231.0.1}, {host: b, ssh: root@10.231.0.2}]"
PATHS = {0: NodePaths(run_dir="/home/u/run", home="/home/u"), 1: NodePaths(run_dir="/root/run", home="/root")}
SCHEMA = json.loads((Path(__file__).parents[2] / "data" / "lws-schema.json").read_text())


def _two(*extra: str) -> Recipe:
    return recipes.load("default", [TWO_NODES, "parallel.pp=2", "serve.host=0.0.0.0", *extra])


def _vllm_args(argv: list[str]) -> list[str]:
    return argv[argv.index("serve"):]


def test_remote_venv_ranks_run_the_copied_launcher_with_node_ip() -> None:
    launch = launch_of(_two(), "/m", run_id="abc", node_paths=PATHS)
    worker, head = launch.ranks
    assert worker.argv[1] == "/root/run/vllm_main.py" and head.argv[1] == "/home/u/run/vllm_main.py"
    assert LAUNCHER_MODULE not in worker.argv
    assert head.env["VLLM_HOST_IP"] == "10.231.0.1" and worker.env["VLLM_HOST_IP"] == "10.231.0.2"
    assert launch.endpoint == "http://10.231.0.1:8000"


def test_docker_wraps_the_same_vllm_argv() -> None:
    venv = launch_of(_two("serve.api_key_env=MY_KEY"), "/models/smol", run_id="abc", node_paths=PATHS)
    dock = launch_of(_two("serve.api_key_env=MY_KEY", "runtime={kind: docker, image: 'vllm/vllm-openai:v0.32.0'}"),
                  "/models/smol", run_id="abc", node_paths=PATHS)
    for v, d in zip(venv.ranks, dock.ranks, strict=True):
        assert _vllm_args(d.argv) == _vllm_args(v.argv)
        a = d.argv
        assert a[:5] == ["docker", "run", "--rm", "--restart", "no"]  # the supervisor owns restarts
        assert d.container == f"forklift-abc-rank{d.rank}" and a[a.index("--name") + 1] == d.container
        assert "forklift.run_id=abc" in a and f"forklift.rank={d.rank}" in a
        assert a[a.index("--network") + 1] == "host" and a[a.index("--ipc") + 1] == "host"
        assert a[a.index("--gpus") + 1] == "all"
        mounts = [a[i + 1] for i, x in enumerate(a) if x == "-v"]
        home = PATHS[d.node_index].home
        assert "/models/smol:/models/smol:ro" in mounts
        assert f"{home}/.cache/huggingface:/root/.cache/huggingface" in mounts
        assert f"{PATHS[d.node_index].run_dir}/vllm_main.py:/opt/forklift/vllm_main.py:ro" in mounts
        envs = [a[i + 1] for i, x in enumerate(a) if x == "-e"]
        assert "VLLM_CPU_KVCACHE_SPACE=1" in envs
        image_at = a.index("vllm/vllm-openai:v0.32.0")
        assert a[image_at + 1 : image_at + 3] == ["python3", "/opt/forklift/vllm_main.py"]
    head = dock.head
    assert "VLLM_API_KEY" in head.argv and not any(x.startswith("VLLM_API_KEY=") for x in head.argv)
    assert head.secret_env == {"VLLM_API_KEY": "MY_KEY"}


def test_ray_mode_starts_ray_then_one_engine_with_typed_timeouts() -> None:
    launch = launch_of(_two("parallel.backend=ray", "ray.port=6390", "ray.health_check_failure_threshold=700",
                         "nodes.0.hardware=gb10", "nodes.1.hardware=gb10"), "/m", run_id="abc", node_paths=PATHS)
    head_ray, worker_ray = launch.ray
    assert head_ray.role == "ray-head" and "--head" in head_ray.argv and "--block" in head_ray.argv
    assert head_ray.argv[head_ray.argv.index("--port") + 1] == "6390"
    assert worker_ray.argv[worker_ray.argv.index("--address") + 1] == "10.231.0.1:6390"
    assert worker_ray.argv[worker_ray.argv.index("--node-ip-address") + 1] == "10.231.0.2"
    for p in launch.processes:
        assert p.env["RAY_health_check_failure_threshold"] == "700"
        assert p.env["RAY_CGRAPH_get_timeout"] == "3600"
        assert p.env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] == "0"  # Ray's 30 s drain would outlast down's grace
    assert [r.rank for r in launch.ranks] == [0]
    engine = launch.head.argv
    assert engine[engine.index("--distributed-executor-backend") + 1] == "ray" and "--nnodes" not in engine
    assert launch.ray_status_argv is not None and "status" in launch.ray_status_argv


def test_ray_mode_on_cpu_nodes_is_refused_before_anything_starts() -> None:
    with pytest.raises(RecipeError) as err:
        launch_of(_two("parallel.backend=ray", "nodes.0.hardware=gb10"), "/m", run_id="abc", node_paths=PATHS)
    assert "CPU node(s) b" in str(err.value) and "backend: native" in (err.value.fix or "")


def test_ray_status_node_count() -> None:
    text = """======== Autoscaler status: 2026-11-30 ========
Node status
---------------------------------------------------------------
Active:
 1 node_8d1f2c0e9a
 1 node_77aa0b1c2d
Pending:
 (no pending nodes)
Recent failures:
 1 node_deadbeef00
"""
    assert ray_node_count(text) == 2
    assert ray_node_count("Active:\n (no active nodes)\nPending:\n") == 0


def test_k8s_leader_worker_set_validates_against_lws_schema() -> None:
    r = _two("runtime={kind: docker, image: 'vllm/vllm-openai:v0.32.0'}", "nodes.0.hardware=gb10",
             "serve.api_key_env=MY_KEY")
    manifest = leader_worker_set(for_launch(r.model_copy(update={"model": r.model.model_copy(
        update={"path": "/models/smol"})}), force=True))
    jsonschema.validate(manifest, SCHEMA)
    tpl = manifest["spec"]["leaderWorkerTemplate"]
    assert tpl["size"] == 2
    leader = tpl["leaderTemplate"]["spec"]["containers"][0]
    worker = tpl["workerTemplate"]["spec"]["containers"][0]
    assert leader["args"][leader["args"].index("--node-rank") + 1] == "0" and "--headless" not in leader["args"]
    assert worker["args"][worker["args"].index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
    assert "--headless" in worker["args"] and "--port" not in worker["args"]
    assert worker["args"][worker["args"].index("--master-addr") + 1] == "$(LWS_LEADER_ADDRESS)"
    assert leader["image"] == "vllm/vllm-openai:v0.32.0"
    assert leader["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_lws_schema_rejects_a_misspelt_field() -> None:
    manifest = leader_worker_set(for_launch(_two(), force=True))
    manifest["spec"]["leaderWorkerTemplate"]["sise"] = 2
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(manifest, SCHEMA)


def test_k8s_args_and_env_from_the_recipe_are_not_expanded_by_kubernetes() -> None:
    r = _two("model.served_name=$(VLLM_API_KEY)", "env={NOTE: 'a $(HOME) b'}", "serve.api_key_env=MY_KEY")
    tpl = leader_worker_set(for_launch(r, force=True))["spec"]["leaderWorkerTemplate"]
    leader = tpl["leaderTemplate"]["spec"]["containers"][0]
    worker = tpl["workerTemplate"]["spec"]["containers"][0]
    assert leader["args"][leader["args"].index("--served-model-name") + 1] == "$$(VLLM_API_KEY)"
    assert {"name": "NOTE", "value": "a $$(HOME) b"} in leader["env"]
    # forklift's own references to the LeaderWorkerSet's variables are still expanded
    assert worker["args"][worker["args"].index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"

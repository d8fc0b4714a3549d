"""Render a recipe into vLLM argv and env for every rank.

Single node: one ``vllm serve``. Native multi-node (``parallel.backend: native``): one process per
node with ``--nnodes/--node-rank/--master-addr/--master-port``; ranks >= 1 are ``--headless`` and are
started first, the head last. Ray (``parallel.backend: ray``): ``ray start --head`` on the head node,
``ray start --address`` on every other node, then one ``vllm serve --distributed-executor-backend ray``
on the head. Runtime ``venv`` runs the argv as is; ``docker`` wraps the same argv in ``docker run``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path

from forklift.errors import RecipeError
from forklift.hardware.profiles import get as hardware_profile
from forklift.launch.docker import LAUNCHER_IN_CONTAINER, container_name, docker_argv
from forklift.launch.model import Launch, NodePaths, RankLaunch, Role
from forklift.recipe.schema import DockerRuntime, Node, Recipe, Serve

LAUNCHER_MODULE = "forklift.engine.vllm_main"
LAUNCHER_FILE = "vllm_main.py"
RAY_CLI = ["-m", "ray.scripts.scripts"]
API_KEY_VAR = "VLLM_API_KEY"
"""The variable vLLM reads its API key from (the head's secret_env maps it to serve.api_key_env)."""


def serve_flags(serve: Serve) -> list[str]:
    """vLLM CLI flags for the typed serving knobs (null fields are left to vLLM's default)."""
    flags: list[str] = []

    def add(flag: str, value: object | None) -> None:
        if value is not None:
            flags.extend([flag, str(value)])

    add("--max-model-len", serve.max_model_len)
    add("--gpu-memory-utilization", serve.gpu_memory_utilization)
    add("--max-num-batched-tokens", serve.max_num_batched_tokens)
    add("--max-num-seqs", serve.max_num_seqs)
    if serve.kv_cache_dtype != "auto":
        add("--kv-cache-dtype", serve.kv_cache_dtype)
    add("--quantization", serve.quantization)
    if serve.dtype != "auto":
        add("--dtype", serve.dtype)
    if serve.enforce_eager:
        flags.append("--enforce-eager")
    add("--block-size", serve.block_size)
    if serve.disable_custom_all_reduce:
        flags.append("--disable-custom-all-reduce")
    add("--reasoning-parser", serve.reasoning_parser)
    add("--tool-call-parser", serve.tool_call_parser)
    if serve.enable_auto_tool_choice:
        flags.append("--enable-auto-tool-choice")
    if serve.speculative is not None:
        spec = serve.speculative.model_dump(exclude_none=True)
        flags.extend(["--speculative-config", json.dumps(spec, separators=(",", ":"))])
    add("--seed", serve.seed)
    flags.extend(serve.extra_args)
    return flags


def rank_env(recipe: Recipe) -> dict[str, str]:
    env: dict[str, str] = {}
    if recipe.serve.cpu_kv_cache_gib is not None:
        gib = recipe.serve.cpu_kv_cache_gib
        env["VLLM_CPU_KVCACHE_SPACE"] = str(int(gib)) if float(gib).is_integer() else str(gib)
    if recipe.parallel.pp_layer_partition:
        env["VLLM_PP_LAYER_PARTITION"] = ",".join(str(n) for n in recipe.parallel.pp_layer_partition)
    net = recipe.network
    if net.nccl_socket_ifname:
        env["NCCL_SOCKET_IFNAME"] = net.nccl_socket_ifname
    if net.gloo_socket_ifname:
        env["GLOO_SOCKET_IFNAME"] = net.gloo_socket_ifname
    if net.nccl_ib_disable is not None:
        env["NCCL_IB_DISABLE"] = "1" if net.nccl_ib_disable else "0"
    if net.nccl_ib_hca:
        env["NCCL_IB_HCA"] = net.nccl_ib_hca
    if net.nccl_net_gdr_level is not None:
        env["NCCL_NET_GDR_LEVEL"] = str(net.nccl_net_gdr_level)
    if net.nccl_debug:
        env["NCCL_DEBUG"] = net.nccl_debug
    if recipe.parallel.backend == "ray" and len(recipe.nodes) > 1:
        env.update(ray_env(recipe))
    env.update(recipe.env)
    return env


def ray_env(recipe: Recipe) -> dict[str, str]:
    """Seed 002's Ray timeouts, from typed fields (Ray reads RAY_<flag> for its internal config)."""
    env: dict[str, str] = {}
    if recipe.ray.health_check_failure_threshold is not None:
        env["RAY_health_check_failure_threshold"] = str(recipe.ray.health_check_failure_threshold)
    if recipe.ray.cgraph_get_timeout_s is not None:
        env["RAY_CGRAPH_get_timeout"] = str(recipe.ray.cgraph_get_timeout_s)
    drain = recipe.ray.drain_timeout_s
    env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = str(int(drain)) if float(drain).is_integer() else str(drain)
    return env


def python_for(recipe: Recipe) -> str:
    rt = recipe.runtime
    if rt.kind == "venv":
        return rt.python or sys.executable
    return rt.python


def node_addr(node: Node) -> str:
    """The address other ranks (and clients) reach this node on."""
    if node.data_ip:
        return node.data_ip
    if node.is_local:
        return "127.0.0.1"
    if node.ssh:
        from_ssh = node.ssh.rsplit("@", 1)[-1]
        host = from_ssh.strip("[]").rsplit(":", 1)[0] if from_ssh.count(":") == 1 else from_ssh.strip("[]")
        return host
    return node.host


def default_node_paths(recipe: Recipe, run_name: str) -> dict[int, NodePaths]:
    """Display-only paths for `forklift render` (``up`` passes the real ones it resolved on each node)."""
    return {i: NodePaths(run_dir=f"~/.local/state/forklift/runs/{run_name}", home="~")
            for i in range(len(recipe.nodes))}


class _Ctx:
    """What every rank of one render shares."""

    def __init__(self, recipe: Recipe, run_id: str, node_paths: Mapping[int, NodePaths]) -> None:
        self.recipe = recipe
        self.run_id = run_id
        self.node_paths = node_paths
        self.python = python_for(recipe)

    def launcher(self, node_index: int) -> list[str]:
        """How to invoke forklift's vLLM launcher on a node."""
        node = self.recipe.nodes[node_index]
        if self.recipe.runtime.kind == "docker":
            return [self.python, LAUNCHER_IN_CONTAINER]
        if node.is_local:
            return [self.python, "-m", LAUNCHER_MODULE]
        return [self.python, f"{self.node_paths[node_index].run_dir}/{LAUNCHER_FILE}"]

    def wrap(self, node_index: int, rank: int, role: Role, inner: list[str], env: dict[str, str],
             secret: dict[str, str], model_path: str, headless: bool) -> RankLaunch:
        node = self.recipe.nodes[node_index]
        paths = self.node_paths[node_index]
        rt = self.recipe.runtime
        if not isinstance(rt, DockerRuntime):
            return RankLaunch(rank=rank, node_index=node_index, host=node.host, argv=inner, env=env,
                              headless=headless, secret_env=secret, role=role, run_dir=paths.run_dir)
        name = container_name(self.run_id, rank, role)
        mounts = [f"{model_path}:{model_path}:ro", f"{paths.home}/.cache/huggingface:/root/.cache/huggingface",
                  f"{paths.home}/.cache/vllm:/root/.cache/vllm",
                  f"{paths.run_dir}/{LAUNCHER_FILE}:{LAUNCHER_IN_CONTAINER}:ro"]
        argv = docker_argv(rt, inner, name=name, run_id=self.run_id, rank=rank, role=role, env=env,
                           secret_names=sorted(secret), mounts=mounts)
        return RankLaunch(rank=rank, node_index=node_index, host=node.host, argv=argv, env={},
                          headless=headless, secret_env=secret, role=role, container=name, run_dir=paths.run_dir)


def _check_layout(recipe: Recipe) -> None:
    nnodes = len(recipe.nodes)
    par = recipe.parallel
    if nnodes > 1 and par.backend == "native" and par.tp * par.pp * par.dp < nnodes:
        raise RecipeError(
            f"{nnodes} nodes but tp*pp*dp = {par.tp * par.pp * par.dp}: some nodes would get no rank",
            fix="Set parallel.pp (or tp) so that tp*pp*dp covers every node, or list fewer nodes.",
        )
    if nnodes > 1 and par.backend == "ray":
        cpu = [n.host for n in recipe.nodes if hardware_profile(n.hardware).kind == "cpu"]
        if cpu:
            raise RecipeError(
                f"parallel.backend: ray on CPU node(s) {', '.join(cpu)}: vLLM's CPU platform has no Ray executor "
                "(its ray_device_key is empty; `vllm serve` would stop with 'current platform cpu does not support "
                "ray' after the Ray cluster formed)",
                fix="Use parallel.backend: native (the default) for CPU nodes; the Ray backend needs GPU nodes.",
            )
    hosts = [n.host for n in recipe.nodes]
    dupes = sorted({h for h in hosts if hosts.count(h) > 1})
    if nnodes > 1 and dupes:
        raise RecipeError(f"nodes: host names must be unique, {', '.join(dupes)} repeats",
                          fix="Give every node its own `host:` name (the ssh target may still be shared).")


def engine_args(recipe: Recipe, model_path: str) -> list[str]:
    """`serve MODEL ...` flags shared by every rank (no per-node placement flags)."""
    par = recipe.parallel
    base = ["serve", model_path, "--served-model-name", recipe.served_name]
    if recipe.model.load_format != "auto":
        base += ["--load-format", recipe.model.load_format]
    if recipe.model.tokenizer:
        base += ["--tokenizer", recipe.model.tokenizer]
    if recipe.model.trust_remote_code:
        base.append("--trust-remote-code")
    if par.tp > 1:
        base += ["--tensor-parallel-size", str(par.tp)]
    if par.pp > 1:
        base += ["--pipeline-parallel-size", str(par.pp)]
    if par.dp > 1:
        base += ["--data-parallel-size", str(par.dp)]
    if par.dcp > 1:
        base += ["--decode-context-parallel-size", str(par.dcp)]
    return base + serve_flags(recipe.serve)


def _ray_processes(ctx: _Ctx, env: dict[str, str], model_path: Mapping[int, str]) -> tuple[list[RankLaunch], list[str]]:
    recipe = ctx.recipe
    head_ip = node_addr(recipe.head)
    procs: list[RankLaunch] = []
    for idx, node in enumerate(recipe.nodes):
        ray = [ctx.python, *RAY_CLI, "start", "--block", "--node-ip-address", node_addr(node)]
        if idx == 0:
            ray += ["--head", "--port", str(recipe.ray.port), "--disable-usage-stats"]
        else:
            ray += ["--address", f"{head_ip}:{recipe.ray.port}"]
        role: Role = "ray-head" if idx == 0 else "ray-worker"
        procs.append(ctx.wrap(idx, idx, role, ray, {**env, **node.env}, {}, model_path[idx], headless=idx > 0))
    status = [ctx.python, *RAY_CLI, "status", "--address", f"{head_ip}:{recipe.ray.port}"]
    if procs[0].container:
        status = ["docker", "exec", procs[0].container, *status]
    return procs, status


def render(recipe: Recipe, model_path: str | Path, *, run_id: str = "RUNID",
           node_paths: Mapping[int, NodePaths] | None = None) -> Launch:
    """The exact commands for every rank: Ray daemons first, then workers, the head last."""
    _check_layout(recipe)
    nnodes = len(recipe.nodes)
    par = recipe.parallel
    ctx = _Ctx(recipe, run_id, node_paths or default_node_paths(recipe, recipe.name or "default"))
    head_addr = node_addr(recipe.head)
    paths = {i: n.model_path or str(model_path) for i, n in enumerate(recipe.nodes)}
    env = rank_env(recipe)
    secret = {API_KEY_VAR: recipe.serve.api_key_env} if recipe.serve.api_key_env else {}
    ray_mode = nnodes > 1 and par.backend == "ray"

    ranks: list[RankLaunch] = []
    for idx, node in enumerate(recipe.nodes):
        if ray_mode and idx > 0:
            continue  # Ray workers join the cluster; only the head runs `vllm serve`
        node_env = {**env, **node.env}
        if nnodes > 1 and (node.data_ip or not node.is_local):
            node_env.setdefault("VLLM_HOST_IP", node_addr(node))
        if ray_mode:
            node_env.setdefault("RAY_ADDRESS", f"{head_addr}:{recipe.ray.port}")
        argv = [*ctx.launcher(idx), *engine_args(recipe, paths[idx])]
        if ray_mode:
            argv += ["--distributed-executor-backend", "ray"]
        elif nnodes > 1:
            argv += ["--nnodes", str(nnodes), "--node-rank", str(idx), "--master-addr", head_addr,
                     "--master-port", str(recipe.network.master_port)]
        headless = nnodes > 1 and idx > 0
        if headless:
            argv.append("--headless")
        else:
            argv += ["--host", recipe.serve.host, "--port", str(recipe.serve.port)]
        ranks.append(ctx.wrap(idx, idx, "engine", argv, node_env, secret if idx == 0 else {}, paths[idx], headless))
    ranks.sort(key=lambda r: (r.rank == 0, r.rank))  # workers first, head last
    ray_procs, ray_status = _ray_processes(ctx, env, paths) if ray_mode else ([], None)

    client_host = "127.0.0.1" if recipe.serve.host in ("0.0.0.0", "::") else recipe.serve.host
    if not recipe.head.is_local:
        client_host = recipe.serve.host if recipe.serve.host not in ("0.0.0.0", "::", "127.0.0.1") else head_addr
    return Launch(
        ranks=ranks,
        endpoint=f"http://{client_host}:{recipe.serve.port}",
        served_name=recipe.served_name,
        model_path=str(model_path),
        port=recipe.serve.port,
        runtime=recipe.runtime.kind,
        run_id=run_id,
        ray=ray_procs,
        ray_status_argv=ray_status,
    )

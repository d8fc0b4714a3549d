"""Render a recipe into vLLM argv and env for every rank.

Single node: one ``vllm serve``. Native multi-node (``parallel.backend: native``): one process per
node with ``--nnodes/--node-rank/--master-addr/--master-port``; ranks >= 1 are ``--headless`` and are
started first, the head last.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from forklift.errors import RecipeError
from forklift.launch.model import Launch, RankLaunch
from forklift.recipe.schema import Recipe, Serve

LAUNCHER_MODULE = "forklift.engine.vllm_main"


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
    env.update(recipe.env)
    return env


def python_for(recipe: Recipe) -> str:
    rt = recipe.runtime
    if rt.kind == "venv":
        return rt.python or sys.executable
    return rt.python


def render(recipe: Recipe, model_path: str | Path) -> Launch:
    """The exact commands for every rank, workers first and the head last."""
    nnodes = len(recipe.nodes)
    par = recipe.parallel
    if nnodes > 1 and par.backend == "native" and par.tp * par.pp * par.dp < nnodes:
        raise RecipeError(
            f"{nnodes} nodes but tp*pp*dp = {par.tp * par.pp * par.dp}: some nodes would get no rank",
            fix="Set parallel.pp (or tp) so that tp*pp*dp covers every node, or list fewer nodes.",
        )
    head = recipe.head
    head_addr = head.data_ip or ("127.0.0.1" if head.is_local else head.host)
    python = python_for(recipe)
    base = [python, "-m", LAUNCHER_MODULE, "serve", str(model_path), "--served-model-name", recipe.served_name]
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
    base += serve_flags(recipe.serve)
    env = rank_env(recipe)
    secret = {"VLLM_API_KEY": recipe.serve.api_key_env} if recipe.serve.api_key_env else {}

    ranks: list[RankLaunch] = []
    for idx, node in enumerate(recipe.nodes):
        argv = list(base)
        if nnodes > 1:
            if par.backend == "ray":
                argv += ["--distributed-executor-backend", "ray"]
            else:
                argv += ["--nnodes", str(nnodes), "--node-rank", str(idx), "--master-addr", head_addr,
                         "--master-port", str(recipe.network.master_port)]
        headless = nnodes > 1 and idx > 0 and par.backend == "native"
        if headless:
            argv.append("--headless")
        else:
            argv += ["--host", recipe.serve.host, "--port", str(recipe.serve.port)]
        if nnodes > 1 and par.backend == "ray" and idx > 0:
            continue  # Ray workers join the cluster; only the head runs `vllm serve`
        ranks.append(RankLaunch(rank=idx, node_index=idx, host=node.host, argv=argv, env=dict(env),
                                headless=headless, secret_env=secret if idx == 0 else {}))
    ranks.sort(key=lambda r: (r.rank == 0, r.rank))  # workers first, head last
    client_host = "127.0.0.1" if recipe.serve.host in ("0.0.0.0", "::") else recipe.serve.host
    if not head.is_local:
        client_host = head.data_ip or head.host
    return Launch(
        ranks=ranks,
        endpoint=f"http://{client_host}:{recipe.serve.port}",
        served_name=recipe.served_name,
        model_path=str(model_path),
        port=recipe.serve.port,
        runtime=recipe.runtime.kind,
    )

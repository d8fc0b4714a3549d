"""The vLLM argv and environment every rank shares, from the plan's deployment and decisions.

Typed recipe knobs become flags one for one (null means vLLM's default, so no flag); what the plan decided
(layer split, explicit KV budget) comes from ``plan.decisions``, never from a second reading of the recipe.
"""

from __future__ import annotations

import json

from forklift import speculative
from forklift.plan.result import Decisions
from forklift.recipe.schema import Node, Recipe, Serve

API_KEY_VAR = "VLLM_API_KEY"
"""The variable vLLM reads its API key from (the head's secret_env maps it to serve.api_key_env)."""


def serve_flags(serve: Serve) -> list[str]:
    """vLLM CLI flags for the typed serving knobs (null fields are left to vLLM's default)."""
    flags: list[str] = []

    def add(flag: str, value: object | None) -> None:
        if value is not None:
            flags.extend([flag, str(value)])

    def switch(flag: str, on: bool) -> None:
        if on:
            flags.append(flag)

    add("--max-model-len", serve.max_model_len)
    add("--gpu-memory-utilization", serve.gpu_memory_utilization)
    add("--max-num-batched-tokens", serve.max_num_batched_tokens)
    add("--max-num-seqs", serve.max_num_seqs)
    add("--kv-cache-dtype", None if serve.kv_cache_dtype == "auto" else serve.kv_cache_dtype)
    add("--quantization", serve.quantization)
    add("--dtype", None if serve.dtype == "auto" else serve.dtype)
    switch("--enforce-eager", serve.enforce_eager)
    add("--block-size", serve.block_size)
    switch("--disable-custom-all-reduce", serve.disable_custom_all_reduce)
    if serve.enable_prefix_caching is not None:
        flags.append("--enable-prefix-caching" if serve.enable_prefix_caching else "--no-enable-prefix-caching")
    switch("--enable-expert-parallel", serve.enable_expert_parallel)
    add("--reasoning-parser", serve.reasoning_parser)
    add("--tool-call-parser", serve.tool_call_parser)
    switch("--enable-auto-tool-choice", serve.enable_auto_tool_choice)
    flags.extend(speculative.render.flags(serve.speculative))
    flags.extend(multimodal_flags(serve))
    add("--seed", serve.seed)
    return [*flags, *serve.extra_args]


def multimodal_flags(serve: Serve) -> list[str]:
    """--limit-mm-per-prompt / --skip-mm-profiling / --mm-encoder-tp-mode / --mm-processor-kwargs (JSON values, as
    vLLM's arg parser reads them; engine/arg_utils.py EngineArgs.add_cli_args @0.26.0)."""
    mm, out = serve.multimodal, []
    if mm.limit_mm_per_prompt is not None:
        out += ["--limit-mm-per-prompt", json.dumps(mm.limit_mm_per_prompt, sort_keys=True)]
    if mm.skip_mm_profiling:
        out.append("--skip-mm-profiling")
    if mm.mm_encoder_tp_mode != "weights":
        out += ["--mm-encoder-tp-mode", mm.mm_encoder_tp_mode]
    if mm.max_pixels is not None:
        out += ["--mm-processor-kwargs", json.dumps({"max_pixels": mm.max_pixels})]
    return out


def engine_args(recipe: Recipe, decisions: Decisions, model_arg: str) -> list[str]:
    """`serve MODEL ...` flags shared by every rank (no per-node placement flags)."""
    par = recipe.parallel
    base = ["serve", model_arg, "--served-model-name", recipe.served_name]
    if recipe.model.load_format != "auto":
        base += ["--load-format", recipe.model.load_format]
    if recipe.model.tokenizer:
        base += ["--tokenizer", recipe.model.tokenizer]
    if recipe.model.revision and recipe.model.is_hub_id:
        base += ["--revision", recipe.model.revision]
    if recipe.model.trust_remote_code:
        base.append("--trust-remote-code")
    for flag, size in (("--tensor-parallel-size", par.tp), ("--pipeline-parallel-size", par.pp),
                       ("--data-parallel-size", par.dp), ("--decode-context-parallel-size", par.dcp)):
        if size > 1:
            base += [flag, str(size)]
    if decisions.kv_cache_memory_bytes is not None:
        base += ["--kv-cache-memory-bytes", str(decisions.kv_cache_memory_bytes)]
    return base + serve_flags(recipe.serve)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def network_env(recipe: Recipe) -> dict[str, str]:
    """NCCL / Gloo settings from the typed network fields."""
    net = recipe.network
    env: dict[str, str] = {}
    for var, value in (("NCCL_SOCKET_IFNAME", net.nccl_socket_ifname), ("GLOO_SOCKET_IFNAME", net.gloo_socket_ifname),
                       ("NCCL_IB_HCA", net.nccl_ib_hca), ("NCCL_DEBUG", net.nccl_debug)):
        if value:
            env[var] = value
    if net.nccl_ib_disable is not None:
        env["NCCL_IB_DISABLE"] = "1" if net.nccl_ib_disable else "0"
    if net.nccl_net_gdr_level is not None:
        env["NCCL_NET_GDR_LEVEL"] = str(net.nccl_net_gdr_level)
    return env


def node_network_env(node: Node) -> dict[str, str]:
    """A node's own NCCL / Gloo settings (over the recipe's network section, under the node's env)."""
    env: dict[str, str] = {}
    for var, value in (("NCCL_SOCKET_IFNAME", node.nccl_socket_ifname), ("GLOO_SOCKET_IFNAME", node.gloo_socket_ifname),
                       ("NCCL_IB_HCA", node.nccl_ib_hca)):
        if value:
            env[var] = value
    if node.nccl_ib_gid_index is not None:
        env["NCCL_IB_GID_INDEX"] = str(node.nccl_ib_gid_index)
    return env


def ray_env(recipe: Recipe) -> dict[str, str]:
    """Seed 002's Ray timeouts, from typed fields (Ray reads RAY_<flag> for its internal config)."""
    env: dict[str, str] = {}
    if recipe.ray.health_check_failure_threshold is not None:
        env["RAY_health_check_failure_threshold"] = str(recipe.ray.health_check_failure_threshold)
    if recipe.ray.cgraph_get_timeout_s is not None:
        env["RAY_CGRAPH_get_timeout"] = str(recipe.ray.cgraph_get_timeout_s)
    env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = _num(recipe.ray.drain_timeout_s)
    return env


def rank_env(recipe: Recipe, decisions: Decisions) -> dict[str, str]:
    """Environment every rank gets (before the node's own env)."""
    env: dict[str, str] = {}
    if recipe.serve.cpu_kv_cache_gib is not None:
        env["VLLM_CPU_KVCACHE_SPACE"] = _num(recipe.serve.cpu_kv_cache_gib)
    if recipe.serve.engine_in_process:  # render.check_layout admits it on one CPU node only
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if decisions.pp_layer_partition:
        env["VLLM_PP_LAYER_PARTITION"] = ",".join(str(n) for n in decisions.pp_layer_partition)
    if recipe.model.is_hub_id:
        env["HF_HUB_OFFLINE"] = "1"  # forklift never downloads; a missing snapshot fails loudly, not for hours
    env.update(network_env(recipe))
    if recipe.parallel.backend == "ray" and len(recipe.nodes) > 1:
        env.update(ray_env(recipe))
    env.update(recipe.env)
    return env

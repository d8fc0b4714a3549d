"""The context layer: what is known about the run besides its log text.

A ``Context`` is plain data (the caller builds it from the run record and the node collection; doctor
never reads records or nodes itself): the phase the run reached, which rank died, the plan's verdict
and KV margin, the patches applied, the backend, unified memory and free memory per node. It shifts
the statistical layer's odds between categories that look alike in text (an OOM while loading versus
while serving, Ray errors on a run that does not use Ray) and turns a patch-shaped finding into
"apply this patch" or "this patch is applied and still fails".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from forklift.doctor.anchors import anchors

PHASES: list[tuple[str, re.Pattern[str]]] = [
    ("starting", re.compile(r"non-default args|Initializing a V\d LLM engine|vLLM API server version")),
    ("loading weights", re.compile(
        r"Starting to load model|Loading model from scratch|Loading (?:safetensors|pt) checkpoint|Loading weights|"
        r"Model loading took|Loading model weights took")),
    ("compiling", re.compile(
        r"Warming up model|torch\.compile|Capturing CUDA graph|Compiling a graph|profil(?:e|ing)")),
    ("sizing KV cache", re.compile(r"KV cache size:|Available KV cache memory|Maximum concurrency|# GPU blocks")),
    ("serving", re.compile(r"Starting vLLM (?:API )?server on|Application startup complete")),
]
PHASE_NAMES = [name for name, _ in PHASES]
RAY = ("ray_actor_or_session", "ray_worker_died", "ray_health_timeout")
MULTI_NODE = ("nccl_network_config", "rdma_ib_error", "distributed_init_timeout", "model_path_missing_on_worker")


@dataclass(frozen=True)
class Context:
    """Facts about the run; every field is optional."""

    vllm_version: str | None = None
    phase: str | None = None
    status: str | None = None
    error: str | None = None
    failed_rank: int | None = None
    failed_host: str | None = None
    plan_fits: bool | None = None
    kv_margin_gib: float | None = None
    plan_notes: tuple[str, ...] = ()
    patches_applied: tuple[str, ...] = ()
    patches_wanted: tuple[str, ...] = ()
    backend: str | None = None
    nodes: int | None = None
    unified_memory: bool | None = None
    mem_available: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """Per host: (MemAvailable bytes, MemTotal bytes) when collected."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in self.__dict__.items():
            if value in (None, (), {}):
                continue
            out[key] = dict(value) if isinstance(value, Mapping) else list(value) if isinstance(value, tuple) else value
        return out


_PHASE_QUICK = tuple(sorted({w for _, rx in PHASES for w in anchors(rx.pattern) or ()}))


def phase_of(lines: Iterable[str]) -> str | None:
    """The furthest startup phase the lines show, or None."""
    best = -1
    for line in lines:
        low = line.lower()
        if not any(w in low for w in _PHASE_QUICK):
            continue
        for i in range(len(PHASES) - 1, best, -1):
            if PHASES[i][1].search(line):
                best = i
                break
    return PHASE_NAMES[best] if best >= 0 else None


def _low_memory(ctx: Context) -> bool:
    return any(total and avail / total < 0.08 for avail, total in ctx.mem_available.values())


def priors(ctx: Context | None, phase: str | None) -> dict[str, float]:
    """Multipliers on the statistical layer's category odds (absent: 1)."""
    out: dict[str, float] = {}

    def scale(cats: Iterable[str], factor: float) -> None:
        for c in cats:
            out[c] = out.get(c, 1.0) * factor

    phase = (ctx.phase if ctx and ctx.phase else None) or phase
    if phase == "loading weights":
        scale(["oom_weights_load", "page_cache_pressure", "weight_loader_signature_drift"], 2.0)
        scale(["oom_gpu_runtime", "cuda_graph_capture_failure", "reasoning_budget"], 0.5)
    elif phase in ("compiling", "sizing KV cache"):
        scale(["oom_gpu_runtime", "cuda_graph_capture_failure", "kv_cache_insufficient", "compile_failure"], 1.5)
        scale(["oom_weights_load"], 0.5)
    elif phase == "serving":
        scale(["shm_broadcast_rpc_timeout", "oom_gpu_runtime", "nccl_hang_or_timeout", "reasoning_budget",
               "tool_parser_or_reasoning_parser", "tokenizer_or_chat_template"], 1.5)
        scale(["oom_weights_load", "model_path_missing_on_worker", "engine_args_invalid"], 0.5)
    if ctx is None:
        return out
    if ctx.plan_fits is False or (ctx.kv_margin_gib is not None and ctx.kv_margin_gib < 0):
        scale(["kv_cache_insufficient"], 3.0)
        scale(["oom_gpu_runtime", "oom_weights_load", "oom_host_unified_memory"], 1.5)
    if ctx.backend == "native":
        scale(RAY, 0.3)
    elif ctx.backend == "ray":
        scale(RAY, 1.5)
    if ctx.nodes == 1:
        scale(MULTI_NODE, 0.5)
    if ctx.unified_memory:
        scale(["oom_host_unified_memory", "page_cache_pressure"], 1.5)
    if _low_memory(ctx):
        scale(["oom_host_unified_memory", "page_cache_pressure"], 2.0)
    return out

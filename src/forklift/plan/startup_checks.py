"""vLLM's startup checks, in vLLM's words (max_model_len, free memory, KV room, Mamba blocks), and the verdict
on unified memory where the terms' spread decides."""

from __future__ import annotations

import math
from dataclasses import dataclass

from forklift.model.spec import ModelSpec
from forklift.plan import gb10, terms
from forklift.plan.context import Context
from forklift.plan.kvcache import KvLayout
from forklift.plan.result import RankPlan
from forklift.plan.stage_inputs import unified_watermarks
from forklift.plan.weights import GIB
from forklift.recipe.deployment import Deployment


@dataclass(frozen=True)
class FreeCheck:
    """vLLM's startup check on the tightest rank: ceil(total x utilization) against the free reading at the init
    snapshot, GiB. ``low`` = ``high`` where the reading is known (a discrete GPU, a measured unified node); on an
    unmeasured unified node the range clean GB10 nodes read (gb10.yaml free_at_init_gib) less the node profile's
    watermark reserve."""

    host: str
    total: float
    requested: float
    low: float
    high: float
    measured: bool
    typical: float
    """The median clean reading (unmeasured) or the reading itself: what a utilization ceiling is sized from."""


def free_check(ctx: Context, ranks: list[RankPlan]) -> FreeCheck | None:
    st = ctx.st
    if st.platform != "cuda":
        return None
    out: list[FreeCheck] = []
    for rank in ranks:
        prof = ctx.profile_of(rank.rank)
        measured = ctx.deployment.facts.get(rank.host)
        if prof.unified:
            g = gb10.terms_for(ctx.vr.version)
            if measured is not None and measured.mem_available_gib:
                free = measured.mem_available_gib - g.pre_snapshot_gib  # MemAvailable less what precedes the read
                out.append(FreeCheck(rank.host, prof.memory_gib, rank.requested_gib, free, free, True, free))
                continue
            reserve = unified_watermarks(ctx).reserve
            out.append(FreeCheck(rank.host, prof.memory_gib, rank.requested_gib, g.free_at_init.low - reserve,
                                 g.free_at_init.high - reserve, False, g.free_at_init.median - reserve))
            continue
        free = prof.memory_gib - terms.pre_snapshot(st.tp, st.pp) / GIB
        out.append(FreeCheck(rank.host, prof.memory_gib, rank.requested_gib, free, free, True, free))
    return min(out, key=lambda c: c.low - c.requested, default=None)


def _free_memory_error(ctx: Context, ranks: list[RankPlan]) -> str | None:
    check = free_check(ctx, ranks)
    if check is None or check.requested <= check.high + 1e-9:
        return None
    shown = f"{check.high:.2f}" if check.measured else f"at most {check.high:.2f}"
    return (f"Free memory on device {check.host} ({shown}/{check.total:.2f} GiB) on startup is less "
            f"than desired GPU memory utilization ({ctx.st.util}, {check.requested:.2f} GiB). "
            "Decrease GPU memory utilization or reduce GPU memory used by other processes.")


def verdict(ctx: Context, ranks: list[RankPlan], layouts: list[KvLayout], pools: list[int],
            error: str | None) -> tuple[str, float | None, float | None, str]:
    """(verdict, KV margin GiB, band GiB, what decides it). Decided outside the spread of the unified-memory terms
    only (gb10.verdict); elsewhere vLLM's error alone decides."""
    st = ctx.st
    if st.platform != "cuda" or not any(p.unified for p in ctx.profiles):
        return ("fits" if error is None else "does not fit"), None, None, ""
    if error is not None and error.startswith(("User-specified max_model_len", "max_num_seqs")):
        return "does not fit", None, None, "vLLM's configuration check"
    g = gb10.terms_for(ctx.vr.version)
    margin = min((pool - lay.needed_bytes()) / GIB for pool, lay in zip(pools, layouts, strict=True))
    band = g.pool_band_gib
    result, reason = gb10.verdict(margin, band), "the KV pool"
    graphs_subtracted = not st.eager and ctx.vr.subtracts_cudagraphs(st.runner)
    if graphs_subtracted and ctx.deployment.recipe.serve.speculative is not None and result != "does not fit":
        result, reason = "too close to call", "the CUDA-graph estimate with speculative decoding on unified memory"
    check = free_check(ctx, ranks)
    if check is not None and check.requested > check.high + 1e-9:
        return "does not fit", margin, band, "the startup free-memory check"
    if check is not None and check.requested > check.low + 1e-9 and result != "does not fit":
        reason = f"{reason} and the startup free-memory check" if result == "too close to call" \
            else "the startup free-memory check"
        result = "too close to call"
    return result, margin, band, reason


def allow_long(deployment: Deployment) -> bool:
    """vLLM's envs.VLLM_ALLOW_LONG_MAX_MODEL_LEN ("1" or "true") where the engine's ModelConfig is built: the
    first node (the API server's), with its env over the recipe's."""
    env = {**deployment.recipe.env, **deployment.nodes[0].env}
    return env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0").strip().lower() in ("1", "true")


def above_model_len(spec: ModelSpec, asked: int | None) -> bool:
    """A requested max_model_len vLLM refuses without VLLM_ALLOW_LONG_MAX_MODEL_LEN (above the derived length and
    above the config's model_max_length, when it has one)."""
    derived = spec.derived_max_len
    if asked is None or derived is None or asked <= derived:
        return False
    return spec.model_max_length is None or asked > spec.model_max_length


def max_len_error(ctx: Context) -> str | None:
    """vLLM's config check (config/model.py _get_and_verify_max_len @0.26), in its words: a user max_model_len
    above the length derived from the model's config is refused unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is set."""
    spec, asked = ctx.spec, ctx.deployment.recipe.serve.max_model_len
    if not above_model_len(spec, asked) or allow_long(ctx.deployment):
        return None
    return (f"User-specified max_model_len ({asked}) is greater than the derived max_model_len "
            f"({spec.max_len_key}={spec.derived_max_len_text} or model_max_length={spec.model_max_length} in "
            "model's config.json). To allow overriding this maximum, set the env var "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the "
            "model uses relative position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. If "
            "the model uses absolute position encoding, positions exceeding derived_max_model_len will cause a CUDA "
            "array out-of-bounds error.")


def startup_error(ctx: Context, ranks: list[RankPlan], layouts: list[KvLayout], pools: list[int],
                  largest: int) -> str | None:
    """The first error vLLM would raise at startup, in vLLM's words, or None."""
    long_error = max_len_error(ctx)
    if long_error:
        return long_error
    if ctx.st.platform == "cuda":
        free_error = _free_memory_error(ctx, ranks)
        if free_error:
            return free_error
    pinned = pinned_pool(ctx, ranks, pools)
    if pinned is not None:
        return pinned.message()
    worst = min(range(len(ranks)), key=lambda i: pools[i] - layouts[i].needed_bytes())
    if pools[worst] <= 0:
        return ("No available memory for the cache blocks "
                f"(rank {worst} on {ranks[worst].host}: {pools[worst] / GIB:.2f} GiB). "
                "Try increasing gpu_memory_utilization when initializing the engine.")
    need = layouts[worst].needed_bytes()
    if ctx.vr.kv_fit_check == "global_min" and ctx.st.pp > 1:
        need = sum(lay.needed_bytes() for lay in layouts[:: ctx.st.tp][: ctx.st.pp])
        worst = min(range(len(ranks)), key=lambda i: pools[i])
    if need > pools[worst]:
        return (f"To serve at least one request with the models's max seq len ({ctx.st.max_model_len}), "
                f"({need / GIB:.2f} GiB KV cache is needed, which is larger than the available KV cache "
                f"memory ({pools[worst] / GIB:.2f} GiB). Based on the available memory, the estimated maximum model "
                f"length is {largest}. Try increasing gpu_memory_utilization or decreasing max_model_len when "
                "initializing the engine.")
    return _mamba_graph_error(ctx, layouts, pools) or _fractional_cpu_pool_error(ctx)


def _fractional_cpu_pool_error(ctx: Context) -> str | None:
    """vLLM-CPU reads VLLM_CPU_KVCACHE_SPACE with int() (envs.py, 0.31 and 0.32): 0.5 stops the start at config
    validation. (Reported after the sizing errors, which say more about the pool asked for.)"""
    gib = ctx.deployment.recipe.serve.cpu_kv_cache_gib
    if ctx.st.platform != "cpu" or gib is None or float(gib).is_integer():
        return None
    return (f"serve.cpu_kv_cache_gib {gib:g} reaches vLLM-CPU as VLLM_CPU_KVCACHE_SPACE={gib:g}, which it reads as "
            f"a whole number of GiB: the start fails at config validation. Set serve.cpu_kv_cache_gib to "
            f"{max(1, round(gib))}.")


@dataclass(frozen=True)
class PinnedPool:
    """A KV pool the recipe sets that does not fit beside the rest of a node or device."""

    key: str
    where: str
    pool_gib: float
    rest_gib: float
    total_gib: float
    ranks: int = 1
    """Ranks sharing the place (vLLM-CPU ranks on one host each allocate the set pool)."""

    @property
    def most(self) -> float:
        """The largest value of ``key`` that fits there: GiB for serve.cpu_kv_cache_gib, bytes otherwise."""
        gib = max(0.0, self.total_gib - self.rest_gib) / self.ranks
        if self.key == "serve.cpu_kv_cache_gib":  # whole GiB: vLLM-CPU reads VLLM_CPU_KVCACHE_SPACE with int()
            return float(math.floor(gib))
        return float(int(gib * 0.95 * GIB))  # a 5% margin: the estimate of the rest is not exact

    def message(self) -> str:
        most = f"{self.most:g} GiB" if self.key == "serve.cpu_kv_cache_gib" else f"{int(self.most)} bytes"
        return (f"{self.key} sets a KV pool of {self.pool_gib:.2f} GiB on {self.where}; with {self.rest_gib:.2f} GiB "
                f"of weights, activations and runtime that is {self.pool_gib + self.rest_gib:.2f} GiB, more than its "
                f"{self.total_gib:.2f} GiB: the pool is allocated as set, so the start runs out of memory. Lower "
                f"{self.key} to at most {most}.")


def pinned_pool(ctx: Context, ranks: list[RankPlan], pools: list[int]) -> PinnedPool | None:
    """A KV pool the recipe sets (vLLM-CPU's VLLM_CPU_KVCACHE_SPACE, or --kv-cache-memory-bytes, which skips
    profiling) is allocated whatever the memory: with the rest of each rank it must fit the node (CPU: the ranks
    on one host share it) or the device, or the start runs out of memory instead of refusing. The tightest place
    where it does not, or None."""
    st = ctx.st
    if st.platform == "cpu" and ctx.deployment.recipe.serve.cpu_kv_cache_gib is None:
        return None  # unset: vLLM-CPU sizes its pool itself
    if st.platform != "cpu" and not isinstance(st.kv_budget, int):
        return None
    key = "serve.cpu_kv_cache_gib" if st.platform == "cpu" else "serve.kv_cache_memory_bytes"
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(ranks):
        groups.setdefault(r.host if st.platform == "cpu" else f"{r.host} rank {r.rank}", []).append(i)
    found: list[PinnedPool] = []
    for where, members in groups.items():
        total = ranks[members[0]].total_gib
        rest = sum(r.weights_gib + r.activation_gib + r.non_torch_gib
                   + (r.cudagraph_gib if st.platform != "cpu" else 0.0) for r in (ranks[i] for i in members))
        pool = sum(pools[i] for i in members) / GIB
        if pool + rest > total:
            found.append(PinnedPool(key, where, pool, rest, total, len(members)))
    return min(found, key=lambda f: f.most) if found else None


def _mamba_graph_error(ctx: Context, layouts: list[KvLayout], pools: list[int]) -> str | None:
    """vLLM 0.20+ (config/compilation.py resolve_cudagraph_mode_and_sizes): with FULL decode graphs, a model with
    Mamba-like layers (GDN, Mamba-2, KDA) needs one cache block per decoding sequence, so max_num_seqs above the
    worker's cache blocks stops the start after the pool is sized."""
    st = ctx.st
    if ctx.vr.mamba_full_graph_blocks != "error" or st.platform != "cuda" or st.eager:
        return None
    blocks = [lay.num_blocks(pool) for lay, pool in zip(layouts, pools, strict=True)
              if any(b.spec.kind == "mamba" for b in lay.buckets)]
    if not blocks or st.seqs <= min(blocks):
        return None
    fewest = min(blocks)
    return (f"max_num_seqs ({st.seqs}) exceeds available Mamba cache blocks ({fewest}). Each decode sequence "
            "requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at "
            f"most {fewest} or increase gpu_memory_utilization.")

"""What to change when a plan does not fit (each step re-planned with the change), and the PP balance."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

from forklift.errors import ForkliftError, PlanError
from forklift.plan import layout
from forklift.plan import weights as mem
from forklift.plan.core import GIB, Core, context, core, free_check, max_len_error
from forklift.plan.result import Advice
from forklift.plan.startup_checks import PinnedPool, pinned_pool
from forklift.recipe.deployment import Deployment

Replan = Callable[[Deployment], Core]


def balanced_partition(core_plan: Core) -> list[int] | None:
    """A layer split that evens out the stages' weights + activation, when it is worth 1% of the largest stage."""
    st = core_plan.settings
    if st.pp < 2 or st.platform != "cuda":
        return None
    act = [r.activation_gib * GIB for r in core_plan.ranks[:: st.tp]]

    def cost(parts: list[int]) -> float:
        return max(core_plan.table.stage(a, b, i == 0, i == st.pp - 1) + act[i]
                   for i, (a, b) in enumerate(layout.stage_ranges(parts)))

    base = st.partition
    best, best_cost = base, cost(base)
    for deltas in itertools.product(range(-3, 4), repeat=st.pp - 1):
        parts = [base[i] + deltas[i] for i in range(st.pp - 1)]
        parts.append(core_plan.ctx.spec.num_layers - sum(parts))
        if min(parts) >= 1 and cost(parts) < best_cost - 1e-6:
            best, best_cost = parts, cost(parts)
    if best is base or cost(base) - best_cost < 0.01 * cost(base):
        return None
    return best


def replan(core_plan: Core, deployment: Deployment) -> Core | None:
    """The core of ``deployment`` with the same model and version rules, or None when vLLM would reject it."""
    try:
        return core(context(deployment, core_plan.ctx.src, core_plan.ctx.vr, core_plan.ctx.st.compile_cache))
    except ForkliftError:
        return None


def _candidates(core_plan: Core) -> list[tuple[str, list[str]]]:
    st = core_plan.settings
    out: list[tuple[str, list[str]]] = []
    if st.mnbt > 8192 or st.seqs > 8:
        out.append(("batch limits: the profile run sizes activations off these",
                    ["serve.max_num_batched_tokens=" + str(min(st.mnbt, 8192)), "serve.max_num_seqs=8"]))
    if st.platform == "cuda" and st.util is not None:
        ceiling = 0.95
        check = free_check(core_plan.ctx, core_plan.ranks)
        if check is not None and any(p.unified for p in core_plan.ctx.profiles):
            ceiling = min(ceiling, int(check.typical / check.total * 100) / 100)
        if ceiling > st.util + 0.005:
            out.append((f"gpu_memory_utilization {st.util} -> {ceiling} (the most the startup check allows)",
                        [f"serve.gpu_memory_utilization={ceiling}"]))
        elif ceiling < st.util:
            out.append((f"gpu_memory_utilization {st.util} -> {ceiling}: the startup check needs the request "
                        "to fit in free memory", [f"serve.gpu_memory_utilization={ceiling}"]))
    if st.platform == "cpu":
        need = max(lay.needed_bytes() for lay in core_plan.layouts) / GIB
        pool = min(core_plan.pools) / GIB
        if need > pool:  # vLLM-CPU's pool is what the recipe sets: enough for the longest request, 1 GiB at least
            gib = float(max(1, math.ceil(need * 1.05)))  # whole GiB: vLLM-CPU reads it with int()
            out.append((f"a larger vLLM-CPU KV pool: serve.cpu_kv_cache_gib {pool:.3g} -> {gib:g}",
                        [f"serve.cpu_kv_cache_gib={gib:g}"]))
    if st.kv_dtype in ("auto", "bfloat16", "float16"):
        out.append(("fp8 KV cache (halves KV bytes per token)", ["serve.kv_cache_dtype=fp8"]))
    if st.platform == "cuda" and not st.eager:
        out.append(("enforce-eager: no CUDA graphs (slower decode)", ["serve.enforce_eager=true"]))
    return out


def _advice(action: str, sets: list[str], alt: Core, effect: str) -> Advice:
    return Advice(action=action, set=sets, effect=effect, kv_pool_gib=mem.round_gib(min(alt.pools)),
                  kv_tokens=alt.kv_tokens, fits=alt.fits)


def _with_sets(core_plan: Core, sets: list[str]) -> Core | None:
    try:
        return replan(core_plan, core_plan.ctx.deployment.with_sets(sets))
    except ForkliftError:
        return None


def _ladder(core_plan: Core) -> list[Advice]:
    """One step per candidate, best KV first; steps that neither fit nor add KV are dropped."""
    steps: list[tuple[int, Advice]] = []
    for action, sets in _candidates(core_plan):
        alt = _with_sets(core_plan, sets)
        if alt is None or (alt.kv_tokens <= core_plan.kv_tokens and not alt.fits):
            continue
        gain = min(alt.pools) - min(core_plan.pools)
        effect = (f"KV pool {gain / GIB:+.2f} GiB per rank; {alt.kv_tokens:,} KV tokens"
                  + ("; fits" if alt.fits else "; still short"))
        steps.append((alt.kv_tokens, _advice(action, sets, alt, effect)))
    steps.sort(key=lambda item: -item[0])
    return [a for _, a in steps]


def _shorter_fitting(core_plan: Core) -> tuple[int, Core] | None:
    """When no length fits at this max_model_len (the pool itself is gone), halve it: the profile's MLA and DSA
    indexer buffers shrink with max_model_len, so a shorter context can free the pool."""
    length = core_plan.settings.max_model_len // 2
    while length >= 2048:
        alt = _with_sets(core_plan, [f"serve.max_model_len={length}"])
        if alt is not None and alt.fits:
            return length, alt
        length //= 2
    return None


def _context_and_dcp(core_plan: Core) -> list[Advice]:
    st, out = core_plan.settings, []
    if 0 < core_plan.largest_len < st.max_model_len:
        sets = [f"serve.max_model_len={core_plan.largest_len}"]
        alt = _with_sets(core_plan, sets)
        if alt is not None:
            out.append(_advice(f"shorter context: max_model_len {st.max_model_len} -> {core_plan.largest_len}",
                               sets, alt,
                               f"fits one {core_plan.largest_len}-token request"))
    elif core_plan.largest_len == 0 and (found := _shorter_fitting(core_plan)) is not None:
        length, alt = found
        out.append(_advice(f"shorter context: max_model_len {st.max_model_len} -> {length} (the profile's "
                           "context-sized buffers shrink with it)", [f"serve.max_model_len={length}"], alt,
                           f"KV pool {min(alt.pools) / GIB:.2f} GiB per rank; {alt.kv_tokens:,} KV tokens"))
    if core_plan.ctx.spec.attention == "mla" and st.tp > 1 and st.dcp == 1:
        sets = [f"parallel.dcp={st.tp}"]
        alt = _with_sets(core_plan, sets)
        if alt is not None:
            out.append(_advice(f"DCP={st.tp}: split stored tokens over the TP ranks", sets, alt,
                               f"{alt.kv_tokens:,} KV tokens"))
    return out


def _one_more_node(core_plan: Core) -> list[Advice]:
    deployment, st = core_plan.ctx.deployment, core_plan.settings
    last = deployment.nodes[-1]
    extra = last.model_copy(update={"host": f"{last.host}-extra", "ssh": None, "data_ip": None})
    parallel = deployment.recipe.parallel.model_copy(update={"pp": st.pp + 1, "pp_layer_partition": None})
    recipe = deployment.recipe.model_copy(update={"nodes": [*deployment.nodes, extra], "parallel": parallel})
    try:
        alt = replan(core_plan, deployment.model_copy(update={"recipe": recipe}))
    except PlanError:
        alt = None
    if alt is None:
        return []
    return [_advice(f"one more {last.hardware} node as another PP stage: add it to the recipe's `nodes:` and set "
                    f"pp={st.pp + 1}", [f"parallel.pp={st.pp + 1}"], alt,
                    f"KV pool {min(alt.pools) / GIB:.2f} GiB per rank; {alt.kv_tokens:,} KV tokens")]


def _model_length(core_plan: Core) -> list[Advice]:
    """vLLM refuses a max_model_len above the model's own: the model's length, or the override (at a risk)."""
    derived, out = core_plan.ctx.spec.derived_max_len, []
    for action, sets in [(f"the model's context: max_model_len {core_plan.settings.max_model_len} -> {derived}",
                          [f"serve.max_model_len={derived}"]),
                         ("allow a longer context than the model's config (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; RoPE "
                          "positions past the model's length may give nan)", ["env.VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"])]:
        alt = _with_sets(core_plan, sets)
        if alt is not None and max_len_error(alt.ctx) is None:
            out.append(_advice(action, sets, alt, f"KV pool {min(alt.pools) / GIB:.2f} GiB per rank; "
                               f"{alt.kv_tokens:,} KV tokens" + ("; fits" if alt.fits else "; still short")))
    return out


def _smaller_pool(core_plan: Core, pinned: PinnedPool) -> list[Advice]:
    """A set pool larger than the memory: the largest that fits is the one way out (nothing else shrinks it)."""
    value = f"{pinned.most:g}" if pinned.key == "serve.cpu_kv_cache_gib" else str(int(pinned.most))
    sets = [f"{pinned.key}={value}"]
    alt = _with_sets(core_plan, sets)
    if alt is None:
        return []
    return [_advice(f"the largest KV pool that fits: {pinned.key} -> {value}", sets, alt,
                    f"KV pool {min(alt.pools) / GIB:.2f} GiB per rank; {alt.kv_tokens:,} KV tokens"
                    + ("; fits" if alt.fits else "; still short"))]


def advice(core_plan: Core) -> list[Advice]:
    """The ways out of a plan that does not fit, each with its re-planned effect; empty when it fits."""
    if core_plan.fits:
        return []
    if max_len_error(core_plan.ctx) is not None:
        return _model_length(core_plan)
    pinned = pinned_pool(core_plan.ctx, core_plan.ranks, core_plan.pools)
    if pinned is not None:
        return _smaller_pool(core_plan, pinned)
    gib = core_plan.ctx.deployment.recipe.serve.cpu_kv_cache_gib
    if core_plan.settings.platform == "cpu" and gib is not None and not float(gib).is_integer():
        sets = [f"serve.cpu_kv_cache_gib={max(1, math.ceil(gib))}"]
        alt = _with_sets(core_plan, sets)
        if alt is not None:  # vLLM-CPU takes whole GiB only
            return [_advice(f"whole GiB: serve.cpu_kv_cache_gib {gib:g} -> {max(1, math.ceil(gib))}", sets, alt,
                            f"{alt.kv_tokens:,} KV tokens" + ("; fits" if alt.fits else "; still short"))]
    return [*_ladder(core_plan), *_context_and_dcp(core_plan), *_one_more_node(core_plan)]

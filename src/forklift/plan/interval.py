"""How far a GPU plan's KV pool may be off, term by term (issue 28 item 6; data: data/uncertainty.yaml).

Each non-KV term the pool is left after (weights, activation peak, non-torch memory, and the CUDA-graph estimate where
vLLM subtracts it) gets a band: where the H200 grid's held-out points verified the term for this vLLM release, GPU
family and key (weights: the quantization method; activation and CUDA graphs: the model family; non-torch: the
layout), the largest error those points show (a fraction of the term; non-torch in GiB) plus the logs' rounding;
elsewhere the wider ``unverified`` band. The bands add up (the terms' errors are not known to cancel). A warm
torch.compile cache (a restart) can only add the flush buffer to the pool (terms.compile_flush), so the interval's
upper end carries it too. ``plan.make.close_call`` decides the verdict on the interval: 'fits' only when its lower
end still fits, 'does not fit' only when its upper end does not.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

from forklift.model.quant import online_scheme
from forklift.plan.core import GIB, Core, compile_flush
from forklift.plan.result import Interval, RankPlan, TermBand
from forklift.yamlio import shipped


@cache
def data() -> dict[str, Any]:
    loaded: dict[str, Any] = shipped("forklift.plan", "uncertainty.yaml")
    return loaded


def layout_key(tp: int, pp: int, nodes: int) -> str:
    """terms.non_torch's table key."""
    if tp > 1:
        return "tp_multi_node" if nodes > 1 else "tp_one_node"
    return "pp" if pp > 1 else "single"


def keys(core_plan: Core) -> dict[str, str]:
    ctx, st = core_plan.ctx, core_plan.settings
    method = online_scheme(ctx.deployment.recipe.serve.quantization, ctx.spec.quant).method
    family = ctx.spec.family
    return {"weights": method, "activation": family, "cudagraph": family,
            "non_torch": layout_key(st.tp, st.pp, len(ctx.deployment.nodes))}


def _verified(version: str, capability: str) -> dict[str, Any] | None:
    for entry in data()["verified"]:
        if str(entry["vllm"]) == version and str(entry["capability"]) == capability:
            found: dict[str, Any] = entry
            return found
    return None


def term_bands(core_plan: Core, rank: RankPlan) -> list[TermBand]:
    """Each non-KV term of one rank with its band (GiB)."""
    st = core_plan.settings
    entry = _verified(core_plan.ctx.vr.version, st.capability)
    floor = float(data()["log_rounding_gib"])
    unverified = data()["unverified"]
    planned = {"weights": rank.weights_gib, "activation": rank.activation_gib, "non_torch": rank.non_torch_gib,
               "cudagraph": rank.cudagraph_gib if rank.cudagraph_subtracted else 0.0}
    out = []
    for term, key in keys(core_plan).items():
        if term == "cudagraph" and not rank.cudagraph_subtracted:
            continue
        table = (entry or {}).get(term, {})
        where = f"vLLM {core_plan.ctx.vr.version}, sm {st.capability}, {key}"
        value = planned[term]
        if key in table:
            err = float(table[key])
            band = (err if term == "non_torch" else err * value) + floor
            why = (f"verified ({where}): held-out max {err:.3f} GiB" if term == "non_torch"
                   else f"verified ({where}): held-out max {err:.2%}")
            basis: Literal["verified", "unverified"] = "verified"
        else:
            err = float(unverified[term])
            band = err if term == "non_torch" else err * value
            why = f"unverified ({where}: no held-out grid point): {err:.3f} GiB" if term == "non_torch" \
                else f"unverified ({where}: no held-out grid point): {err:.0%}"
            basis = "unverified"
        out.append(TermBand(term=term, planned_gib=round(value, 3), band_gib=round(band, 3), basis=basis, key=key,
                            why=why))
    return out


def for_terms(core_plan: Core, rank: RankPlan, margin_gib: float) -> tuple[Interval, float, float]:
    """The interval from the terms' bands: (interval, band below, band above)."""
    bands = term_bands(core_plan, rank)
    below = sum(b.band_gib for b in bands)
    above = below + compile_flush(core_plan.ctx) / GIB if core_plan.settings.compile_cache == "cold" else below
    return make_interval(rank.kv_pool_gib, margin_gib, below, above, bands), below, above


def make_interval(pool_gib: float, margin_gib: float, below: float, above: float,
                  bands: list[TermBand]) -> Interval:
    return Interval(kv_pool_gib=(round(max(pool_gib - below, 0.0), 3), round(pool_gib + above, 3)),
                    margin_gib=(round(margin_gib - below, 3), round(margin_gib + above, 3)), terms=bands)


def pool_band(basis: Literal["probe", "gb10", "set"], band_gib: float, why: str) -> TermBand:
    """The pool as a whole (a probe measured it, the GB10 terms' spread, or a pool the recipe sets)."""
    return TermBand(term="kv_pool", planned_gib=0.0, band_gib=round(band_gib, 3), basis=basis, key="pool", why=why)


def smallest(core_plan: Core) -> RankPlan:
    return min(core_plan.ranks, key=lambda r: r.kv_pool_gib - r.kv_needed_gib)

"""Per-family MLP rules (``mlp.rule`` in architectures.yaml): which layers are dense, which are MoE, and the expert
shapes, as each vLLM model class reads them from config.json."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from forklift.model.configjson import lookup, need_int
from forklift.model.spec import LayerPlan, Mlp, MoESpec

Cfg = Mapping[str, Any]
Result = tuple[MoESpec | None, list[Mlp]]


def _split(n: int, dense: set[int]) -> list[Mlp]:
    return ["dense" if i in dense else "moe" for i in range(n)]


def _dense(cfg: Cfg, n: int, plan: LayerPlan, ctx: tuple[str, str]) -> Result:
    return None, ["dense"] * n


def _first_k_dense_moe(cfg: Cfg, n: int, ctx: tuple[str, str], routed_key: str, shared_key: str,
                       top_k_keys: str | list[str]) -> Result:
    """The DeepSeek-style layer rule (deepseek_v2.py, glm4_moe.py, kimi_linear.py): MoE where i >=
    first_k_dense_replace and i % moe_layer_freq == 0, shared experts of the routed experts' width; the families
    name the expert counts with different keys."""
    n_routed = int(cfg.get(routed_key) or 0)
    if not n_routed:
        return None, ["dense"] * n
    first_k = int(cfg.get("first_k_dense_replace") or 0)
    freq = int(cfg.get("moe_layer_freq") or 1)
    dense = {i for i in range(n) if i < first_k or i % freq != 0}
    inter = need_int(cfg, "moe_intermediate_size", ctx)
    shared = int(cfg.get(shared_key) or 0)
    moe = MoESpec(n_routed=n_routed, top_k=need_int(cfg, top_k_keys, ctx), n_shared=shared, intermediate=inter,
                  shared_intermediate=shared * inter, first_k_dense=first_k, dense_layers=tuple(sorted(dense)),
                  router_bias=True)
    return moe, _split(n, dense)


def _deepseek(cfg: Cfg, n: int, plan: LayerPlan, ctx: tuple[str, str]) -> Result:
    """deepseek_v2.py / glm4_moe.py: n_routed_experts, n_shared_experts, num_experts_per_tok."""
    return _first_k_dense_moe(cfg, n, ctx, "n_routed_experts", "n_shared_experts", "num_experts_per_tok")


def _deepseek_v4(cfg: Cfg, n: int, plan: LayerPlan, ctx: tuple[str, str]) -> Result:
    """models/deepseek_v4/cpu/model.py DeepseekV4DecoderLayer: every layer's ffn is a DeepseekV4MoE (routed
    experts, n_shared_experts x moe_intermediate_size shared MLP); its router extras (hash table or fp32 bias) are
    the family's own tensors (tensors.py _csa_router)."""
    inter = need_int(cfg, "moe_intermediate_size", ctx)
    shared = int(cfg.get("n_shared_experts") or 0)
    moe = MoESpec(n_routed=need_int(cfg, "n_routed_experts", ctx), top_k=need_int(cfg, "num_experts_per_tok", ctx),
                  n_shared=shared, intermediate=inter, shared_intermediate=shared * inter)
    return moe, ["moe"] * n


def _qwen(cfg: Cfg, n: int, plan: LayerPlan, ctx: tuple[str, str]) -> Result:
    """qwen3_moe.py / qwen3_next.py: MoE unless in mlp_only_layers or (i + 1) % decoder_sparse_step != 0."""
    n_routed = int(lookup(cfg, ["num_experts", "num_local_experts"]) or 0)
    if not n_routed:
        return None, ["dense"] * n
    step = int(cfg.get("decoder_sparse_step") or 1)
    only = {int(x) for x in (cfg.get("mlp_only_layers") or [])}
    dense = {i for i in range(n) if i in only or (i + 1) % step != 0}
    inter = int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 0)
    shared_inter = int(cfg.get("shared_expert_intermediate_size") or 0)
    moe = MoESpec(n_routed=n_routed, top_k=need_int(cfg, "num_experts_per_tok", ctx),
                  n_shared=1 if shared_inter else 0, intermediate=inter, shared_intermediate=shared_inter,
                  dense_layers=tuple(sorted(dense)))
    return moe, _split(n, dense)


def _minimax(cfg: Cfg, n: int, plan: LayerPlan, ctx: tuple[str, str]) -> Result:
    """minimax_m2.py: every layer MoE, num_local_experts x intermediate_size, routing bias when use_routing_bias."""
    moe = MoESpec(n_routed=need_int(cfg, "num_local_experts", ctx), top_k=need_int(cfg, "num_experts_per_tok", ctx),
                  n_shared=0, intermediate=need_int(cfg, "intermediate_size", ctx),
                  router_bias=bool(cfg.get("use_routing_bias")))
    return moe, ["moe"] * n


def _gpt_oss(cfg: Cfg, n: int, plan: LayerPlan, ctx: tuple[str, str]) -> Result:
    n_routed = int(lookup(cfg, ["num_local_experts", "num_experts"]) or 0)
    moe = MoESpec(n_routed=n_routed, top_k=need_int(cfg, ["num_experts_per_tok", "experts_per_token"], ctx),
                  n_shared=0, intermediate=need_int(cfg, "intermediate_size", ctx), has_bias=True)
    return moe, ["moe"] * n


def _kimi(cfg: Cfg, n: int, plan: LayerPlan, ctx: tuple[str, str]) -> Result:
    """kimi_linear.py: num_experts, num_shared_experts, num_experts_per_token (or _tok)."""
    return _first_k_dense_moe(cfg, n, ctx, "num_experts", "num_shared_experts",
                              ["num_experts_per_token", "num_experts_per_tok"])


def _nemotron(cfg: Cfg, n: int, plan: LayerPlan, ctx: tuple[str, str]) -> Result:
    """nemotron_h.py: the pattern fixes each layer's MLP ('-' dense, 'E' MoE); experts and MLPs are relu2 (up and
    down only); the shared experts are moe_shared_expert_intermediate_size x n_shared_experts."""
    mlps: list[Mlp] = [fixed or "none" for _, fixed in plan]
    if "moe" not in mlps:
        return None, mlps
    inter = need_int(cfg, "moe_intermediate_size", ctx)
    shared = int(cfg.get("n_shared_experts") or 0)
    moe = MoESpec(n_routed=need_int(cfg, "n_routed_experts", ctx), top_k=need_int(cfg, "num_experts_per_tok", ctx),
                  n_shared=shared, intermediate=inter,
                  shared_intermediate=shared * int(cfg.get("moe_shared_expert_intermediate_size") or inter),
                  router_bias=True, gated=False,
                  dense_layers=tuple(i for i, m in enumerate(mlps) if m == "dense"))
    return moe, mlps


def _ernie(cfg: Cfg, n: int, plan: LayerPlan, ctx: tuple[str, str]) -> Result:
    """ernie45_moe.py Ernie4_5_MoeDecoderLayer.__init__: MoE where use_moe (default moe_num_experts > 0),
    (i + 1) % moe_layer_interval == 0 and moe_layer_start_index <= i <= moe_layer_end_index (transformers
    Ernie4_5_MoeConfig turns -1 into the last layer), else a dense MLP of intermediate_size; Ernie4_5_MoeMoE: gate
    without bias plus e_score_correction_bias, moe_num_experts x moe_intermediate_size, top moe_k, one shared MLP of
    moe_num_shared_experts x moe_intermediate_size."""
    n_routed = need_int(cfg, "moe_num_experts", ctx)
    use_moe = cfg.get("use_moe")
    if not (n_routed > 0 if use_moe is None else bool(use_moe)):
        return None, ["dense"] * n
    start = int(cfg.get("moe_layer_start_index") or 0)
    end = int(cfg["moe_layer_end_index"]) if cfg.get("moe_layer_end_index") is not None else n - 1
    end = n - 1 if end == -1 else end
    interval = int(cfg.get("moe_layer_interval") or 1)
    dense = {i for i in range(n) if not ((i + 1) % interval == 0 and start <= i <= end)}
    inter = need_int(cfg, "moe_intermediate_size", ctx)
    shared = int(cfg.get("moe_num_shared_experts") or 0)
    moe = MoESpec(n_routed=n_routed, top_k=need_int(cfg, "moe_k", ctx), n_shared=shared, intermediate=inter,
                  shared_intermediate=shared * inter, dense_layers=tuple(sorted(dense)), router_bias=True)
    return moe, _split(n, dense)


def _mimo_v2(cfg: Cfg, n: int, plan: LayerPlan, ctx: tuple[str, str]) -> Result:
    """mimo_v2.py MiMoV2FlashDecoderLayer.is_moe_layer: MoE where the list moe_layer_freq[i] is truthy (an int
    moe_layer_freq makes no layer MoE), else MiMoV2MLP of intermediate_size; MiMoV2MoE: gate n_routed_experts x
    hidden plus e_score_correction_bias, experts of moe_intermediate_size, top num_experts_per_tok, no shared
    expert."""
    freq = cfg.get("moe_layer_freq")
    flags = [bool(freq[i]) if isinstance(freq, list) and i < len(freq) else False for i in range(n)]
    if not any(flags):
        return None, ["dense"] * n
    dense = {i for i in range(n) if not flags[i]}
    moe = MoESpec(n_routed=need_int(cfg, "n_routed_experts", ctx), top_k=need_int(cfg, "num_experts_per_tok", ctx),
                  n_shared=0, intermediate=need_int(cfg, "moe_intermediate_size", ctx),
                  dense_layers=tuple(sorted(dense)), router_bias=True)
    return moe, _split(n, dense)


def _gemma4(cfg: Cfg, n: int, plan: LayerPlan, ctx: tuple[str, str]) -> Result:
    """gemma4.py Gemma4DecoderLayer.__init__: every layer keeps its Gemma4MLP (gate_up + down of intermediate_size)
    and, when config.num_experts is set, adds a routed block beside it (Gemma4Router: proj num_experts x hidden;
    FusedMoE of moe_intermediate_size, top top_k_experts, gated gelu). The always-on MLP is counted as one shared
    expert of intermediate_size (the same tensors)."""
    if cfg.get("num_experts") is None:
        return None, ["dense"] * n
    inter = need_int(cfg, ["moe_intermediate_size", "expert_intermediate_size"], ctx)
    dense_inter = need_int(cfg, "intermediate_size", ctx)
    moe = MoESpec(n_routed=need_int(cfg, "num_experts", ctx), top_k=need_int(cfg, "top_k_experts", ctx), n_shared=1,
                  intermediate=inter, shared_intermediate=dense_inter)
    return moe, ["moe"] * n


MLP_RULES: dict[str, Callable[[Cfg, int, LayerPlan, tuple[str, str]], Result]] = {
    "dense": _dense, "deepseek_moe": _deepseek, "qwen_moe": _qwen, "minimax_moe": _minimax,
    "gpt_oss_moe": _gpt_oss, "kimi_moe": _kimi, "nemotron": _nemotron, "ernie_moe": _ernie,
    "mimo_v2_moe": _mimo_v2, "gemma4_moe": _gemma4, "deepseek_v4_moe": _deepseek_v4,
}

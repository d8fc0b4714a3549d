"""The weight tensors of a ModelSpec in vLLM's layout: per layer the token mixer (attention, MLA + DSA indexer,
gated DeltaNet, Mamba-2, KDA) and the MLP (dense or experts), plus embeddings, final norm, lm_head and MTP."""

from __future__ import annotations

from dataclasses import replace

from forklift.model.spec import LayerSpec, ModelSpec, Role, Split, StateSpec, Tensor
from forklift.model.vision import tower_tensors


class _Out:
    def __init__(self, prefix: str, layer: int) -> None:
        self.prefix, self.layer = prefix, layer
        self.items: list[Tensor] = []

    def add(self, mod: str, n: int, split: Split, *, linear: bool = True, role: Role = "attn",
            kv_heads: int = 0, dtype_bytes: int = 0) -> None:
        self.items.append(Tensor(module=f"{self.prefix}.{mod}", numel=n, split=split, layer=self.layer, linear=linear,
                                 role=role, kv_heads=kv_heads, dtype_bytes=dtype_bytes))


def _mla(s: ModelSpec, i: int, o: _Out) -> None:
    assert s.mla is not None
    m, h = s.mla, s.hidden_size
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    if m.q_lora_rank:
        o.add("self_attn.q_a_proj", h * m.q_lora_rank, "replicated")
        o.add("self_attn.q_a_layernorm", m.q_lora_rank, "replicated", linear=False)
        o.add("self_attn.q_b_proj", m.q_lora_rank * s.num_heads * qk, "col")
    else:
        o.add("self_attn.q_proj", h * s.num_heads * qk, "col")
    o.add("self_attn.kv_a_proj_with_mqa", h * (m.kv_lora_rank + m.qk_rope_head_dim), "replicated")
    o.add("self_attn.kv_a_layernorm", m.kv_lora_rank, "replicated", linear=False)
    o.add("self_attn.kv_b_proj", m.kv_lora_rank * s.num_heads * (m.qk_nope_head_dim + m.v_head_dim), "col")
    o.add("self_attn.o_proj", s.num_heads * m.v_head_dim * h, "row")
    if s.indexer is not None and (i in s.indexer.layers or i >= s.num_layers):  # MTP layers always own one
        ix = s.indexer
        o.add("self_attn.indexer.wq_b", (m.q_lora_rank or h) * ix.n_heads * ix.head_dim, "replicated", role="indexer")
        o.add("self_attn.indexer.wk", h * ix.head_dim, "replicated", role="indexer")
        o.add("self_attn.indexer.k_norm", 2 * ix.head_dim, "replicated", linear=False, role="indexer")
        o.add("self_attn.indexer.weights_proj", h * ix.n_heads, "replicated", linear=False, role="indexer")


def _compressor(o: _Out, mod: str, h: int, ratio: int, head: int, role: Role) -> None:
    """compressor.py DeepseekCompressor.__init__: ape (ratio x coff.head_dim, float32), fused_wkv_wgate (hidden ->
    2 x coff.head_dim, replicated, quant_config=None: never quantized), norm over head_dim."""
    coff = 2 if ratio == 4 else 1
    o.add(f"{mod}.ape", ratio * coff * head, "replicated", linear=False, role=role, dtype_bytes=4)
    o.add(f"{mod}.fused_wkv_wgate", h * 2 * coff * head, "replicated", linear=False, role=role)
    o.add(f"{mod}.norm", head, "replicated", linear=False, role=role)


def _csa(s: ModelSpec, i: int, o: _Out) -> None:
    """models/deepseek_v4/attention.py DeepseekV4Attention.__init__ (0.32.0): fused_wqa_wkv (hidden -> q_lora +
    head_dim, replicated), q_norm, wq_b (col), kv_norm, wo_a (heads.head_dim / o_groups -> o_groups.o_lora, col),
    wo_b (row), attn_sink (fp32, one per local head); a compressor on ratio > 1 layers; on ratio-4 layers the
    DeepseekV4Indexer: wq_b (q_lora -> index heads x index_head_dim, replicated), weights_proj (hidden -> index
    heads, replicated, unquantized) and its own compressor. cpu/model.py DeepseekV4DecoderLayer: hc_attn / hc_ffn
    fn ((2 + hc) hc x hc.hidden), base ((2 + hc) hc) and scale (3), all float32."""
    c, h = s.csa, s.hidden_size
    assert c is not None
    ratio = c.ratios[i] if i < len(c.ratios) else 1
    o.add("attn.fused_wqa_wkv", h * (c.q_lora_rank + c.head_dim), "replicated")
    o.add("attn.q_norm", c.q_lora_rank, "replicated", linear=False)
    o.add("attn.wq_b", c.q_lora_rank * s.num_heads * c.head_dim, "col")
    o.add("attn.kv_norm", c.head_dim, "replicated", linear=False)
    o.add("attn.wo_a", s.num_heads * c.head_dim * c.o_lora_rank, "col")
    o.add("attn.wo_b", c.o_groups * c.o_lora_rank * h, "row")
    o.add("attn.attn_sink", s.num_heads, "col", linear=False, dtype_bytes=4)
    if ratio > 1:
        _compressor(o, "attn.compressor", h, ratio, c.head_dim, "attn")
    if ratio == 4:
        o.add("attn.indexer.wq_b", c.q_lora_rank * c.index_n_heads * c.index_head_dim, "replicated", role="indexer")
        o.add("attn.indexer.weights_proj", h * c.index_n_heads, "replicated", linear=False, role="indexer")
        _compressor(o, "attn.indexer.compressor", h, ratio, c.index_head_dim, "indexer")
    mix = (2 + c.hc_mult) * c.hc_mult
    o.add("hc_fn", 2 * (mix * c.hc_mult * h + mix + 3), "replicated", linear=False, role="norm", dtype_bytes=4)


def _csa_router(s: ModelSpec, layer: LayerSpec, o: _Out) -> None:
    """cpu/model.py DeepseekV4MoE: a hash layer (index < num_hash_layers) holds tid2eid (vocab x top_k int32);
    the others an fp32 e_score_correction_bias when topk_method is noaux_tc."""
    c, m = s.csa, s.moe
    assert c is not None and m is not None
    if layer.index < c.num_hash_layers:
        o.add("ffn.gate.tid2eid", s.vocab_size * m.top_k, "replicated", linear=False, role="router", dtype_bytes=4)
    elif c.noaux_bias:
        o.add("ffn.gate.e_score_correction_bias", m.n_routed, "replicated", linear=False, role="router",
              dtype_bytes=4)


def _shaped(s: ModelSpec, layer: LayerSpec, o: _Out) -> None:
    """A layer kind with its own shape (ModelSpec.attn_shapes): mimo_v2.py MiMoV2Attention (qkv_proj with
    v_head_size, o_proj of heads x v_head_dim, a per-head sink bias on SWA layers when configured); gemma4.py
    Gemma4Attention (qkv_proj over the kind's head_dim even on K = V layers, q_norm / k_norm over head_dim)."""
    a, h = s.attn_shape(layer.mixer), s.hidden_size
    o.add("self_attn.q_proj", h * a.heads * a.head_dim, "col")
    if layer.kv_shared:  # gemma4.py Gemma4Attention: a KV-shared layer holds q_proj, o_proj and q_norm only
        o.add("self_attn.o_proj", a.heads * a.v_head_dim * h, "row")
        o.add("self_attn.q_norm", a.head_dim, "replicated", linear=False)
        return
    o.add("self_attn.k_proj", h * a.kv_heads * a.head_dim, "kv", kv_heads=a.kv_heads)
    o.add("self_attn.v_proj", h * a.kv_heads * a.v_head_dim, "kv", kv_heads=a.kv_heads)
    o.add("self_attn.o_proj", a.heads * a.v_head_dim * h, "row")
    if s.attention_bias:
        o.add("self_attn.qkv_proj.bias", a.heads * a.head_dim + a.kv_heads * (a.head_dim + a.v_head_dim), "col",
              linear=False)
    if s.qk_norm:
        o.add("self_attn.qk_norm", 2 * a.head_dim, "replicated", linear=False)
    if a.sinks:
        o.add("self_attn.attention_sink_bias", a.heads, "col", linear=False)


def _gqa(s: ModelSpec, o: _Out) -> None:
    h, d = s.hidden_size, s.head_dim
    o.add("self_attn.q_proj", h * s.num_heads * d * (2 if s.gated_q else 1), "col")
    o.add("self_attn.k_proj", h * s.num_kv_heads * d, "kv")
    o.add("self_attn.v_proj", h * s.num_kv_heads * d, "kv")
    o.add("self_attn.o_proj", s.num_heads * d * h, "row")
    if s.attention_bias:
        o.add("self_attn.q_proj.bias", s.num_heads * d, "col", linear=False)
        o.add("self_attn.kv_proj.bias", 2 * s.num_kv_heads * d, "kv", linear=False)
        if s.family == "gpt_oss":
            o.add("self_attn.o_proj.bias", h, "replicated", linear=False)
    if s.family == "olmo3":  # olmo3.py Olmo3Attention: q_norm over hidden_size, k_norm over kv heads x head_dim
        o.add("self_attn.qk_norm", h + s.num_kv_heads * d, "replicated", linear=False)
    elif s.qk_norm:
        o.add("self_attn.qk_norm", 2 * d, "replicated", linear=False)
    if s.family == "gpt_oss":
        o.add("self_attn.sinks", s.num_heads, "col", linear=False)


def _gdn(st: StateSpec, h: int, o: _Out) -> None:
    """qwen3_next.py Qwen3NextGatedDeltaNet: fused qkvz and ba projections, depthwise conv, out_proj."""
    key, value = st.key_heads * st.key_dim, st.heads * st.head_dim
    o.add("linear_attn.in_proj_qkvz", h * (2 * key + 2 * value), "col", role="mixer")
    o.add("linear_attn.in_proj_ba", h * 2 * st.heads, "col", role="mixer")
    o.add("linear_attn.conv1d", (2 * key + value) * st.conv_kernel, "col", linear=False, role="mixer")
    o.add("linear_attn.dt_A", 2 * st.heads, "col", linear=False, role="mixer")
    o.add("linear_attn.norm", st.head_dim, "replicated", linear=False, role="mixer")
    o.add("linear_attn.out_proj", value * h, "row", role="mixer")


def _mamba2(st: StateSpec, h: int, o: _Out) -> None:
    """mamba_mixer2.py MambaMixer2: in_proj (z, x, B, C, dt), conv1d over x/B/C, A/D/dt_bias, gated norm, out_proj."""
    inner, bc = st.heads * st.head_dim, 2 * st.groups * st.state_size
    o.add("mixer.in_proj", h * (2 * inner + bc + st.heads), "col", role="mixer")
    o.add("mixer.conv1d", (inner + bc) * st.conv_kernel, "col", linear=False, role="mixer")
    o.add("mixer.A_D_dt_bias", 3 * st.heads, "col", linear=False, role="mixer")
    o.add("mixer.norm", inner, "col", linear=False, role="mixer")
    o.add("mixer.out_proj", inner * h, "row", role="mixer")


def _kda(st: StateSpec, h: int, o: _Out) -> None:
    """kimi_linear.py KimiDeltaAttention: q/k/v, low-rank f and g gates, beta, three short convs, out_proj."""
    proj, d = st.heads * st.head_dim, st.head_dim
    for name in ("q_proj", "k_proj", "v_proj"):
        o.add(f"self_attn.{name}", h * proj, "col", role="mixer")
    o.add("self_attn.f_a_proj", h * d, "replicated", role="mixer")
    o.add("self_attn.f_b_proj", d * proj, "col", role="mixer")
    o.add("self_attn.g_a_proj", h * d, "replicated", role="mixer")
    o.add("self_attn.g_b_proj", d * proj, "col", role="mixer")
    o.add("self_attn.b_proj", h * st.heads, "col", role="mixer")
    o.add("self_attn.conv1d", 3 * proj * st.conv_kernel, "col", linear=False, role="mixer")
    o.add("self_attn.A_dt", st.heads + proj, "col", linear=False, role="mixer")
    o.add("self_attn.o_norm", d, "replicated", linear=False, role="mixer")
    o.add("self_attn.o_proj", proj * h, "row", role="mixer")


def _mixer(s: ModelSpec, layer: LayerSpec, o: _Out) -> None:
    if layer.has_kv:
        if s.csa is not None:
            _csa(s, layer.index, o)
        elif s.mla is not None:
            _mla(s, layer.index, o)
        elif s.attn_shapes:
            _shaped(s, layer, o)
        else:
            _gqa(s, o)
    elif layer.has_state and s.state is not None:
        {"gdn": _gdn, "mamba2": _mamba2, "kda": _kda}[s.state.kind](s.state, s.hidden_size, o)


def _mlp(s: ModelSpec, layer: LayerSpec, o: _Out) -> None:
    h = s.hidden_size
    gated = s.moe.gated if s.moe is not None else s.family != "nemotron_h"
    if layer.mlp == "dense" or (layer.mlp == "moe" and s.moe is None):
        inter = s.intermediate_size * (2 if layer.wide_mlp else 1)
        o.add("mlp.gate_up_proj", (2 if gated else 1) * h * inter, "col", role="dense_mlp")
        o.add("mlp.down_proj", inter * h, "row", role="dense_mlp")
        return
    if layer.mlp != "moe" or s.moe is None:
        return
    m = s.moe
    o.add("mlp.router" if s.family == "gpt_oss" else "mlp.gate", m.n_routed * h, "replicated", linear=False,
          role="router")
    if s.csa is not None:
        _csa_router(s, layer, o)
    if m.router_bias:
        o.add("mlp.gate.e_score_correction_bias", m.n_routed, "replicated", linear=False, role="router")
    o.add("mlp.experts", m.n_routed * (3 if gated else 2) * h * m.intermediate, "expert", role="experts")
    if m.has_bias:
        o.add("mlp.experts.bias", m.n_routed * (2 * m.intermediate + h), "expert", linear=False, role="experts")
    if m.shared_intermediate:
        n = m.shared_intermediate * (2 if layer.wide_mlp else 1)
        o.add("mlp.shared_experts.gate_up_proj", (2 if gated else 1) * h * n, "col", role="shared")
        o.add("mlp.shared_experts.down_proj", n * h, "row", role="shared")
        if s.family in ("qwen_moe", "qwen3_next", "qwen3_5"):
            o.add("mlp.shared_expert_gate", h, "replicated", linear=False, role="shared")


def layer_tensors(s: ModelSpec, layer: LayerSpec, prefix: str) -> list[Tensor]:
    o = _Out(prefix, layer.index)
    o.add("norms", s.layer_norms * s.hidden_size, "replicated", linear=False, role="norm")
    _mixer(s, layer, o)
    _mlp(s, layer, o)
    if s.per_layer_input:  # gemma4.py Gemma4DecoderLayer: per_layer_input_gate, per_layer_projection (replicated)
        p, h = s.per_layer_input, s.hidden_size
        o.add("per_layer_input_gate", h * p, "replicated", role="embed")
        o.add("per_layer_projection", p * h, "replicated", role="embed")
        o.add("post_per_layer_input_norm", h, "replicated", linear=False, role="norm")
    return o.items


def _per_layer_embeddings(s: ModelSpec) -> list[Tensor]:
    """gemma4.py Gemma4Model.__init__: embed_tokens_per_layer (VocabParallelEmbedding of vocab_size_per_layer_input
    x num_hidden_layers * hidden_size_per_layer_input), per_layer_model_projection (ColumnParallelLinear from
    hidden_size to the same width), per_layer_projection_norm."""
    if not s.per_layer_input:
        return []
    width = s.num_layers * s.per_layer_input
    return [Tensor(module="model.embed_tokens_per_layer", numel=s.per_layer_vocab * width, split="vocab",
                   where="embed", linear=False, role="embed"),
            Tensor(module="model.per_layer_model_projection", numel=s.hidden_size * width, split="col",
                   where="embed", role="embed"),
            Tensor(module="model.per_layer_projection_norm", numel=s.per_layer_input, split="replicated",
                   where="embed", linear=False, role="norm")]


def _hc_head(s: ModelSpec, module: str, role: Role) -> Tensor:
    """DeepSeek-V4's hyper-connection head: hc_head_fn (hc x hc.hidden), hc_head_base (hc), hc_head_scale (1), fp32."""
    assert s.csa is not None
    hc = s.csa.hc_mult
    return Tensor(module=module, numel=hc * hc * s.hidden_size + hc + 1, split="replicated", where="final",
                  linear=False, role=role, dtype_bytes=4)


def model_tensors(s: ModelSpec, include_mtp: bool = False) -> list[Tensor]:
    """Every weight tensor in vLLM's layout (fused projections counted as their parts)."""
    h = s.hidden_size
    out = [Tensor(module="model.embed_tokens", numel=s.vocab_size * h, split="vocab", where="embed", linear=False,
                  role="embed"), *_per_layer_embeddings(s)]
    for layer in s.layers:
        out.extend(layer_tensors(s, layer, f"model.layers.{layer.index}"))
    if s.vision is not None:
        out.extend(tower_tensors(s.vision))
    out.append(Tensor(module="model.norm", numel=h, split="replicated", where="final", linear=False, role="norm"))
    if s.csa is not None:  # cpu/model.py DeepseekV4Model
        out.append(_hc_head(s, "model.hc_head", "norm"))
    out.append(Tensor(module="lm_head", numel=s.vocab_size * h, split="vocab", where="lm_head", role="lm_head"))
    if include_mtp and s.mtp_layers:
        for k in range(s.mtp_layers):
            idx = s.num_layers + k
            prefix = f"model.layers.{idx}"
            mtp = LayerSpec(index=idx, mlp="moe" if s.moe is not None else "dense", indexer=s.indexer is not None)
            extra = [Tensor(module=f"{prefix}.eh_proj", numel=2 * h * h, split=s.mtp_proj_split, where="final",
                            role="mtp"),
                     Tensor(module=f"{prefix}.norms", numel=s.mtp_norms * h, split="replicated", where="final",
                            linear=False, role="mtp")]
            if s.csa is not None:  # deepseek_v4/nvidia/mtp.py: the MTP layer's own
                extra.append(_hc_head(s, f"{prefix}.hc_head", "mtp"))
            for t in [*layer_tensors(s, mtp, prefix), *extra]:
                out.append(replace(t, where="final", layer=None))
    return out


def param_count(s: ModelSpec, *, include_mtp: bool = False) -> int:
    return sum(t.numel for t in model_tensors(s, include_mtp))

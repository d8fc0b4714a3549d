"""The non-weight terms vLLM subtracts before sizing the KV pool, per release, derived from its code: the profile
run's activation peak (dummy forward of max_num_batched_tokens, MoE workspace, MLA / DSA buffers, the dummy
sampler over max_num_seqs x vocab logits), the CUDA-graph estimate (capture sizes from max_num_seqs), non-torch
memory, and what was allocated before the init snapshot (it bounds gpu_memory_utilization through the startup
check). Constants the code does not fix are the ``measured`` entries of data/vllm.yaml, chosen on our own H200
calibration runs only.

Sources (vLLM 0.26.0; research notes non-weight-terms.md): v1/worker/gpu_model_runner.py profile_run / _dummy_run /
_dummy_sampler_run / profile_cudagraph_memory; fused_moe/experts/triton_moe.py TritonExperts.workspace_shapes;
fused_moe/modular_kernel.py FusedMoEKernel._allocate_buffers; layers/attention/mla_attention.py MLAAttention.forward
and MLACommonMetadataBuilder.determine_chunked_prefill_workspace_size; layers/sparse_attn_indexer.py;
config/vllm.py _set_cudagraph_sizes; v1/cudagraph_dispatcher.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from forklift.model.spec import LayerSpec, ModelSpec
from forklift.plan import rules

GIB = 2**30
MIB = 2**20


@dataclass(frozen=True)
class Batch:
    """The settings the profile terms depend on."""

    tp: int
    mnbt: int
    seqs: int
    max_model_len: int
    block: int
    dtype_bytes: int
    tokens_to_experts: int  # M: tokens each MoE layer sees in the profile (N, or DP x N with DP+EP all-gather)
    expert_tp: int  # how many ways each expert's intermediate is split (1 with EP)
    capability: str
    num_spec: int = 0
    moe_monolithic: bool = False  # MXFP4 experts through OAI triton_kernels (no workspace-manager buffer)


def _attention(s: ModelSpec, b: Batch) -> float:
    """Residual, qkv, rotated q and the attention output buffer alive together (gqa); MLA adds the profile-only
    kv_b_proj output buffer of W tokens (mla_attention.py MLAAttention.forward, attn_metadata None)."""
    n, h, e = b.mnbt, s.hidden_size, b.dtype_bytes
    if s.mla is not None:
        m = s.mla
        heads = s.num_heads / b.tp
        q_out = heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
        w = max(min(max(8 * b.max_model_len, 4 * b.seqs * b.block), 65536), b.seqs * b.block)
        return n * (h + q_out) * e + w * heads * (m.qk_nope_head_dim + m.v_head_dim) * e
    q = s.num_heads / b.tp * s.head_dim * (2 if s.gated_q else 1)
    kv = max(1.0, s.num_kv_heads / b.tp) * s.head_dim
    return n * (h + (q + 2 * kv) + 2 * q) * e


def _state_mixer(s: ModelSpec, b: Batch) -> float:
    """Linear-attention / SSM layer: residual, the input projection's output and one copy of the mixed states."""
    st = s.state
    assert st is not None
    if st.kind == "gdn":
        proj = 2 * st.key_heads * st.key_dim + 2 * st.heads * st.head_dim + 2 * st.heads
    elif st.kind == "mamba2":
        proj = 2 * st.heads * st.head_dim + 2 * st.groups * st.state_size + st.heads
    else:
        proj = 5 * st.heads * st.head_dim
    return b.mnbt * (s.hidden_size + 2 * proj / b.tp) * b.dtype_bytes


def _dense_mlp(s: ModelSpec, b: Batch) -> float:
    gated = s.moe.gated if s.moe is not None else s.family != "nemotron_h"
    return b.mnbt * (s.hidden_size + (3 if gated else 2) * s.intermediate_size / b.tp) * b.dtype_bytes


def moe_workspace(s: ModelSpec, b: Batch) -> float:
    """TritonExperts.workspace_shapes: workspace13 (M, topk, max(I_l, h)) + workspace2 (M, topk, max(2 I_l, h)),
    held by the WorkspaceManager, which keeps the buffer once grown (v1/worker/workspace.py); 0 for the monolithic
    MXFP4 kernels that allocate their own."""
    if s.moe is None or b.moe_monolithic:
        return 0.0
    m, h = s.moe, s.hidden_size
    inter = m.intermediate / b.expert_tp
    up = (2 if m.gated else 1) * inter
    return b.tokens_to_experts * m.top_k * (max(inter, h) + max(up, h)) * b.dtype_bytes


def _moe(s: ModelSpec, b: Batch) -> float:
    """Besides the workspace: residual, layer input, fused and shared outputs (4 N h), the shared-expert MLP, the
    router's fp32 copy of the input (DeepSeek/GLM-style gates), and for monolithic MXFP4 kernels their gate/up
    output (M x topk x 2 I_l)."""
    assert s.moe is not None
    n, h, e = b.mnbt, s.hidden_size, b.dtype_bytes
    shared = 3 * n * s.moe.shared_intermediate / b.tp * e
    router = n * h * 4 if s.moe.router_bias else 0.0
    mono = b.tokens_to_experts * s.moe.top_k * 2 * s.moe.intermediate / b.expert_tp * e if b.moe_monolithic else 0.0
    return 4 * n * h * e + shared + router + mono


def layer_peak(s: ModelSpec, layer: LayerSpec, b: Batch) -> float:
    """A layer's transient peak, besides the persistent workspace buffer."""
    mixer = _attention(s, b) if layer.has_kv else _state_mixer(s, b) if layer.has_state else 0.0
    mlp = _moe(s, b) if layer.mlp == "moe" and s.moe is not None else _dense_mlp(s, b) if layer.mlp != "none" else 0.0
    return max(mixer, mlp)


def persistent_workspace(s: ModelSpec, start: int, end: int, b: Batch) -> float:
    """The WorkspaceManager's buffer once the profile has run the stage: the largest request among its users
    (MoE workspace, the DSA indexer's prefill buffer T x (head_dim + 4) + 1 MiB with T = 40 x max_model_len)."""
    layers = s.layers[start:end]
    moe = moe_workspace(s, b) if any(layer.mlp == "moe" for layer in layers) else 0.0
    indexer = 40 * b.max_model_len * (s.indexer.head_dim + 4) + MIB if s.indexer is not None else 0.0
    return max(moe, indexer)


def sampler_peak(s: ModelSpec, b: Batch, bytes_per_logit: float) -> float:
    """The dummy sampler on the last stage: min(max_num_seqs, N) rows of the full vocabulary, hidden states alive."""
    return bytes_per_logit * min(b.seqs, b.mnbt) * s.vocab_size + b.mnbt * s.hidden_size * b.dtype_bytes


@dataclass(frozen=True)
class Activation:
    total: float
    forward: float
    sampler: float
    c0: float


def activation(s: ModelSpec, start: int, end: int, last: bool, b: Batch, vr: rules.VersionRules,
               runner: str) -> Activation:
    """Torch peak increase of the profile run on one worker: C0 + the persistent workspace + max(the largest layer
    transient, the dummy sampler on the last stage)."""
    ws = persistent_workspace(s, start, end, b)
    forward = max((layer_peak(s, layer, b) for layer in s.layers[start:end]), default=0.0)
    sampler = sampler_peak(s, b, float(vr.sampler_bytes_per_logit[runner])) if last else 0.0
    c0 = float(rules.measured()["activation_c0_gib"]) * GIB
    return Activation(c0 + ws + max(forward, sampler), ws + forward, ws + sampler, c0)


# --------------------------------------------------------------------------------------------- CUDA graphs


def capture_sizes(vr: rules.VersionRules, seqs: int, mnbt: int, capability: str, num_spec: int = 0) -> list[int]:
    """config/vllm.py _set_cudagraph_sizes: 1, 2, 4, then every 8 up to 256, every 16 after, up to the cap."""
    cap_cfg = vr.capture
    q = 1 + num_spec
    default = int(cap_cfg["default_max_sm100"] if capability.startswith("10.") else cap_cfg["default_max"])
    cap = min(seqs * q * 2, default, mnbt)
    sizes = [x for x in [1, 2, 4, *range(8, 256, 8), *range(256, cap + 1, 16)] if x <= cap]
    if cap_cfg.get("append_mnbt") and mnbt <= cap and mnbt not in sizes:
        sizes.append(mnbt)
    if cap_cfg.get("append_max_num_seqs") and num_spec == 0 and seqs <= cap and seqs not in sizes:
        sizes.append(seqs)
    return sorted(sizes)


def graph_counts(vr: rules.VersionRules, b: Batch) -> tuple[int, int]:
    """(PIECEWISE, FULL) graphs under the default FULL_AND_PIECEWISE mode: FULL for decode sizes <= seqs x q."""
    sizes = capture_sizes(vr, b.seqs, b.mnbt, b.capability, b.num_spec)
    q = 1 + b.num_spec
    return len(sizes), len([x for x in sizes if q <= x <= b.seqs * q])


def _split_buffers(s: ModelSpec, b: Batch, size: int) -> float:
    """FULL decode graphs on FlashAttention 3 (Hopper): the split-KV accumulators [num_splits, heads, tokens,
    head_size] fp32 plus the log-sum-exp, allocated on the first (largest) capture (v1/attention/backends/
    flash_attn.py: max_num_splits = flash_attn_max_num_splits_for_cuda_graph, 32). Sparse MLA: measured."""
    m = rules.measured()
    heads = s.num_heads / b.tp
    if not b.capability.startswith("9.") or s.family == "gpt_oss":  # FA3 only; gpt-oss (sinks): none seen (p07)
        return 0.0
    if s.indexer is not None:
        topk = s.indexer.topk
        return float(m["cudagraph_sparse_mla_bytes_per_token_head_topk"]) * size * heads * topk
    head = s.mla.kv_lora_rank if s.mla is not None else s.head_dim
    splits = int(m["fa3_max_num_splits"])
    return splits * heads * size * (head + 1) * 4


def cudagraph_estimate(s: ModelSpec, vr: rules.VersionRules, b: Batch) -> tuple[float, tuple[int, int]]:
    """The V1 estimator (gpu_model_runner.py profile_cudagraph_memory): per mode, the first (largest) capture plus
    max(second capture, 1 MiB) for each further graph; the largest first capture counts once."""
    pw, full = graph_counts(vr, b)
    if not pw:
        return 0.0, (0, 0)
    m = rules.measured()
    sizes = capture_sizes(vr, b.seqs, b.mnbt, b.capability, b.num_spec)
    pw_first = (float(m["cudagraph_pw_first_mib"]) + float(m["cudagraph_pw_first_mib_per_token"]) * max(sizes)) * MIB
    q = 1 + b.num_spec
    full_sizes = [x for x in sizes if q <= x <= b.seqs * q]
    full_first = _split_buffers(s, b, max(full_sizes)) if full_sizes else 0.0
    per_graph = float(m["cudagraph_mib_per_graph"]) * MIB
    return max(pw_first, full_first) + per_graph * (max(pw - 1, 0) + max(full - 1, 0)), (pw, full)


def non_torch(tp: int, pp: int, nnodes: int) -> float:
    table = rules.measured()["non_torch_gib"]
    if tp > 1:
        return float(table["tp_multi_node" if nnodes > 1 else "tp_one_node"]) * GIB
    return float(table["pp" if pp > 1 else "single"]) * GIB


def pre_snapshot(tp: int, pp: int) -> float:
    """What a worker allocated before its init snapshot (CUDA context, NCCL communicators, custom all-reduce):
    outside the budget, but the startup check needs that much free besides ceil(total x utilization)."""
    table = rules.measured()["pre_snapshot_gib"]
    return float(table["tp" if tp > 1 else "pp" if pp > 1 else "single"]) * GIB

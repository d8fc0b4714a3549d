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
    moe_backend: str = "triton"  # triton | monolithic (MXFP4 via OAI triton_kernels) | flashinfer_cutlass (NVFP4)
    attention: str = "fa3"  # the decoder's attention backend: fa3 | fa2 | flashinfer | mla (attention_backend)
    unified: bool = False  # integrated GPU: vLLM's free-memory readings include host memory (GB10)
    layers: int = 0  # decoder layers on this stage (host memory per captured graph grows with them)
    warm_flush: float = 0.0  # a warm torch.compile cache: the flush buffer a cold start adds at the MLP (compile_flush)


def _attention(spec: ModelSpec, batch: Batch) -> float:
    """Residual, qkv, rotated q and the attention output buffer alive together (gqa); MLA adds the profile-only
    kv_b_proj output buffer of W tokens (mla_attention.py MLAAttention.forward, attn_metadata None)."""
    n, h, e = batch.mnbt, spec.hidden_size, batch.dtype_bytes
    if spec.mla is not None:
        m = spec.mla
        heads = spec.num_heads / batch.tp
        q_out = heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
        w = max(min(max(8 * batch.max_model_len, 4 * batch.seqs * batch.block), 65536), batch.seqs * batch.block)
        return n * (h + q_out) * e + w * heads * (m.qk_nope_head_dim + m.v_head_dim) * e
    q = spec.num_heads / batch.tp * spec.head_dim * (2 if spec.gated_q else 1)
    kv = max(1.0, spec.num_kv_heads / batch.tp) * spec.head_dim
    return n * (h + (q + 2 * kv) + 2 * q) * e


def _state_mixer(spec: ModelSpec, batch: Batch) -> float:
    """Linear-attention / SSM layer: residual, the input projection's output and one copy of the mixed states."""
    st = spec.state
    assert st is not None
    if st.kind == "gdn":
        proj = 2 * st.key_heads * st.key_dim + 2 * st.heads * st.head_dim + 2 * st.heads
    elif st.kind == "mamba2":
        proj = 2 * st.heads * st.head_dim + 2 * st.groups * st.state_size + st.heads
    else:
        proj = 5 * st.heads * st.head_dim
    return batch.mnbt * (spec.hidden_size + 2 * proj / batch.tp) * batch.dtype_bytes


def _dense_mlp(spec: ModelSpec, batch: Batch) -> float:
    """Residual, gate/up output and the activation's output. C0 (chosen on cold starts) holds the L2 flush buffer of
    Inductor's first-call autotuning of the activation's Triton kernel, benchmarked while these are alive; a warm
    compile cache autotunes nothing, so its MLP peak is that much lower (``warm_flush``, compile_flush)."""
    gated = spec.moe.gated if spec.moe is not None else spec.family != "nemotron_h"
    live = batch.mnbt * (spec.hidden_size + (3 if gated else 2) * spec.intermediate_size / batch.tp) * batch.dtype_bytes
    return live - batch.warm_flush


def compile_flush(l2_cache_mib: float | None, *, compiled: bool) -> float:
    """The bytes a cold torch.compile cache adds to the profile run's peak (vLLM 0.26.0, torch 2.11), where the peak
    is an Inductor kernel's (the dense MLP's activation).

    On a cold cache the first forward compiles inside ``profile_run`` (compilation/decorators.py, the ``aot_compile``
    path), and Inductor autotunes each Triton kernel that has several configs on its first call
    (torch/_inductor/runtime/triton_heuristics.py CachingAutotuner.autotune_to_one_config -> benchmark_all_configs),
    timing it with InductorBenchmarker.benchmark_gpu (runtime/benchmarking.py), which allocates an L2-sized flush
    buffer (``get_device_cache_size() // 4`` int32) while the kernel's operands are alive: inside
    gpu_worker.py determine_available_memory's ``allocated_bytes.all.peak``. A warm cache loads the compiled artifact
    with its tuned configs (decorators.py _try_load_aot_compiled_fn; monitor_profiling_run asserts no backend
    compilation) and benchmarks nothing. Eager runs compile nothing. 0 where the profile has no L2 size."""
    if not compiled or not l2_cache_mib:
        return 0.0
    return l2_cache_mib * MIB


def attention_backend(spec: ModelSpec, capability: str, kv_dtype: str) -> str:
    """The decoder attention backend vLLM 0.26 picks (platforms/cuda.py _get_backend_priorities): SM10x FLASHINFER
    first; elsewhere FLASH_ATTN, whose FA2 build (every GPU but Hopper, which runs FA3) stores no fp8 KV
    (flash_attn.py supports_kv_cache_dtype: FA3 or FA4 only), so fp8 KV falls to FLASHINFER (SM 8.0-12.1)."""
    if spec.mla is not None:
        return "mla"
    major = capability.split(".")[0]
    if major == "9":
        return "fa3"
    if major == "10" or kv_dtype.startswith("fp8"):
        return "flashinfer"
    return "fa2"


def flashinfer_workspace(spec: ModelSpec, batch: Batch) -> float:
    """FlashInferMetadataBuilder._get_workspace_buffer @0.26.0: max(VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE 394 MiB,
    max_num_batched_tokens x query heads per rank x head_dim x 16 B), allocated at the first metadata build."""
    heads = -(-spec.num_heads // batch.tp)
    return float(max(394 * MIB, batch.mnbt * heads * spec.head_dim * 16))


def flashinfer_moe_workspace(spec: ModelSpec, batch: Batch) -> float:
    """FlashInfer's CUTLASS fused MoE for NVFP4 activations (flashinfer 0.6.14 csrc/fused_moe/cutlass_backend/
    cutlass_fused_moe_kernels.cuh getWorkspaceDeviceBufferSizes; allocated per call, freed after): with R = M x topk
    rows, the overlapped GEMM inputs max(R h / 2, R h x 2 B) and outputs max(R x 2 I_l x 2 B, R h x 2 B), the
    activation scale factors (one fp8 per 16 elements) and the blocked row map E x M x 4 B."""
    assert spec.moe is not None
    m, h = spec.moe, spec.hidden_size
    rows = batch.tokens_to_experts * m.top_k
    inter = m.intermediate / batch.expert_tp
    glu = (2 if m.gated else 1) * inter * 2
    return rows * 2 * h + rows * max(glu, 2 * h) + rows * max(h, inter) / 16 + m.n_routed * batch.tokens_to_experts * 4


def moe_workspace(spec: ModelSpec, batch: Batch) -> float:
    """The WorkspaceManager's MoE buffer, kept once grown (v1/worker/workspace.py). TritonExperts.workspace_shapes:
    workspace13 (M, topk, max(I_l, h)) + workspace2 (M, topk, max(2 I_l, h)); FlashInferExperts (NVFP4): the
    (M, h) bf16 output only (its GEMM workspace is FlashInfer's own, per call); 0 for the monolithic MXFP4 kernels."""
    if spec.moe is None or batch.moe_backend == "monolithic":
        return 0.0
    m, h = spec.moe, spec.hidden_size
    if batch.moe_backend == "flashinfer_cutlass":
        return batch.tokens_to_experts * h * batch.dtype_bytes
    inter = m.intermediate / batch.expert_tp
    up = (2 if m.gated else 1) * inter
    return batch.tokens_to_experts * m.top_k * (max(inter, h) + max(up, h)) * batch.dtype_bytes


def _moe(spec: ModelSpec, batch: Batch) -> float:
    """Besides the workspace: residual, layer input, fused and shared outputs (4 N h), the shared-expert MLP, the
    router's fp32 copy of the input (DeepSeek/GLM-style gates), for monolithic MXFP4 kernels their gate/up output
    (M x topk x 2 I_l), and for FlashInfer's NVFP4 MoE its per-call workspace plus the quantized input (h/2 + h/16 B
    per token)."""
    assert spec.moe is not None
    n, h, e = batch.mnbt, spec.hidden_size, batch.dtype_bytes
    shared = 3 * n * spec.moe.shared_intermediate / batch.tp * e
    router = n * h * 4 if spec.moe.router_bias else 0.0
    own = 0.0
    if batch.moe_backend == "monolithic":
        own = batch.tokens_to_experts * spec.moe.top_k * 2 * spec.moe.intermediate / batch.expert_tp * e
    elif batch.moe_backend == "flashinfer_cutlass":
        own = flashinfer_moe_workspace(spec, batch) + batch.tokens_to_experts * h * (0.5 + 1 / 16)
    return 4 * n * h * e + shared + router + own


def layer_peak(spec: ModelSpec, layer: LayerSpec, batch: Batch) -> float:
    """A layer's transient peak, besides the persistent workspace buffer."""
    mixer = _attention(spec, batch) if layer.has_kv else _state_mixer(spec, batch) if layer.has_state else 0.0
    mlp = (_moe(spec, batch) if layer.mlp == "moe" and spec.moe is not None
           else _dense_mlp(spec, batch) if layer.mlp != "none" else 0.0)
    return max(mixer, mlp)


def persistent_workspace(spec: ModelSpec, start: int, end: int, batch: Batch) -> float:
    """The WorkspaceManager's buffer once the profile has run the stage: the largest request among its users
    (MoE workspace, the DSA indexer's prefill buffer T x (head_dim + 4) + 1 MiB with T = 40 x max_model_len)."""
    layers = spec.layers[start:end]
    moe = moe_workspace(spec, batch) if any(layer.mlp == "moe" for layer in layers) else 0.0
    indexer = 40 * batch.max_model_len * (spec.indexer.head_dim + 4) + MIB if spec.indexer is not None else 0.0
    return max(moe, indexer)


def sampler_peak(spec: ModelSpec, batch: Batch, bytes_per_logit: float) -> float:
    """The dummy sampler on the last stage: min(max_num_seqs, N) rows of the full vocabulary, hidden states alive.

    With speculation (any method) gpu_model_runner.py _dummy_sampler_run @0.26.0 then runs the rejection sampler on
    one dummy draft per request: new logits of 2R rows in the model dtype (torch.randn, 2 x 2 B per R x V), and
    rejection_sampler.py RejectionSampler.forward upcasts the R target rows to fp32 (4 B) and clones them (4 B)
    before apply_sampling_constraints runs top-k / top-p on the clone (the plain sampler's bytes per logit less its
    own model-dtype input). draft_probs stay None under the default draft_sample_method 'greedy'."""
    rows = min(batch.seqs, batch.mnbt)
    per_logit = bytes_per_logit
    if batch.num_spec:
        per_logit = max(per_logit, 2 * batch.dtype_bytes + 4 + 4 + bytes_per_logit - batch.dtype_bytes)
    return per_logit * rows * spec.vocab_size + batch.mnbt * spec.hidden_size * batch.dtype_bytes


@dataclass(frozen=True)
class Activation:
    total: float
    forward: float
    sampler: float
    c0: float


def activation(spec: ModelSpec, start: int, end: int, last: bool, batch: Batch, release: rules.VersionRules,
               runner: str) -> Activation:
    """Torch peak increase of the profile run on one worker: C0 + the persistent workspace + max(the largest layer
    transient, the dummy sampler on the last stage)."""
    ws = persistent_workspace(spec, start, end, batch)
    forward = max((layer_peak(spec, layer, batch) for layer in spec.layers[start:end]), default=0.0)
    sampler = sampler_peak(spec, batch, float(release.sampler_bytes_per_logit[runner])) if last else 0.0
    c0 = float(rules.measured()["activation_c0_gib"]) * GIB
    return Activation(c0 + ws + max(forward, sampler), ws + forward, ws + sampler, c0)


# --------------------------------------------------------------------------------------------- CUDA graphs


def capture_sizes(release: rules.VersionRules, seqs: int, mnbt: int, capability: str, num_spec: int = 0) -> list[int]:
    """config/vllm.py _set_cudagraph_sizes: 1, 2, 4, then every 8 up to 256, every 16 after, up to the cap."""
    cap_cfg = release.capture
    q = 1 + num_spec
    default = int(cap_cfg["default_max_sm100"] if capability.startswith("10.") else cap_cfg["default_max"])
    cap = min(seqs * q * 2, default, mnbt)
    sizes = [x for x in [1, 2, 4, *range(8, 256, 8), *range(256, cap + 1, 16)] if x <= cap]
    if cap_cfg.get("append_mnbt") and mnbt <= cap and mnbt not in sizes:
        sizes.append(mnbt)
    if cap_cfg.get("append_max_num_seqs") and num_spec == 0 and seqs <= cap and seqs not in sizes:
        sizes.append(seqs)
    return sorted(sizes)


def graph_counts(release: rules.VersionRules, batch: Batch) -> tuple[int, int]:
    """(PIECEWISE, FULL) graphs under the default FULL_AND_PIECEWISE mode: FULL for decode sizes <= seqs x q."""
    sizes = capture_sizes(release, batch.seqs, batch.mnbt, batch.capability, batch.num_spec)
    q = 1 + batch.num_spec
    return len(sizes), len([x for x in sizes if q <= x <= batch.seqs * q])


def _full_first(spec: ModelSpec, batch: Batch, size: int) -> float:
    """What the first (largest) FULL capture allocates besides the piecewise warm-up's cached blocks: FA3's split-KV
    buffers, or FlashInfer's workspace and the first decode wrapper's 8 MiB int workspace (pinned 8 MiB more on the
    host, which an integrated GPU's free memory counts: flashinfer decode.py BatchDecodeWithPagedKVCacheWrapper)."""
    if batch.attention == "flashinfer":
        return flashinfer_workspace(spec, batch) + _flashinfer_wrapper(batch)
    return _split_buffers(spec, batch, size)


def _flashinfer_wrapper(batch: Batch) -> float:
    """Each FULL decode size gets its own FlashInfer decode wrapper (flashinfer.py _get_decode_wrapper):
    8 MiB int workspace on the device, 8 MiB pinned on the host."""
    return float((16 if batch.unified else 8) * MIB)


def _split_buffers(spec: ModelSpec, batch: Batch, size: int) -> float:
    """FULL decode graphs on FlashAttention 3 (Hopper): the split-KV accumulators [num_splits, heads, tokens,
    head_size] fp32 plus the log-sum-exp, allocated on the first (largest) capture (v1/attention/backends/
    flash_attn.py: max_num_splits = flash_attn_max_num_splits_for_cuda_graph, 32). Sparse MLA: measured."""
    m = rules.measured()
    heads = spec.num_heads / batch.tp
    if not batch.capability.startswith("9.") or batch.attention == "flashinfer" or spec.family == "gpt_oss":
        return 0.0  # FA3 only; gpt-oss (sinks): none seen (p07)
    if spec.indexer is not None:
        topk = spec.indexer.topk
        return float(m["cudagraph_sparse_mla_bytes_per_token_head_topk"]) * size * heads * topk
    head = spec.mla.kv_lora_rank if spec.mla is not None else spec.head_dim
    splits = int(m["fa3_max_num_splits"])
    return splits * heads * size * (head + 1) * 4


def cudagraph_estimate(spec: ModelSpec, release: rules.VersionRules, batch: Batch) -> tuple[float, tuple[int, int]]:
    """The V1 estimator (gpu_model_runner.py profile_cudagraph_memory): per mode, the first (largest) capture plus
    max(second capture, 1 MiB) for each further graph; the largest first capture counts once. The second capture
    grows with the layers its graphs hold (measured per layer); on unified memory it also holds their host memory."""
    pw, full = graph_counts(release, batch)
    if not pw:
        return 0.0, (0, 0)
    m = rules.measured()
    sizes = capture_sizes(release, batch.seqs, batch.mnbt, batch.capability, batch.num_spec)
    pw_first = (float(m["cudagraph_pw_first_mib"]) + float(m["cudagraph_pw_first_mib_per_token"]) * max(sizes)) * MIB
    q = 1 + batch.num_spec
    full_sizes = [x for x in sizes if q <= x <= batch.seqs * q]
    full_first = _full_first(spec, batch, max(full_sizes)) if full_sizes else 0.0
    floor = float(m["cudagraph_mib_per_graph"]) * MIB
    per_graph = max(floor, float(m.get("cudagraph_pw_mib_per_layer", 0.0)) * batch.layers * MIB)
    full_graph = float(m.get("cudagraph_full_mib_per_layer", 0.0)) * batch.layers * MIB
    full_per_graph = max(floor, full_graph + (_flashinfer_wrapper(batch) if batch.attention == "flashinfer" else 0.0))
    host = graph_host(batch)  # an integrated GPU's cudaMemGetInfo deltas include the graphs' host memory
    first = max(pw_first, full_first) + host
    return first + (per_graph + host) * max(pw - 1, 0) + (full_per_graph + host) * max(full - 1, 0), (pw, full)


def _uma(key: str, layers: int) -> float:
    """A measured host-memory term (base + per decoder layer, MiB) of data/vllm.yaml measured.uma_host; 0 when
    no calibration run has measured it."""
    entry = rules.measured().get("uma_host", {}).get(key)
    if not entry:
        return 0.0
    return (float(entry["base"]) + float(entry["per_layer"]) * layers) * MIB


def graph_host(batch: Batch) -> float:
    """Host memory of one captured graph set (one size: the PIECEWISE pieces or the FULL graph), measured as the
    process tree's RSS growth over the real capture on the H200 divided by the graphs; counted on unified memory
    only, where vLLM's estimator reads cudaMemGetInfo (gpu_model_runner.py profile_cudagraph_memory)."""
    return _uma("graph_mib", batch.layers) if batch.unified else 0.0


def profile_host(spec: ModelSpec, batch: Batch) -> float:
    """Host memory the vLLM processes add between the worker's init snapshot and the after-profile snapshot,
    which a unified GPU's MemAvailable reading turns into non-torch memory (utils/mem_utils.py
    MemorySnapshot.measure: psutil available on integrated GPUs): the input batch's CPU token table (max_num_seqs x
    max_model_len int32 + bool, gpu_input_batch.py InputBatch, built after the snapshot), plus what the H200 runs
    measured (torch.compile, the profiling graphs; per decoder layer)."""
    if not batch.unified:
        return 0.0
    return batch.seqs * batch.max_model_len * 5 + _uma("profile_mib", batch.layers)


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

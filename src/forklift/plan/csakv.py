"""DeepSeek-V4's cache specs on one worker, as vLLM 0.32.0 builds them (paths under vllm/):

- every layer: the sliding-window cache of raw tokens, v1/attention/backends/mla/sparse_swa.py
  DeepseekV4SWACache.get_kv_cache_spec: SlidingWindowMLASpec(block_size 64, sliding_window = config.sliding_window,
  state_content_bytes 584, alignment 576) under fp8_ds_mla;
- compress_ratio r > 1: models/deepseek_v4/attention.py DeepseekV4Attention.get_kv_cache_spec: MLAAttentionSpec(
  block_size = cache_config.block_size, tokens_per_state = r, state_content_bytes 584, alignment 576), and its
  compressor's state, compressor.py CompressorStateCache.get_kv_cache_spec: SlidingWindowMLASpec(block 4 for r = 4,
  8 for r = 128, sliding_window = coff x r, head_size = 2 x coff x head_dim in float32, alignment 576), coff = 2
  when r = 4 (overlapping windows) else 1;
- r = 4 adds the lightning indexer (attention.py DeepseekV4Indexer): its K cache, DeepseekV4IndexerCache:
  MLAAttentionSpec(head_size = index_head_dim + index_head_dim / 128 x 4 fp32 scale bytes (fp8 indexer), uint8,
  tokens_per_state 4, alignment 576 under fp8_ds_mla) and its compressor's state (head_dim index_head_dim).

A page is round_up(block / tokens_per_state x bytes per state, alignment) (kv_cache_interface.py
AttentionSpec.page_size_bytes, _apply_alignment_padding). None of them splits over TP (num_kv_heads 1,
max_tp_shards 1). The order is vLLM's registration order (static_forward_context): per layer the indexer's K cache
and compressor state, the SWA cache, the compressed cache, the compressor state; the packing
(plan/packing.py) depends on it.
"""

from __future__ import annotations

from forklift.errors import PlanError
from forklift.model.spec import CompressedMlaSpec, ModelSpec
from forklift.plan.kvcache import LayerKv
from forklift.plan.rounding import round_up

SWA_BLOCK = 64  # sparse_swa.py DeepseekV4SWACache.__init__ block_size default
ROW_BYTES = 584  # fp8_ds_mla: 448 B fp8 NoPE + 128 B bf16 RoPE + 8 B UE8M0 scales (attention.py get_kv_cache_spec)
ALIGN = 576  # fp8_ds_mla page alignment (FlashMLA packing stride)
BLOCK = 256  # cache_config.block_size: platforms/cpu.py forces 256 for deepseek_v4; sparse_mla.py kernel block [256]
STATE_BLOCK = {4: 4, 128: 8}
VL_ARCH = "DeepseekV4ForConditionalGeneration"  # compressor.py CompressorStateCache.__init__
FP32 = 4


def _page(states: int, state_bytes: int) -> int:
    return round_up(states * state_bytes, ALIGN)


def block_size(asked: int | None, platform: str) -> int:
    """cache_config.block_size for DeepSeek-V4. vLLM-CPU (platforms/cpu.py check_and_update_config) overrides any
    --block-size to 256 with a warning. On a GPU a user block size is kept (platforms/interface.py: Phase 1 is
    skipped when user_specified_block_size), but the DSv4 sparse-MLA and indexer backends take only 256
    (models/deepseek_v4/sparse_mla.py, v1/attention/backends/mla/indexer.py get_supported_kernel_block_sizes):
    128 fails select_common_block_size ('No common block size'), and a multiple of 256 changes pages and block
    strides (customize_attention_spec MultipleOf(256), get_block_stride_alignment) that the planner does not model."""
    if asked and asked != BLOCK and platform != "cpu":
        raise PlanError(f"DeepSeek-V4 with serve.block_size {asked}: vLLM's DeepSeek-V4 sparse-MLA and indexer "
                        f"kernels take only block size {BLOCK} (models/deepseek_v4/sparse_mla.py, "
                        "v1/attention/backends/mla/indexer.py); a smaller one fails vLLM's startup with 'No common "
                        "block size', a larger multiple changes the pages, which the planner does not model",
                        fix=f"Remove serve.block_size from the recipe, or set it to {BLOCK}.")
    return BLOCK


def cpu_block_note(asked: int | None) -> str | None:
    """The note for a --block-size vLLM-CPU overrides (platforms/cpu.py: 'DeepSeek-V4 CPU backend requires
    block_size=256, overriding user-specified block_size')."""
    if asked and asked != BLOCK:
        return (f"serve.block_size {asked} is overridden by vLLM-CPU to {BLOCK} for DeepSeek-V4 (platforms/cpu.py "
                f"warns 'DeepSeek-V4 CPU backend requires block_size=256'); planned at {BLOCK}")
    return None


def check_kv_dtype(kv_dtype: str) -> None:
    """attention.py _resolve_dsv4_kv_cache_dtype: the fp8_ds_mla layout (every 0.32.0 default backend: FlashMLA,
    the SM12x FlashInfer class, vLLM-CPU) takes auto or an fp8 dtype and stores fp8_ds_mla; anything else is
    vLLM's ValueError."""
    if kv_dtype != "auto" and not kv_dtype.startswith("fp8"):
        raise PlanError(f"DeepSeek-V4 stores its KV as fp8_ds_mla: vLLM refuses --kv-cache-dtype {kv_dtype} "
                        "(models/deepseek_v4/attention.py _resolve_dsv4_kv_cache_dtype: 'only supports fp8 kv-cache')",
                        fix="Set serve.kv_cache_dtype to auto or fp8.")


def _compressor_state(csa: CompressedMlaSpec, ratio: int, head_dim: int) -> LayerKv:
    coff = 2 if ratio == 4 else 1
    block = STATE_BLOCK[ratio]
    return LayerKv("sliding", window=coff * ratio, block=block,
                   page=_page(block, 2 * coff * head_dim * FP32))


def layer_kv(csa: CompressedMlaSpec, ratio: int) -> list[LayerKv]:
    """One decoder layer's cache specs, in vLLM's registration order."""
    out: list[LayerKv] = []
    if ratio == 4:
        index_row = csa.index_head_dim + csa.index_head_dim // 128 * 4
        out.append(LayerKv("mla", block=BLOCK, page=_page(BLOCK // 4, index_row)))
        out.append(_compressor_state(csa, 4, csa.index_head_dim))
    out.append(LayerKv("sliding", window=csa.window, block=SWA_BLOCK, page=_page(SWA_BLOCK, ROW_BYTES)))
    if ratio > 1:
        out.append(LayerKv("mla", block=BLOCK, page=_page(BLOCK // ratio, ROW_BYTES)))
        out.append(_compressor_state(csa, ratio, csa.head_dim))
    return out


def mtp_specs(csa: CompressedMlaSpec, mtp: int, num_spec: int) -> list[LayerKv]:
    """The MTP draft's caches (method mtp, on the last stage): nvidia/mtp.py DeepSeekV4MultiTokenPredictorLayer builds
    a DeepseekV4DecoderLayer at layer_id num_hidden_layers + k, whose compress ratio is 1 (attention.py
    DeepseekV4Attention.__init__: 'MTP layer is not included in the compress ratio list'; a trailing compress_ratios
    entry is never read), so each MTP layer registers only its DeepseekV4SWACache, after every target layer (the
    drafter loads after the target: v1/core/kv_cache_utils.py _uses_trailing_mtp_layers), into the same pool and
    packing. Its window holds sliding_window - 1 + extra_retained_tokens + in-flight tokens
    (kv_cache_interface.py SlidingWindowSpec.max_admission_blocks_per_request), extra_retained_tokens =
    num_prefill_lookahead_tokens - 1 (kv_cache_utils.py get_kv_cache_configs, config/vllm.py
    num_prefill_lookahead_tokens): 0 with one MTP layer; with several layers and K > 1 it is K - 1 on every sliding
    spec, which is not modelled (refused)."""
    if mtp > 1 and num_spec > 1:
        raise PlanError(f"DeepSeek-V4 with {mtp} MTP layers and num_speculative_tokens {num_spec}: vLLM retains "
                        f"{num_spec - 1} extra tokens in every sliding-window cache (multi-module MTP, "
                        "kv_cache_utils.py extra_retained_tokens), which the planner does not model",
                        fix="Set serve.speculative.num_speculative_tokens to 1, or plan without serve.speculative.")
    return [kv for _ in range(mtp) for kv in layer_kv(csa, 1)]


def layer_specs(spec: ModelSpec, start: int, end: int, kv_dtype: str, dcp: int, platform: str, *, mtp: int = 0,
                num_spec: int = 0) -> list[LayerKv]:
    """The cache specs of decoder layers [start, end) on one worker, then ``mtp`` MTP layers' (the last stage's)."""
    assert spec.csa is not None
    if platform == "cpu" and (spec.architecture == VL_ARCH or spec.text_only):
        raise PlanError(f"vLLM-CPU 0.32.0 serves {VL_ARCH} (the class of any DeepSeek-V4 config with "
                        "vision_n_layers > 0) as models/deepseek_v4/vl_stub.py, which raises NotImplementedError "
                        "('not supported on the current platform; use CUDA or ROCm')",
                        fix="Plan it for a GPU, or serve a config with vision_n_layers 0 as DeepseekV4ForCausalLM.")
    check_kv_dtype(kv_dtype)
    if dcp > 1:
        raise PlanError("DeepSeek-V4 with decode context parallel: vLLM's sliding-window specs assert DCP 1 "
                        "(kv_cache_interface.py SlidingWindowSpec.max_memory_usage_bytes: 'DCP not support sliding "
                        "window')", fix="Set parallel.dcp to 1.")
    ratios = spec.csa.ratios
    if 128 in ratios and 4 not in ratios:
        raise PlanError("DeepSeek-V4 with ratio-128 layers but no ratio-4 layer: without an indexer no backend asks "
                        "for a block-outermost KV layout (v1/attention/backends/mla/indexer.py "
                        "supported_kv_cache_layouts), vLLM resolves LBNHC, and unify_kv_cache_spec_page_size raises "
                        "NotImplementedError ('page size is not divisible by the maximum page size and cannot be "
                        "padded'): the compressed page (one 584-byte row per 128 tokens) does not divide the SWA page. "
                        "vLLM-CPU 0.32.0 fails to start such a config",
                        fix="Serve the published compress_ratios (ratio-4 layers give the packed layout).")
    return [kv for ratio in ratios[start:end] for kv in layer_kv(spec.csa, ratio)] + mtp_specs(spec.csa, mtp, num_spec)

"""From a ModelSpec and the resolved settings to vLLM's per-layer cache specs on one worker (``LayerKv``) and the
KV manager's configuration (``KvConfig``): KV element bytes, the attention backend's block size, sparse-MLA bytes
per GPU, Mamba state shapes per mixer, prefix-caching mode.

Sources (vLLM 0.26.0 / 0.33.0): layers/mamba/mamba_utils.py MambaStateShapeCalculator (gated_delta_net, mamba2,
kda state shapes) and MambaStateDtypeCalculator; config/model.py get_num_kv_heads / get_head_size;
layers/attention/mla_attention.py _canonicalize_sparse_mla_kv_cache_dtype; models/deepseek_v2.py
DeepseekV32IndexerCache; arg_utils.py prefix-caching defaults; models/config.py MambaModelConfig. Research notes:
kv-and-arch-spec.md sections 2, 3 and 5.4.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from forklift.errors import PlanError
from forklift.model.spec import LayerSpec, ModelSpec, StateSpec
from forklift.plan import csakv, rules
from forklift.plan.kvcache import KvConfig, LayerKv

_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4}  # Mamba state dtypes


@dataclass(frozen=True)
class KvInputs:
    """The resolved settings the cache specs depend on."""

    tp: int
    kv_dtype: str  # as vLLM resolves --kv-cache-dtype (auto -> the checkpoint's declared KV dtype, else model)
    model_dtype_bytes: int
    capability: str  # "9.0", "10.0", "12.1"; "" for CPU
    platform: str
    max_model_len: int
    mnbt: int
    block: int | None  # the user's --block-size
    amx: bool
    dcp: int
    pp: int
    runner: str
    num_spec: int
    include_mtp: bool
    prefix_caching: bool | None  # the user's --enable-prefix-caching (None: vLLM's default)


def resolved_kv_dtype(requested: str, spec: ModelSpec, release: rules.VersionRules, capability: str) -> str:
    """--kv-cache-dtype as vLLM resolves it: auto takes the checkpoint's declared KV scheme (ModelOpt
    kv_cache_quant_algo, compressed-tensors kv_cache_scheme); 0.33 GLM-DSA on SM10x turns auto into fp8."""
    if requested != "auto":
        return requested
    if spec.quant.kv_cache_dtype:
        return spec.quant.kv_cache_dtype
    if release.glm_dsa_sm100_auto_fp8 and spec.architecture == "GlmMoeDsaForCausalLM" and capability.startswith("10."):
        return "fp8_e4m3"
    return "auto"


def _dtype_row(kv_dtype: str) -> dict[str, Any]:
    table: dict[str, dict[str, Any]] = rules.data()["kv_cache_dtypes"]
    if kv_dtype not in table:
        raise PlanError(f"KV cache dtype {kv_dtype!r} is not one stock vLLM accepts (config/cache.py CacheDType)",
                        fix=f"Set serve.kv_cache_dtype to one of: {', '.join(table)}.")
    return table[kv_dtype]


def check_kv_dtype(kv_dtype: str, version: str) -> str | None:
    """Refuse a --kv-cache-dtype the release's CacheDType lacks; a note when acceptance was not read for it."""
    row = _dtype_row(kv_dtype)
    v = rules.version_key(version)
    absent, since = row.get("absent_through"), row.get("since")
    if absent is not None and v <= rules.version_key(absent):
        raise PlanError(f"vLLM {version} does not accept --kv-cache-dtype {kv_dtype} (config/cache.py CacheDType; "
                        f"first in {since} of the releases read)",
                        fix=f"Set serve.kv_cache_dtype to another dtype, or run vLLM {since} or newer "
                        "(--vllm-version).")
    oldest = str(rules.data()["kv_cache_dtypes_oldest_read"])
    if since is not None and v < rules.version_key(since):
        return f"--kv-cache-dtype {kv_dtype}: whether vLLM {version} accepts it was not read (first read in {since})"
    if v < rules.version_key(oldest) and kv_dtype != "auto":
        return f"--kv-cache-dtype {kv_dtype}: vLLM's list of KV dtypes was read from {oldest} on, not for {version}"
    return None


def _unread(kv_dtype: str) -> PlanError:
    return PlanError(f"how vLLM sizes a --kv-cache-dtype {kv_dtype} page was not read for this model's attention",
                     fix="Plan with another serve.kv_cache_dtype, or calibrate from one startup log "
                     "(`forklift plan RECIPE --calibrate LOG`).")


def _tq_slot(row: dict[str, Any], head: int) -> int:
    """TurboQuantConfig.slot_size_aligned: packed key + value bytes of one head at one position, rounded to even."""
    kbits, vbits = int(row["key_bits"]), int(row["value_bits"])
    key = head if kbits == 8 else -(-head * kbits // 8) + 2
    slot = key + -(-head * vbits // 8) + 4
    return slot + slot % 2


def gqa_token_bytes(kv_dtype: str, heads: int, head: int, model_dtype_bytes: int, head_v: int | None = None) -> int:
    """One attention layer's bytes per token on one worker (``heads`` KV heads of ``head_size``; ``head_v``: a V
    head size other than K's, v1/kv_cache_interface.py AttentionSpec.state_content_size_bytes:
    (head_size + head_size_v) x dtype bytes, read for dense dtypes only)."""
    row = _dtype_row(kv_dtype)
    form = row["form"]
    if head_v is not None and head_v != head:
        if form not in ("model", "dense") or row.get("scale_bytes"):
            raise _unread(kv_dtype)
        return heads * (head + head_v) * (model_dtype_bytes if form == "model" else int(row["bytes"]))
    if form == "turboquant":
        return heads * _tq_slot(row, head)
    if form == "unread":
        raise _unread(kv_dtype)
    elem = model_dtype_bytes if form == "model" else int(row["bytes"])
    row_bytes = {"int4": head // 2, "nvfp4": head // 2 + head // 16}.get(form, head)
    return heads * (2 * row_bytes * elem + 2 * int(row.get("scale_bytes", 0)))


def mla_latent_bytes(kv_dtype: str, head: int, model_dtype_bytes: int) -> int:
    """One MLA layer's bytes per token (MLAAttentionSpec.real_page_size_bytes: one latent row of ``head``)."""
    row = _dtype_row(kv_dtype)
    form = row["form"]
    if "mla_token_bytes" in row:
        return int(row["mla_token_bytes"])
    if form in ("turboquant", "unread"):
        raise _unread(kv_dtype)
    elem = model_dtype_bytes if form == "model" else int(row["bytes"])
    row_bytes = head // 2 if form == "int4" else head
    return row_bytes * elem + 2 * int(row.get("scale_bytes", 0))


def _gpu_key(capability: str) -> str:
    major = capability.split(".")[0] if capability else "9"
    return {"9": "9.0", "10": "10.0", "11": "10.0", "12": "12.1"}.get(major, "9.0")


def mla_bytes(spec: ModelSpec, inputs: KvInputs) -> int:
    """MLA latent bytes per token per layer; sparse (DSA) models by the sparse backend the GPU gets."""
    assert spec.mla is not None
    fp8 = inputs.kv_dtype.startswith("fp8")
    if spec.indexer is not None and inputs.platform == "cuda":
        table: dict[str, dict[str, int]] = rules.data()["sparse_mla_bytes"]
        return table[_gpu_key(inputs.capability)]["fp8" if fp8 else "auto"]
    return mla_latent_bytes(inputs.kv_dtype, spec.mla.kv_lora_rank + spec.mla.qk_rope_head_dim,
                            inputs.model_dtype_bytes)


def _gdn_state(state: StateSpec, inputs: KvInputs, release: rules.VersionRules) -> tuple[int, int]:
    """Gated DeltaNet: conv over q, k, v; recurrent state heads x head_dim x key_dim."""
    t = inputs.tp
    conv = (state.conv_kernel - 1 + inputs.num_spec) * (
        (2 * state.key_heads * state.key_dim + state.heads * state.head_dim) // t)
    return conv, (state.heads // t) * state.head_dim * state.key_dim


def _mamba2_state(state: StateSpec, inputs: KvInputs, release: rules.VersionRules) -> tuple[int, int]:
    """Mamba2: groups padded to a multiple of TP; recurrent state heads x head_dim x state_size."""
    t = inputs.tp
    groups = state.groups if state.groups % t == 0 else state.groups + (t - state.groups)
    conv = (state.conv_kernel - 1 + inputs.num_spec) * (
        (state.heads * state.head_dim + 2 * groups * state.state_size) // t)
    return conv, (state.heads // t) * state.head_dim * state.state_size


def _kda_state(state: StateSpec, inputs: KvInputs, release: rules.VersionRules) -> tuple[int, int]:
    """KDA: 0.26 ignores the speculative tokens in the conv length; recurrent state fp32 (hard-coded)."""
    length = state.conv_kernel - 1 + (inputs.num_spec if release.align_prefill_checkpoint else 0)
    return (length * (3 * state.heads * state.head_dim // inputs.tp),
            (state.heads // inputs.tp) * state.head_dim * state.head_dim)


STATE_KINDS: dict[str, Callable[[StateSpec, KvInputs, rules.VersionRules], tuple[int, int]]] = {
    "gdn": _gdn_state, "mamba2": _mamba2_state, "kda": _kda_state,
}
"""Per linear-attention state kind: (conv elements, recurrent state elements) per layer on one worker."""


def state_bytes(state: StateSpec, inputs: KvInputs, release: rules.VersionRules) -> int:
    """MambaSpec.page_size_bytes (unpadded): conv state in the model dtype plus the recurrent state."""
    shape = STATE_KINDS.get(state.kind)
    if shape is None:
        raise PlanError(f"linear-attention state {state.kind!r} has no cache shape in the planner",
                        fix="Plan a supported family (" + ", ".join(STATE_KINDS) + ") or calibrate from one "
                        "startup log (`forklift plan RECIPE --calibrate LOG`).")
    conv, ssm = shape(state, inputs, release)
    return conv * inputs.model_dtype_bytes + ssm * _BYTES.get(state.ssm_dtype or "", inputs.model_dtype_bytes)


@dataclass(frozen=True)
class _LayerInputs:
    spec: ModelSpec
    x: KvInputs
    vr: rules.VersionRules
    gqa: dict[str, int]
    """GQA bytes per token per layer on one worker, per attention mixer kind (empty on an MLA model)."""
    indexer_bytes: int


def _mamba_layer(layer: LayerSpec, layer_inputs: _LayerInputs) -> list[LayerKv]:
    assert layer_inputs.spec.state is not None
    return [LayerKv("mamba", state=state_bytes(layer_inputs.spec.state, layer_inputs.x, layer_inputs.vr))]


def _mla_layer(layer: LayerSpec, layer_inputs: _LayerInputs) -> list[LayerKv]:
    latent = [LayerKv("mla", per_token=mla_bytes(layer_inputs.spec, layer_inputs.x))]
    return latent + ([LayerKv("mla", per_token=layer_inputs.indexer_bytes)] if layer.indexer else [])


def _sliding_layer(layer: LayerSpec, layer_inputs: _LayerInputs) -> list[LayerKv]:
    return [LayerKv("sliding", per_token=layer_inputs.gqa["sliding"], window=layer_inputs.spec.sliding_window)]


def _full_layer(layer: LayerSpec, layer_inputs: _LayerInputs) -> list[LayerKv]:
    return [LayerKv("full", per_token=layer_inputs.gqa["attention"])]


LAYER_KINDS: tuple[tuple[str, Callable[[LayerSpec, ModelSpec], bool],
                         Callable[[LayerSpec, _LayerInputs], list[LayerKv]]], ...] = (
    ("mamba", lambda layer, spec: layer.has_state and spec.state is not None, _mamba_layer),
    ("mla", lambda layer, spec: layer.has_kv and spec.mla is not None, _mla_layer),
    ("sliding", lambda layer, spec: layer.mixer == "sliding", _sliding_layer),
    ("full", lambda layer, spec: layer.has_kv, _full_layer),
)
"""A layer's cache kind (the first whose test holds) and the cache specs it allocates; a layer that none
matches (an MoE-only or attention-free layer) holds no cache."""


def _layer_kv(layer: LayerSpec, layer_inputs: _LayerInputs) -> list[LayerKv]:
    if layer.kv_shared:  # gpu_model_runner.py get_kv_cache_spec: kv_sharing_target_layer_name -> no spec
        return []
    build = next((b for _, test, b in LAYER_KINDS if test(layer, layer_inputs.spec)), None)
    return build(layer, layer_inputs) if build is not None else []


def layer_specs(spec: ModelSpec, start: int, end: int, last: bool, inputs: KvInputs,
                release: rules.VersionRules) -> list[LayerKv]:
    """The cache specs of the layers [start, end) on one worker (+ MTP draft layers on the last stage)."""
    if spec.csa is not None:  # DeepSeek-V4: its own specs, blocks and pages (+ the MTP layers' SWA caches)
        return csakv.layer_specs(spec, start, end, inputs.kv_dtype, inputs.dcp, inputs.platform,
                                 mtp=spec.mtp_layers if last and inputs.include_mtp else 0, num_spec=inputs.num_spec)
    if inputs.kv_dtype.startswith("turboquant_") and not spec.is_hybrid and spec.mla is None:
        raise PlanError(f"--kv-cache-dtype {inputs.kv_dtype} on a model without linear-attention layers: vLLM keeps "
                        "the "
                        "first and last two attention layers in the model dtype (turboquant/config.py "
                        "get_boundary_skip_layers) and re-aligns the block size for the two page sizes "
                        "(platforms/interface.py _align_heterogeneous_kv_block_size), which the planner does not model",
                        fix="Plan with another serve.kv_cache_dtype, or calibrate from one startup log "
                        "(`forklift plan RECIPE --calibrate LOG`).")
    gqa: dict[str, int] = {}
    if spec.mla is None:
        for mixer in ("attention", "sliding"):
            shape = spec.attn_shape(mixer)
            # the kind's KV heads split by TP, at least one per rank (ModelSpec.attn_shape falls back to the
            # model's num_kv_heads / head_dim where the family gives its kinds no shape of their own)
            kv_heads = max(1, shape.kv_heads // inputs.tp)
            gqa[mixer] = gqa_token_bytes(inputs.kv_dtype, kv_heads, shape.head_dim, inputs.model_dtype_bytes,
                                         shape.v_head_dim)
    a = _LayerInputs(spec, inputs, release, gqa, int(rules.data()["indexer_bytes_per_token"]))
    out = [kv for layer in spec.layers[start:end] for kv in _layer_kv(layer, a)]
    if last and inputs.include_mtp:
        for _ in range(spec.mtp_layers):
            out.append(LayerKv("mla", per_token=mla_bytes(spec, inputs)) if spec.mla else LayerKv(
                "full", per_token=gqa["attention"]))
            if spec.indexer is not None:
                out.append(LayerKv("mla", per_token=a.indexer_bytes))
    return out


def base_block(spec: ModelSpec, inputs: KvInputs) -> int:
    """Phase 1: the user's --block-size, else the attention backend's preferred block."""
    table: dict[str, Any] = rules.block_sizes()
    if spec.csa is not None:
        return csakv.block_size(inputs.block, inputs.platform)
    if inputs.platform == "cpu":
        return int(table["cpu_mla_without_amx"]) if spec.mla is not None and not inputs.amx else (inputs.block or
                                                                                             int(table["cpu"]))
    if inputs.block:
        return inputs.block
    if spec.indexer is not None:
        return int(table["cuda_sparse_mla"])
    if spec.mla is not None:
        fp8 = inputs.kv_dtype.startswith("fp8")
        return int(table["cuda_mla"][_gpu_key(inputs.capability)]["fp8" if fp8 else "auto"])
    return int(table["cuda"])


def mamba_mode(spec: ModelSpec, inputs: KvInputs, release: rules.VersionRules) -> Literal["none", "align", "all"]:
    """Prefix caching on a hybrid: "all" for SupportsMambaPrefixCaching models while vLLM has it, else "align"."""
    if not spec.is_hybrid:
        return "none"
    on = inputs.prefix_caching if inputs.prefix_caching is not None else release.hybrid_prefix_caching_default
    if not on:
        return "none"
    return "all" if spec.supports_mamba_prefix_caching and release.mamba_all_mode else "align"


def concurrent_batches(pp: int, runner: str, platform: str = "cuda") -> int:
    """VllmConfig.max_concurrent_batches (config/vllm.py): with async scheduling (on by default on GPUs) pp + 1 on the
    V2 runner, 2 at pp 1 on V1; without it pp. vLLM-CPU turns async scheduling off (platforms/cpu.py
    check_and_update_config: scheduler_config.async_scheduling = False), so there it is pp."""
    if platform == "cpu":
        return pp
    if runner == "v2":
        return pp + 1
    return 2 if pp == 1 else pp


def kv_config(spec: ModelSpec, inputs: KvInputs, release: rules.VersionRules) -> KvConfig:
    block = base_block(spec, inputs)
    mode = mamba_mode(spec, inputs, release)
    ckpt_align, ckpt_blocks = 1, 0
    if release.align_prefill_checkpoint and mode == "align" and spec.state is not None:
        if spec.state.kind == "gdn" and inputs.capability.startswith("9."):
            ckpt_align, ckpt_blocks = 64, 1  # FlashInfer GDN prefill exports checkpoints (kv §3.2)
        elif spec.state.kind == "mamba2":
            ckpt_blocks = 1
    return KvConfig(
        max_model_len=inputs.max_model_len, mnbt=inputs.mnbt, block=block, kernel_min_block=block,
        concurrent_batches=concurrent_batches(inputs.pp, inputs.runner, inputs.platform), dcp=inputs.dcp,
        num_spec=inputs.num_spec, mamba_mode=mode,
        mamba_chunk=spec.state.chunk_size if spec.state is not None else 256, mla=spec.mla is not None,
        mla_hybrid_block_128=release.mla_hybrid_block_128, ckpt_alignment=ckpt_align, ckpt_blocks=ckpt_blocks,
        tokens_formula="concurrency" if release.tokens_formula == "concurrency" else "blocks",
        check_subtracts_null_block=release.check_subtracts_null_block,
    )

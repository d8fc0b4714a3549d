"""The recipe's ``serve:`` section: vLLM's serving knobs, typed (``extra_args`` is the escape hatch)."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from forklift.recipe.speculative import Speculative
from forklift.recipe.strict import Strict

# host names: dot-separated labels of letters, digits and inner '-' (RFC 1123) or '_' (/etc/hosts and compose names)
_HOSTNAME_RE = re.compile(r"(?=.{1,253}\Z)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
                          r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?")

# Every --kv-cache-dtype stock vLLM 0.23-0.33 accepts (config/cache.py CacheDType); which release takes which name,
# and the bytes each stores, are the planner's data (plan/data/vllm.yaml kv_cache_dtypes).
KvCacheDtype = Literal[
    "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla",
    "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "octave_k3v4", "octave_k3v3",
    "octave_k3v3_compact", "ultraquant_4bit", "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head",
    "nvfp4", "nvfp4_4over6",
]
Quantization = Literal[
    "fp8", "modelopt_fp4", "nvfp4", "mxfp4", "awq", "awq_marlin", "gptq", "gptq_marlin",
    "compressed-tensors", "bitsandbytes", "gguf",
]


class Multimodal(Strict):
    """The multimodal knobs that change memory (vLLM's MultiModalConfig). Null means vLLM's own default."""

    limit_mm_per_prompt: dict[str, Annotated[int, Field(ge=0)]] | None = Field(
        default=None, description="--limit-mm-per-prompt, items per modality (image, video, audio). Every modality "
        "of a tower at 0 skips building that tower (no weights, no encoder profiling).",
    )
    skip_mm_profiling: bool = Field(
        default=False, description="--skip-mm-profiling: the profile run skips the encoder on dummy items, so the "
        "KV pool is sized without the encoder's peak (a real image batch can then run out of memory).",
    )
    mm_encoder_tp_mode: Literal["weights", "data"] = Field(
        default="weights", description="--mm-encoder-tp-mode: 'weights' shards the tower over TP; 'data' keeps a "
        "whole tower on every TP rank and splits the batch.",
    )
    max_pixels: int | None = Field(
        default=None, ge=1, description="--mm-processor-kwargs max_pixels: the image processor's largest image, "
        "which sets the tokens per dummy item vLLM profiles the encoder with.",
    )


class Serve(Strict):
    """vLLM serving knobs. Null means vLLM's own default."""

    host: str = Field(default="127.0.0.1", description="Address the API server binds on the head node.")
    port: int = Field(default=8000, ge=1, le=65535)
    max_model_len: int | None = Field(default=None, ge=16)
    gpu_memory_utilization: float | None = Field(default=None, gt=0.0, le=1.0)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    max_num_seqs: int | None = Field(default=None, ge=1)
    kv_cache_dtype: KvCacheDtype = "auto"
    quantization: Quantization | None = None
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    enforce_eager: bool = False
    engine_in_process: bool = Field(
        default=False, description="vLLM-CPU, one node: VLLM_ENABLE_V1_MULTIPROCESSING=0, so vLLM runs its worker "
        "inside the engine-core process instead of a process of its own (one Python process fewer to start: on 2 "
        "cores the bundled model is ready ~7 s sooner and decodes ~27% more tokens/s). vLLM then does not bind its "
        "OpenMP threads (VLLM_CPU_OMP_THREADS_BIND is applied only where it spawns workers), so deployments sharing "
        "a box no longer compute on cores of their own: for one deployment per box. True beyond one CPU node is "
        "refused.",
    )
    block_size: int | None = Field(default=None, ge=1)
    disable_custom_all_reduce: bool = Field(
        default=False, description="NCCL all-reduce instead of vLLM's custom kernel (tensor parallel on GPUs)."
    )
    cpu_kv_cache_gib: float | None = Field(
        default=None, gt=0, description="vLLM-CPU's KV pool in GiB (VLLM_CPU_KVCACHE_SPACE)."
    )
    kv_cache_memory_bytes: Annotated[int, Field(ge=1)] | Literal["plan"] | None = Field(
        default=None,
        description="vLLM's explicit KV budget per GPU (--kv-cache-memory-bytes; skips profiling-based sizing): "
        "bytes, or \"plan\" for the pool the planner predicts. Rendered from the plan's decisions.",
    )
    enable_prefix_caching: bool | None = Field(
        default=None, description="--enable-prefix-caching / --no-enable-prefix-caching (null: vLLM's default; "
        "on hybrid models it changes the Mamba cache mode and the KV block size)."
    )
    enable_expert_parallel: bool = Field(
        default=False, description="--enable-expert-parallel: whole experts per rank over tp x dp (DP+EP)."
    )
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool = False
    speculative: Speculative | None = Field(
        default=None, description="Speculative decoding (--speculative-config), typed per method: ngram, ngram_gpu, "
        "suffix, draft_model, eagle, eagle3, mtp, dflash, dspark, medusa.",
    )
    multimodal: Multimodal = Field(
        default_factory=Multimodal, description="Multimodal towers: items per prompt, encoder profiling, tower TP."
    )
    api_key_env: str | None = Field(
        default=None, description="Name of an environment variable holding the API key (never the key)."
    )
    seed: int | None = None
    extra_args: list[str] = Field(
        default_factory=list, description="Escape hatch: raw vLLM arguments. `plan` warns about these."
    )

    @field_validator("host")
    @classmethod
    def _bind_address(cls, v: str) -> str:
        try:
            ipaddress.ip_address(v)
        except ValueError:
            if not _HOSTNAME_RE.fullmatch(v):
                raise ValueError(f"{v!r}: must be an IP address or a host name the head node binds (e.g. 127.0.0.1, "
                                 "0.0.0.0 or spark-a); clients reach it at http://HOST:PORT") from None
        return v

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
            raise ValueError("must be an environment variable name such as FORKLIFT_API_KEY, not the key")
        return v

    @model_validator(mode="after")
    def _tool_choice_needs_parser(self) -> Serve:
        if self.enable_auto_tool_choice and not self.tool_call_parser:
            raise ValueError("enable_auto_tool_choice needs tool_call_parser (for example 'hermes')")
        return self

"""``serve.speculative``: vLLM's ``--speculative-config``, typed per method.

One model per ``method`` (a discriminated union), each with the knobs that method reads, under vLLM's own key
names and with vLLM's field constraints (``vllm/config/speculative.py:SpeculativeConfig``). Which keys and
methods a given vLLM release accepts, the compatibility rules and the sizing arithmetic live in
``forklift.speculative``; this module is only the recipe's shape.

A null knob is left to vLLM's default and not rendered. ``num_speculative_tokens`` is always rendered
(forklift never lets vLLM pick K: for ``suffix`` vLLM's default is the tree depth, 24).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

MTP_ALIASES = frozenset({
    "bailing_hybrid_mtp", "bailing_hybrid_v3_mtp", "deepseek_mtp", "dots3_note_mtp", "ernie_mtp", "exaone4_5_mtp",
    "exaone_moe_mtp", "gemma4_mtp", "glm4_moe_lite_mtp", "glm4_moe_mtp", "glm5_next_mtp", "glm_ocr_mtp",
    "hy_v3_mtp", "hy_v4_mtp", "inkling_mtp", "kimi_k3_mtp", "longcat_flash_mtp", "mimo_mtp", "mimo_v2_mtp",
    "minimax_m3_mtp", "nemotron_h_mtp", "pangu_ultra_moe_mtp", "qwen3_5_mtp", "qwen3_next_mtp", "qwen4_exp_mtp",
    "step3p5_mtp", "step5_mtp",
})
"""Per-model MTP method names vLLM deprecates and rewrites to ``mtp`` (union over 0.11-0.33,
``SpeculativeConfig.__post_init__``: "method `%s` is deprecated and replaced with mtp."). forklift always emits
``mtp``: some aliases are not even accepted by older releases (``glm4_moe_mtp`` fails 0.11's literal)."""

_REFUSED = {
    "mlp_speculator": "vLLM's V1 engine has no proposer for it (GPUModelRunner.__init__: 'Unknown speculative "
                      "decoding method'), and 0.33 removed it",
    "custom_class": "a user proposer class is outside what forklift can plan or check",
    "extract_hidden_states": "it records hidden states for training drafts; it is not a speed-up",
}


def _canonical_method(value: object) -> object:
    """Rewrite deprecated MTP aliases to ``mtp``; refuse methods forklift does not model, naming the way out.
    Null keys are dropped first (null is vLLM's default): a record written before the per-method models, with
    every knob of every method as null, still loads."""
    if not isinstance(value, dict) or "method" not in value:
        return value
    value = {k: v for k, v in value.items() if v is not None}
    method = value["method"]
    if method in MTP_ALIASES:
        return {**value, "method": "mtp"}
    if method in _REFUSED:
        raise ValueError(f"method {method!r} is not supported: {_REFUSED[method]}; pass it raw with "
                         "serve.extra_args ['--speculative-config', '{...}'] if you must")
    return value


class _Common(BaseModel):
    # as recipe.strict.Strict; defer_build: Serve's schema builds the method models it needs for the union, and a
    # model's own validator is built only when it is used alone (the private bases never are)
    model_config = ConfigDict(extra="forbid", validate_assignment=True, defer_build=True)

    num_speculative_tokens: int = Field(
        default=1, ge=1, description="K: draft tokens proposed per step (vLLM: num_speculative_tokens).")
    num_speculative_tokens_per_batch_size: list[tuple[int, int, int]] | None = Field(
        default=None, description="Dynamic K: [[batch_start, batch_end, K], ...] (vLLM >= 0.24).")
    extra: dict[str, Any] = Field(
        default_factory=dict,
        description="Escape hatch: more --speculative-config keys, under vLLM's names. `plan` checks each against "
        "the vLLM release (unknown keys are refused: vLLM <= 0.14 silently drops them, >= 0.16 fails).",
    )

    @model_validator(mode="after")
    def _extra_does_not_shadow(self) -> _Common:
        typed = set(type(self).model_fields) - {"extra"}
        clash = sorted(typed & set(self.extra))
        if clash:
            raise ValueError(f"extra repeats typed key(s) {', '.join(clash)}: set them as fields")
        if "tensor_parallel_size" in self.extra:
            raise ValueError("'tensor_parallel_size' is not a valid argument in the speculative_config. Please "
                             "pass 'draft_tensor_parallel_size' instead. (vLLM's words)")
        return self


class _Lookup(_Common):
    prompt_lookup_min: int | None = Field(default=None, ge=1, description="Shortest n-gram matched (vLLM default 5).")
    prompt_lookup_max: int | None = Field(default=None, ge=1, description="Longest n-gram matched (vLLM default 5).")

    @model_validator(mode="after")
    def _min_below_max(self) -> _Lookup:
        lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"prompt_lookup_min={lo} must be <= prompt_lookup_max={hi}")
        return self


class NgramSpec(_Lookup):
    """Prompt lookup: copies what followed the last n-gram's earlier occurrence. No draft weights, no draft KV."""

    method: Literal["ngram"]


class NgramGpuSpec(_Lookup):
    """The same lookup as a Triton kernel on the GPU (vLLM >= 0.18)."""

    method: Literal["ngram_gpu"]


class SuffixSpec(_Common):
    """Suffix-tree drafting over the prompt and earlier responses (vLLM >= 0.12; needs arctic-inference)."""

    method: Literal["suffix"]
    suffix_decoding_max_tree_depth: int | None = Field(default=None, ge=1)
    suffix_decoding_max_cached_requests: int | None = Field(default=None, ge=0)
    suffix_decoding_max_spec_factor: float | None = Field(default=None, ge=0)
    suffix_decoding_min_token_prob: float | None = Field(default=None, ge=0, le=1)


class _Drafted(_Common):
    """Methods with a draft network (its own config, weights and KV layers)."""

    model: str | None = Field(default=None, description="Draft checkpoint (a path on every node, or a hub id).")
    draft_tensor_parallel_size: int | None = Field(default=None, ge=1, description="1 or the target's TP.")
    quantization: str | None = None
    max_model_len: int | None = Field(default=None, ge=1)
    revision: str | None = None
    code_revision: str | None = None
    enforce_eager: bool | None = Field(default=None, description="Run only the drafter eagerly.")
    disable_padded_drafter_batch: bool | None = None
    draft_sample_method: Literal["greedy", "probabilistic"] | None = Field(default=None, description="vLLM >= 0.21.")
    attention_backend: str | None = Field(default=None, description="Draft attention backend (vLLM >= 0.21).")
    moe_backend: str | None = Field(default=None, description="Draft MoE kernel (vLLM >= 0.19).")
    kv_cache_dtype: str | None = Field(default=None, description="Draft KV dtype (vLLM >= 0.26; default: target's).")
    use_local_argmax_reduction: bool | None = Field(default=None, description="vLLM >= 0.17.")


class _NeedsModel(_Drafted):
    @model_validator(mode="after")
    def _model_given(self) -> _NeedsModel:
        if not self.model:
            raise ValueError(f"method {getattr(self, 'method', '?')!r} needs model: the draft checkpoint")
        return self


class DraftModelSpec(_NeedsModel):
    """A small model with the target's vocabulary drafts K tokens (works in vLLM >= 0.16)."""

    method: Literal["draft_model"]
    parallel_drafting: bool | None = Field(default=None, description="PARD (vLLM >= 0.16).")
    use_heterogeneous_vocab: bool | None = Field(default=None, description="vLLM >= 0.25, greedy only.")


class EagleSpec(_NeedsModel):
    """An EAGLE head (usually one decoder layer) on the target's hidden states."""

    method: Literal["eagle"]
    parallel_drafting: bool | None = Field(default=None, description="P-EAGLE (vLLM >= 0.16).")


class Eagle3Spec(_NeedsModel):
    """An EAGLE-3 head on three of the target's hidden layers."""

    method: Literal["eagle3"]
    parallel_drafting: bool | None = Field(default=None, description="P-EAGLE (vLLM >= 0.16).")


class MtpSpec(_Drafted):
    """The model's own multi-token-prediction layers (``num_nextn_predict_layers``); ``model`` defaults to the
    target checkpoint. Deprecated per-model names (``deepseek_mtp``, ``glm4_moe_mtp``, ...) become ``mtp``."""

    method: Literal["mtp"]
    index_share_for_mtp_iteration: bool | None = Field(default=None, description="vLLM >= 0.29.")


class DFlashSpec(_NeedsModel):
    """A block-diffusion drafter: a whole block in one pass (vLLM >= 0.20)."""

    method: Literal["dflash"]


class DSparkSpec(_Drafted):
    """DFlash plus Markov and confidence heads (vLLM >= 0.25; Model Runner V2 only). ``model`` defaults to the
    target checkpoint (DeepSeek-V4 ships the draft inside it)."""

    method: Literal["dspark"]
    enable_adaptive_verification: bool | None = Field(default=None, description="vLLM >= 0.28; needs CUDA graphs.")
    dspark_draft_topk: int | None = Field(default=None, ge=1, description="vLLM >= 0.28.")


class MedusaSpec(_NeedsModel):
    """Medusa heads (vLLM <= 0.32)."""

    method: Literal["medusa"]


Speculative = Annotated[
    NgramSpec | NgramGpuSpec | SuffixSpec | DraftModelSpec | EagleSpec | Eagle3Spec | MtpSpec | DFlashSpec
    | DSparkSpec | MedusaSpec,
    Field(discriminator="method"), BeforeValidator(_canonical_method),
]
"""``serve.speculative``: one of the method models above, chosen by ``method``."""

SpeculativeConfig = (NgramSpec | NgramGpuSpec | SuffixSpec | DraftModelSpec | EagleSpec | Eagle3Spec | MtpSpec
                     | DFlashSpec | DSparkSpec | MedusaSpec)
"""The same union, for type annotations."""

DRAFTED_METHODS = ("draft_model", "eagle", "eagle3", "mtp", "dflash", "dspark", "medusa")
"""Methods with a draft network (draft weights and draft KV); the others look tokens up."""

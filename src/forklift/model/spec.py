"""ModelSpec and its parts: the types the planner's model rules build and read (types only; no rule here).

The shape (layers, what mixes tokens in each, heads, experts, linear-attention state) comes from config.json
through the family rules in ``architectures.yaml`` (``forklift.model.archrules.from_config``); the tensors and their
stored byte cost follow from the layout (``forklift.model.tensors``) and the quantization config
(``forklift.model.quant``). The rules import this module; it imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from forklift.model.quant import QuantScheme

AttentionKind = Literal["gqa", "mla"]
Split = Literal["col", "row", "kv", "vocab", "expert", "replicated"]
Mixer = Literal["attention", "sliding", "gdn", "mamba2", "kda", "none"]
"""What mixes tokens in a layer: attention (full or sliding window; MLA when the model's attention is mla), a
linear-attention / SSM mixer with a per-sequence state (gated DeltaNet, Mamba-2, Kimi Delta Attention), or none
(Nemotron-H's MLP-only and MoE-only layers)."""
Mlp = Literal["dense", "moe", "none"]
LayerPlan = list[tuple[Mixer, Mlp | None]]
"""Per layer: its mixer, and its MLP when the layer rule fixes it (the family rules' working form)."""
Role = Literal["attn", "indexer", "mixer", "dense_mlp", "shared", "experts", "router", "norm", "embed", "lm_head",
               "mtp", "vision"]
Tower = Literal["siglip", "qwen2_5_vit", "qwen3_vit", "qwen3_5_vit"]
STATE_MIXERS: tuple[Mixer, ...] = ("gdn", "mamba2", "kda")


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True, slots=True)
class Tensor:
    """One weight tensor (or a group of identical ones) of the model. A plain record: the planner makes ~1,200 of
    them per model from validated ModelSpec fields, so pydantic's validation of each was only start-up time."""

    module: str
    numel: int
    split: Split
    layer: int | None = None  # decoder layer index; None for embed / lm_head / final norm
    where: Literal["layer", "embed", "lm_head", "final"] = "layer"
    linear: bool = True
    role: Role = "attn"
    kv_heads: int = 0  # split "kv": the KV heads of this tensor's layer kind (0: ModelSpec.num_kv_heads)
    dtype_bytes: int = 0  # a dtype the model class fixes whatever the checkpoint (fp32 / int32); 0: the scheme's

    def kv_ways(self, tp: int, model_kv_heads: int) -> int:
        """How many ways TP splits a "kv" tensor: its KV heads, at most tp (QKVParallelLinear replicates the rest)."""
        return min(tp, self.kv_heads or model_kv_heads)


class LayerSpec(Frozen):
    index: int
    mixer: Mixer = "attention"
    mlp: Mlp = "dense"
    indexer: bool = False
    kv_shared: bool = False  # reads an earlier layer's cache (kv_sharing_target_layer_name): no cache, no K/V weights
    wide_mlp: bool = False  # the dense MLP (or the always-on shared MLP) at twice intermediate_size

    @property
    def has_kv(self) -> bool:
        return self.mixer in ("attention", "sliding")

    @property
    def has_state(self) -> bool:
        return self.mixer in STATE_MIXERS

    @property
    def moe(self) -> bool:
        return self.mlp == "moe"


class MoESpec(Frozen):
    n_routed: int
    top_k: int
    n_shared: int
    intermediate: int
    shared_intermediate: int = 0  # all shared experts together (0: none)
    first_k_dense: int = 0
    dense_layers: tuple[int, ...] = ()
    has_bias: bool = False
    router_bias: bool = False
    gated: bool = True  # gate + up projections (SwiGLU); False: up only (Nemotron relu2)


class MLASpec(Frozen):
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


class IndexerSpec(Frozen):
    n_heads: int
    head_dim: int
    layers: tuple[int, ...]
    topk: int = 2048


class CompressedMlaSpec(Frozen):
    """DeepSeek-V4's compressed sparse MLA (vLLM 0.32.0 models/deepseek_v4/attention.py DeepseekV4Attention,
    compressor.py DeepseekCompressor): one latent head of ``head_dim`` per layer, a sliding window over the raw
    tokens on every layer, and on layers whose ``compress_ratios`` entry is > 1 a cache of one compressed row per
    ratio tokens (ratio 4 adds a lightning indexer); hyper-connections (``hc_mult`` residual streams) around each
    block; hash-routed MoE on the first ``num_hash_layers`` layers."""

    head_dim: int
    rope_head_dim: int
    q_lora_rank: int
    o_lora_rank: int
    o_groups: int
    window: int
    ratios: tuple[int, ...]  # max(1, compress_ratios[i]) per decoder layer (attention.py: 1 = sliding window only)
    index_n_heads: int
    index_head_dim: int
    index_topk: int
    hc_mult: int
    num_hash_layers: int
    noaux_bias: bool  # topk_method noaux_tc: an fp32 e_score_correction_bias on the non-hash MoE layers


class StateSpec(Frozen):
    """The per-sequence state of a linear-attention / SSM layer (vLLM's MambaSpec), per the whole model (TP=1)."""

    kind: Literal["gdn", "mamba2", "kda"]
    heads: int  # gdn: value heads; mamba2: mamba heads; kda: heads
    head_dim: int  # gdn: value head dim; mamba2: mamba head dim; kda: head dim
    conv_kernel: int
    key_heads: int = 0  # gdn
    key_dim: int = 0  # gdn
    groups: int = 0  # mamba2 n_groups
    state_size: int = 0  # mamba2 ssm_state_size
    chunk_size: int = 256  # mamba2 chunk size (vLLM's "all" prefix-caching mode aligns Mamba blocks to it)
    ssm_dtype: str | None = None
    """The recurrent state's dtype when the model fixes it (config hook or hard-coded); None: the conv dtype."""


class RopeCache(Frozen):
    """One rotary cos/sin cache a model class registers at load (RotaryEmbeddingBase.__init__, a non-persistent
    buffer, so vLLM's "Model loading took" counts it): ``rows`` positions x ``width`` (rotary_dim: cos and sin
    halves) x ``dtype_bytes``, held once per rank by every stage with a layer whose mixer is in ``mixers`` (get_rope
    shares one instance per key through _ROPE_DICT)."""

    mixers: tuple[Mixer, ...]
    rows: int
    width: int
    dtype_bytes: int

    @property
    def nbytes(self) -> int:
        return self.rows * self.width * self.dtype_bytes


class VisionSpec(Frozen):
    """One vision tower's shape (from vision_config, with the transformers class defaults for absent keys)."""

    tower: Tower
    hidden: int
    depth: int
    intermediate: int
    channels: int
    patch: int
    temporal_patch: int = 1
    merge: int = 1
    out_hidden: int  # the width the projector writes (the language model's hidden size for Gemma-3)
    positions: int = 0  # learned position embeddings (SigLIP: (image / patch)^2; Qwen3-VL: num_position_embeddings)
    deepstack: int = 0  # Qwen3-VL: extra mergers, one per deepstack_visual_indexes entry


class AttnShape(Frozen):
    """One attention layer kind's shape where a family gives its layer kinds their own (MiMo-V2: sliding and full
    layers with their own heads, KV heads, K and V head sizes; Gemma 4: a wider head on full layers): the query
    heads, KV heads and K / V head sizes of the kind's Attention (vLLM's AttentionSpec num_kv_heads, head_size,
    head_size_v), plus whether the kind has an attention-sink bias (one per head: mimo_v2.py)."""

    mixer: Mixer
    heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    sinks: bool = False


class ModelSpec(Frozen):
    """The planner's view of one model."""

    name: str
    architecture: str
    family: str
    attention: AttentionKind
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    # vLLM's derived max_model_len (None: the config names none of its keys) and the key it came from
    derived_max_len: int | None = None
    max_len_key: str | None = None
    derived_max_len_text: str | None = None  # as vLLM prints it (a float when rope scaling applies)
    default_max_len: int | None = None  # vLLM's max_model_len when the recipe sets none
    model_max_length: int | None = None
    tie_word_embeddings: bool
    dtype_bytes: int
    attention_bias: bool = False
    qk_norm: bool = False
    gated_q: bool = False
    sliding_window: int | None = None
    layer_norms: int = 2  # hidden-size norms per decoder layer (Gemma-2/3: 4)
    layers: tuple[LayerSpec, ...]
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    indexer: IndexerSpec | None = None
    state: StateSpec | None = None
    supports_mamba_prefix_caching: bool = False
    vllm_min: str | None = None
    mtp_layers: int = 0
    # the MTP block around each MTP decoder layer: its input projection over [embedding; hidden] (2h x h) and how
    # TP splits it, and the hidden-size norms beside the layer's own (architectures.yaml `mtp`)
    mtp_proj_split: Split = "replicated"
    mtp_norms: int = 4
    vision: VisionSpec | None = None  # a multimodal wrapper's vision tower (forklift.model.vision)
    text_only: tuple[str, ...] = ()
    """A multimodal wrapper whose towers the planner has no shape for, planned as its language model alone: the
    modalities whose limit_mm_per_prompt must be 0 (vLLM then never builds the towers) for the plan to hold."""
    rope_caches: tuple[RopeCache, ...] = ()  # only for families whose entry names them (architectures.yaml)
    quant: QuantScheme
    per_layer_input: int = 0
    """Gemma 4 per-layer embeddings (PLE): hidden_size_per_layer_input (0: none)."""
    per_layer_vocab: int = 0
    """Gemma 4 PLE table rows: vocab_size_per_layer_input."""
    csa: CompressedMlaSpec | None = None  # DeepSeek-V4's compressed sparse MLA (family deepseek_v4)
    attn_shapes: tuple[AttnShape, ...] = ()
    """Per attention layer kind, where the family gives kinds their own shape; empty: every attention layer has
    num_heads / num_kv_heads / head_dim (K and V alike)."""

    def attn_shape(self, mixer: Mixer) -> AttnShape:
        """The attention shape of layers whose mixer is ``mixer``."""
        for shape in self.attn_shapes:
            if shape.mixer == mixer:
                return shape
        return AttnShape(mixer=mixer, heads=self.num_heads, kv_heads=self.num_kv_heads, head_dim=self.head_dim,
                         v_head_dim=self.head_dim)

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def is_hybrid(self) -> bool:
        """vLLM's IsHybrid: attention plus linear-attention / SSM layers (hybrid KV cache manager, mamba pages)."""
        return self.state is not None and any(layer.has_state for layer in self.layers)

    @property
    def kv_layers(self) -> list[int]:
        return [layer.index for layer in self.layers if layer.has_kv and not layer.kv_shared]

    def rope_cache_bytes(self, start: int, end: int) -> int:
        """Bytes of the rotary caches one rank of the stage holding layers [start, end) allocates at load."""
        mixers = {layer.mixer for layer in self.layers[start:end]}
        return sum(c.nbytes for c in self.rope_caches if mixers.intersection(c.mixers))

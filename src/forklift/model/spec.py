"""ModelSpec: what the planner needs to know about a model, read from its config.json.

The shape (layers, heads, experts, attention kind) comes from config.json; the tensors and their stored
byte cost follow from the family's layout (``architectures.yaml``) and the quantization config
(``forklift.model.quant``). Nothing here touches weights or a GPU.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict

from forklift.errors import ModelError, UnknownArchitectureError
from forklift.model.quant import QuantScheme, scheme_from_config

AttentionKind = Literal["gqa", "mla"]
Split = Literal["col", "row", "kv", "vocab", "expert", "replicated"]
LayerAttention = Literal["full", "sliding"]
Role = Literal["attn", "indexer", "dense_mlp", "shared", "experts", "router", "norm", "embed", "lm_head", "mtp"]

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Tensor(Frozen):
    """One weight tensor (or a group of identical ones, ``count``) of the model."""

    module: str
    numel: int
    split: Split
    layer: int | None = None  # decoder layer index; None for embed / lm_head / final norm
    where: Literal["layer", "embed", "lm_head", "final"] = "layer"
    linear: bool = True
    role: Role = "attn"


class LayerSpec(Frozen):
    index: int
    attention: LayerAttention = "full"
    moe: bool = False
    indexer: bool = False


class MoESpec(Frozen):
    n_routed: int
    top_k: int
    n_shared: int
    intermediate: int
    first_k_dense: int = 0
    dense_layers: tuple[int, ...] = ()
    has_bias: bool = False


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
    tie_word_embeddings: bool
    dtype_bytes: int
    attention_bias: bool = False
    qk_norm: bool = False
    sliding_window: int | None = None
    layers: tuple[LayerSpec, ...]
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    indexer: IndexerSpec | None = None
    mtp_layers: int = 0
    quant: QuantScheme

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def is_hybrid(self) -> bool:
        kinds = {layer.attention for layer in self.layers}
        return len(kinds) > 1

    def tensors(self, *, include_mtp: bool = False) -> list[Tensor]:
        """Every weight tensor in vLLM's layout (fused projections counted as their parts)."""
        return list(_tensors(self, include_mtp))

    def param_count(self, *, include_mtp: bool = False) -> int:
        return sum(t.numel for t in self.tensors(include_mtp=include_mtp))


# ---------------------------------------------------------------------------------------------------
# Known architectures (data)


@cache
def _arch_data() -> dict[str, Any]:
    text = (resources.files("forklift.model") / "architectures.yaml").read_text()
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def known_architectures() -> list[str]:
    return sorted(_arch_data()["architectures"])


def family_of(architecture: str) -> str | None:
    fam = _arch_data()["architectures"].get(architecture)
    return str(fam) if fam is not None else None


# ---------------------------------------------------------------------------------------------------
# Parsing


def _need(cfg: Mapping[str, Any], key: str, source: str, arch: str) -> Any:
    if key not in cfg or cfg[key] is None:
        raise ModelError(
            f"{source}: config.json for {arch} lacks '{key}', which the planner needs",
            fix=f"Add \"{key}\" to config.json (copy it from the model's published config), "
            "or point model.config at a complete one.",
        )
    return cfg[key]


def _int(cfg: Mapping[str, Any], key: str, source: str, arch: str) -> int:
    value = _need(cfg, key, source, arch)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ModelError(f"{source}: '{key}' must be an integer, got {value!r}",
                         fix=f"Fix '{key}' in config.json.") from None


def _text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    inner = cfg.get("text_config")
    if isinstance(inner, Mapping) and "num_hidden_layers" in inner and "num_hidden_layers" not in cfg:
        merged = dict(inner)
        merged.setdefault("architectures", cfg.get("architectures"))
        merged.setdefault("quantization_config", cfg.get("quantization_config"))
        return merged
    return cfg


def from_config(raw: Mapping[str, Any], *, name: str = "model", source: str = "config.json") -> ModelSpec:
    """Build a ModelSpec from a parsed config.json."""
    cfg = _text_config(raw)
    archs = cfg.get("architectures") or []
    arch = str(archs[0]) if archs else str(cfg.get("model_type", "?"))
    family = family_of(arch)
    data = _arch_data()
    if family is None:
        shapes = ", ".join(sorted(data["families"]))
        raise UnknownArchitectureError(
            f"{source}: architecture '{arch}' is unknown to the planner "
            f"(known: {', '.join(known_architectures())})",
            fix=f"If it has the shape of a known family ({shapes}), add `{arch}: FAMILY` under `architectures:` in "
            "forklift/model/architectures.yaml; each family lists the config fields it needs "
            "(for a dense GQA model: hidden_size, num_hidden_layers, num_attention_heads, "
            "num_key_value_heads, head_dim, intermediate_size, vocab_size).",
        )
    fam = data["families"][family]
    missing = [k for k in fam["required"] if cfg.get(k) is None]
    if family in ("qwen_moe",) and cfg.get("num_experts") is None and cfg.get("num_local_experts") is None:
        missing.append("num_experts")
    if missing:
        raise ModelError(
            f"{source}: config.json for {arch} lacks {', '.join(repr(m) for m in missing)}, which the planner needs",
            fix="Add the missing fields (copy them from the model's published config.json), "
            "or point model.config at a bundled config (`forklift plan --list-configs`).",
        )
    def g(key: str) -> int:
        return _int(cfg, key, source, arch)

    hidden = g("hidden_size")
    n_layers = g("num_hidden_layers")
    heads = g("num_attention_heads")
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    dtype_name = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    dtype_bytes = _DTYPE_BYTES.get(dtype_name, 2)

    moe: MoESpec | None = None
    dense_layers: tuple[int, ...] = ()
    if family in ("glm4_moe", "deepseek_mla", "glm_dsa"):
        n_routed = cfg.get("n_routed_experts")
        if n_routed:
            first_k = int(cfg.get("first_k_dense_replace") or 0)
            freq = int(cfg.get("moe_layer_freq") or 1)
            dense_layers = tuple(i for i in range(n_layers) if i < first_k or (i - first_k) % freq != 0)
            moe = MoESpec(n_routed=int(n_routed), top_k=g("num_experts_per_tok"),
                          n_shared=int(cfg.get("n_shared_experts") or 0),
                          intermediate=g("moe_intermediate_size"), first_k_dense=first_k, dense_layers=dense_layers)
        else:
            dense_layers = tuple(range(n_layers))
    elif family == "qwen_moe":
        n_routed = int(cfg.get("num_experts") or cfg.get("num_local_experts") or 0)
        step = int(cfg.get("decoder_sparse_step") or 1)
        only = {int(x) for x in (cfg.get("mlp_only_layers") or [])}
        dense_layers = tuple(i for i in range(n_layers) if i in only or (i + 1) % step != 0)
        shared_inter = int(cfg.get("shared_expert_intermediate_size") or 0)
        inter = int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 0)
        moe = MoESpec(n_routed=n_routed, top_k=g("num_experts_per_tok"),
                      n_shared=(shared_inter // inter) if shared_inter and inter else 0,
                      intermediate=inter, dense_layers=dense_layers)
    elif family == "gpt_oss":
        n_routed = int(cfg.get("num_local_experts") or cfg.get("num_experts") or 0)
        moe = MoESpec(n_routed=n_routed, top_k=g("num_experts_per_tok"), n_shared=0,
                      intermediate=g("intermediate_size"), has_bias=True)
    else:
        dense_layers = tuple(range(n_layers))

    mla: MLASpec | None = None
    if fam["attention"] == "mla":
        q_lora = cfg.get("q_lora_rank")
        mla = MLASpec(q_lora_rank=int(q_lora) if q_lora else None, kv_lora_rank=g("kv_lora_rank"),
                      qk_nope_head_dim=g("qk_nope_head_dim"), qk_rope_head_dim=g("qk_rope_head_dim"),
                      v_head_dim=g("v_head_dim"))
        kv_heads = 1
        head_dim = mla.kv_lora_rank + mla.qk_rope_head_dim

    indexer: IndexerSpec | None = None
    if fam.get("indexer"):
        types = cfg.get("indexer_types")
        if isinstance(types, list) and len(types) == n_layers:
            owners = tuple(i for i, t in enumerate(types) if str(t) == "full")
        else:
            owners = tuple(range(n_layers))
        indexer = IndexerSpec(n_heads=g("index_n_heads"), head_dim=g("index_head_dim"), layers=owners)

    sliding = cfg.get("sliding_window")
    layer_types = cfg.get("layer_types")
    attn_kinds: list[LayerAttention] = ["full"] * n_layers
    if isinstance(layer_types, list) and len(layer_types) == n_layers and sliding:
        attn_kinds = ["sliding" if "sliding" in str(t) else "full" for t in layer_types]
    dense_set = set(dense_layers)
    owners_set = set(indexer.layers) if indexer else set()
    layers = tuple(
        LayerSpec(index=i, attention=attn_kinds[i], moe=moe is not None and i not in dense_set,
                  indexer=i in owners_set)
        for i in range(n_layers)
    )
    qk_norm = bool(cfg.get("use_qk_norm")) or family == "qwen_moe" or cfg.get("model_type") in ("qwen3",)
    return ModelSpec(
        name=name, architecture=arch, family=family, attention=fam["attention"], hidden_size=hidden,
        num_layers=n_layers, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        intermediate_size=int(cfg.get("intermediate_size") or 0), vocab_size=g("vocab_size"),
        max_position_embeddings=int(cfg.get("max_position_embeddings") or 2048),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)), dtype_bytes=dtype_bytes,
        attention_bias=bool(cfg.get("attention_bias", False)), qk_norm=qk_norm,
        sliding_window=int(sliding) if sliding and "sliding" in attn_kinds else None,
        layers=layers, moe=moe, mla=mla, indexer=indexer,
        mtp_layers=int(cfg.get("num_nextn_predict_layers") or 0),
        quant=scheme_from_config(cfg.get("quantization_config"), source=source),
    )


def load_config(path: Path) -> dict[str, Any]:
    """Read a config.json (a file or a directory holding one)."""
    file = path / "config.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        raise ModelError(f"{file} does not exist", fix="Point model.config or model.source at a config.json.") from None
    except json.JSONDecodeError as exc:
        raise ModelError(f"{file}: not valid JSON: {exc}", fix="Fix or replace the config.json.") from None
    if not isinstance(data, dict):
        raise ModelError(f"{file}: config.json must be a JSON object", fix="Replace the config.json.")
    return data


# ---------------------------------------------------------------------------------------------------
# Tensor layout per family


def _attn_tensors(s: ModelSpec, i: int, prefix: str) -> list[Tensor]:
    h = s.hidden_size
    out: list[Tensor] = []

    def t(mod: str, n: int, split: Split, linear: bool = True, role: Role = "attn") -> None:
        out.append(Tensor(module=f"{prefix}.self_attn.{mod}", numel=n, split=split, layer=i, linear=linear,
                          role=role))

    if s.mla is not None:
        m = s.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank:
            t("q_a_proj", h * m.q_lora_rank, "replicated")
            t("q_a_layernorm", m.q_lora_rank, "replicated", linear=False)
            t("q_b_proj", m.q_lora_rank * s.num_heads * qk, "col")
        else:
            t("q_proj", h * s.num_heads * qk, "col")
        t("kv_a_proj_with_mqa", h * (m.kv_lora_rank + m.qk_rope_head_dim), "replicated")
        t("kv_a_layernorm", m.kv_lora_rank, "replicated", linear=False)
        t("kv_b_proj", m.kv_lora_rank * s.num_heads * (m.qk_nope_head_dim + m.v_head_dim), "col")
        t("o_proj", s.num_heads * m.v_head_dim * h, "row")
        if s.indexer is not None and i in s.indexer.layers:
            ix = s.indexer
            q_in = m.q_lora_rank or h
            t("indexer.wq_b", q_in * ix.n_heads * ix.head_dim, "replicated", role="indexer")
            t("indexer.wk", h * ix.head_dim, "replicated", role="indexer")
            t("indexer.k_norm", 2 * ix.head_dim, "replicated", linear=False, role="indexer")
            t("indexer.weights_proj", h * ix.n_heads, "replicated", linear=False, role="indexer")
        return out
    d = s.head_dim
    t("q_proj", h * s.num_heads * d, "col")
    t("k_proj", h * s.num_kv_heads * d, "kv")
    t("v_proj", h * s.num_kv_heads * d, "kv")
    t("o_proj", s.num_heads * d * h, "row")
    if s.attention_bias:
        t("q_proj.bias", s.num_heads * d, "col", linear=False)
        t("kv_proj.bias", 2 * s.num_kv_heads * d, "kv", linear=False)
        if s.family == "gpt_oss":
            t("o_proj.bias", h, "replicated", linear=False)
    if s.qk_norm:
        t("qk_norm", 2 * d, "replicated", linear=False)
    if s.family == "gpt_oss":
        t("sinks", s.num_heads, "col", linear=False)
    return out


def _mlp_tensors(s: ModelSpec, layer: LayerSpec, prefix: str) -> list[Tensor]:
    h = s.hidden_size
    i = layer.index
    out: list[Tensor] = []
    if not layer.moe or s.moe is None:
        inter = s.intermediate_size
        out.append(Tensor(module=f"{prefix}.mlp.gate_up_proj", numel=2 * h * inter, split="col", layer=i,
                          role="dense_mlp"))
        out.append(Tensor(module=f"{prefix}.mlp.down_proj", numel=inter * h, split="row", layer=i, role="dense_mlp"))
        return out
    m = s.moe
    router = "router" if s.family == "gpt_oss" else "gate"
    out.append(Tensor(module=f"{prefix}.mlp.{router}", numel=m.n_routed * h, split="replicated", layer=i,
                      linear=False, role="router"))
    if s.family in ("glm4_moe", "deepseek_mla", "glm_dsa"):
        out.append(Tensor(module=f"{prefix}.mlp.gate.e_score_correction_bias", numel=m.n_routed,
                          split="replicated", layer=i, linear=False, role="router"))
    out.append(Tensor(module=f"{prefix}.mlp.experts", numel=m.n_routed * 3 * h * m.intermediate, split="expert",
                      layer=i, role="experts"))
    if m.has_bias:
        out.append(Tensor(module=f"{prefix}.mlp.experts.bias", numel=m.n_routed * (2 * m.intermediate + h),
                          split="expert", layer=i, linear=False, role="experts"))
    if m.n_shared:
        n = m.n_shared * m.intermediate
        out.append(Tensor(module=f"{prefix}.mlp.shared_experts.gate_up_proj", numel=2 * h * n, split="col", layer=i,
                          role="shared"))
        out.append(Tensor(module=f"{prefix}.mlp.shared_experts.down_proj", numel=n * h, split="row", layer=i,
                          role="shared"))
    return out


def _tensors(s: ModelSpec, include_mtp: bool) -> list[Tensor]:
    h = s.hidden_size
    out = [Tensor(module="model.embed_tokens", numel=s.vocab_size * h, split="vocab", where="embed",
                  linear=False, role="embed")]
    for layer in s.layers:
        prefix = f"model.layers.{layer.index}"
        out.append(Tensor(module=f"{prefix}.norms", numel=2 * h, split="replicated", layer=layer.index,
                          linear=False, role="norm"))
        out.extend(_attn_tensors(s, layer.index, prefix))
        out.extend(_mlp_tensors(s, layer, prefix))
    out.append(Tensor(module="model.norm", numel=h, split="replicated", where="final", linear=False, role="norm"))
    out.append(Tensor(module="lm_head", numel=s.vocab_size * h, split="vocab", where="lm_head", role="lm_head"))
    if include_mtp and s.mtp_layers:
        for k in range(s.mtp_layers):
            idx = s.num_layers + k
            prefix = f"model.layers.{idx}"
            mtp_layer = LayerSpec(index=idx, moe=s.moe is not None, indexer=False)
            extra = [Tensor(module=f"{prefix}.eh_proj", numel=2 * h * h, split="replicated", where="final",
                            role="mtp"),
                     Tensor(module=f"{prefix}.norms", numel=4 * h, split="replicated", where="final", linear=False,
                            role="mtp")]
            for tt in [*_attn_tensors(s, idx, prefix), *_mlp_tensors(s, mtp_layer, prefix), *extra]:
                out.append(tt.model_copy(update={"where": "final", "layer": None}))
    return out

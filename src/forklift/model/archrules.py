"""The family rules of ``architectures.yaml``, as small functions: which layers mix tokens how, which MLP each
layer has, the MLA / DSA indexer / linear-attention state shapes. ``build`` assembles a ModelSpec from them.

Every rule mirrors the vLLM model code cited in the YAML; an architecture without a family is an error that says
what the planner would need, never a guess from a look-alike family.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from importlib import resources
from typing import Any, NamedTuple

from forklift.errors import ModelError, UnknownArchitectureError
from forklift.model.attnshapes import SHAPE_RULES, check_unmodelled, layer_flags, per_layer_inputs
from forklift.model.configjson import Cfg, lookup, need_int
from forklift.model.csa import csa_rope_caches, csa_spec
from forklift.model.mlprules import MLP_RULES
from forklift.model.quant import scheme_from_config
from forklift.model.spec import (
    IndexerSpec,
    LayerPlan,
    LayerSpec,
    Mixer,
    MLASpec,
    Mlp,
    ModelSpec,
    RopeCache,
    StateSpec,
    VisionSpec,
)
from forklift.model.vision import vision_spec
from forklift.yamlio import load_data

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}


@cache
def data() -> dict[str, Any]:
    text = (resources.files("forklift.model") / "architectures.yaml").read_text()
    loaded: dict[str, Any] = load_data(text)
    return loaded


@cache
def _arch_index() -> dict[str, str]:
    return {arch: name for name, fam in data()["families"].items() for arch in fam["archs"]}


def known_architectures() -> list[str]:
    return sorted(_arch_index())


def family_of(architecture: str) -> str | None:
    return _arch_index().get(architecture)


# --------------------------------------------------------------------------------------------- config access


def text_config(cfg: Cfg) -> Cfg:
    """Multimodal wrappers keep the language model under ``text_config`` (vLLM's hf_text_config)."""
    inner = cfg.get("text_config")
    if isinstance(inner, Mapping) and "num_hidden_layers" not in cfg and (
            "num_hidden_layers" in inner or "hybrid_override_pattern" in inner):
        merged = dict(inner)
        for key in ("architectures", "quantization_config", "torch_dtype", "dtype"):
            merged.setdefault(key, cfg.get(key))
        return merged
    return cfg


def _int_or(cfg: Cfg, key: str | list[str], default: int) -> int:
    value = lookup(cfg, key)
    return int(value) if value is not None else default


# --------------------------------------------------------------------------------------------- family


def _hints(cfg: Cfg) -> str:
    """What the config itself shows about the layout, to make the unknown-architecture error precise."""
    seen = []
    types = cfg.get("layer_types")
    if isinstance(types, list):
        seen.append(f"layer_types {sorted({str(t) for t in types})}")
    for key, what in (("hybrid_override_pattern", "a hybrid layer pattern"),
                      ("linear_attn_config", "linear-attention layers"), ("kv_lora_rank", "MLA attention"),
                      ("index_topk", "a sparse-attention indexer"), ("sliding_window", "sliding-window attention"),
                      ("compress_ratios", "compressed attention")):
        if cfg.get(key) is not None:
            seen.append(f"{key} ({what})")
    return f"; its config shows {', '.join(seen)}" if seen else ""


def family_for(cfg: Cfg, source: str) -> tuple[str, str, dict[str, Any]]:
    """(architecture, family name, family entry), or the reason the planner cannot describe it."""
    archs = cfg.get("architectures") or []
    if isinstance(archs, str):  # a hand-written config: "LlamaForCausalLM" where transformers writes a list
        archs = [archs]
    arch = str(archs[0]) if archs else str(cfg.get("model_type", "?"))
    refused = data().get("refused", {})
    if arch in refused:
        raise UnknownArchitectureError(
            f"{source}: {arch} is served by vLLM, but the planner does not model it: {refused[arch]}",
            fix="Plan without memory figures (render and up still work), or start it once and read vLLM's own "
            "'Available KV cache memory' / 'GPU KV cache size' lines.")
    family = family_of(arch)
    if family is None:
        raise UnknownArchitectureError(
            f"{source}: architecture '{arch}' is unknown to the planner. To size it, the planner needs vLLM's rules "
            "for it: which layers hold a KV cache and of what kind (full, sliding window, MLA, indexer), which hold "
            f"a per-sequence linear-attention/SSM state and its shapes, and the MLP/expert layout{_hints(cfg)}",
            fix=f"Supported: {', '.join(known_architectures())}. A new architecture needs a family in "
            "forklift/model/architectures.yaml written from vLLM's model code; planning it as a look-alike family "
            "would give a confident wrong number.")
    return arch, family, data()["families"][family]


def check_required(cfg: Cfg, fam: dict[str, Any], ctx: tuple[str, str]) -> None:
    source, arch = ctx
    missing = [k for k in fam.get("required", []) if lookup(cfg, k) is None]
    if fam["mlp"]["rule"] == "qwen_moe" and lookup(cfg, ["num_experts", "num_local_experts"]) is None \
            and fam["layers"]["rule"] == "all":
        missing.append("num_experts")
    if missing:
        raise ModelError(
            f"{source}: config.json for {arch} lacks {', '.join(repr(m) for m in missing)}, which the planner needs",
            fix="Add the missing fields (copy them from the model's published config.json), "
            "or point model.config at a bundled config (`forklift plan --list-configs`).")


# --------------------------------------------------------------------------------------------- layer rules


def _layers_all(cfg: Cfg, n: int, rule: dict[str, Any], ctx: tuple[str, str]) -> LayerPlan:
    return [("attention", None)] * n


def _layers_alternate_sliding(cfg: Cfg, n: int, rule: dict[str, Any], ctx: tuple[str, str]) -> LayerPlan:
    # gpt_oss.py OAIAttention: sliding_window = config.sliding_window if layer_idx % 2 == 0 else None
    return [("sliding" if i % 2 == 0 else "attention", None) for i in range(n)]


def _layers_layer_types(cfg: Cfg, n: int, rule: dict[str, Any], ctx: tuple[str, str]) -> LayerPlan:
    values: dict[str, Mixer] = rule["values"]
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == n:
        unknown = sorted({str(t) for t in types} - set(values))
        if unknown:
            raise ModelError(f"{ctx[0]}: layer_types of {ctx[1]} has {unknown}, which the planner has no rule for",
                             fix=f"Known layer types for this family: {', '.join(values)}.")
        return [(values[str(t)], None) for t in types]
    interval = _int_or(cfg, rule["interval_key"], int(rule["interval_default"]))
    full, linear = (k for k in values)
    return [(values[full] if (i + 1) % interval == 0 else values[linear], None) for i in range(n)]


def _layers_window(cfg: Cfg, n: int, rule: dict[str, Any], ctx: tuple[str, str]) -> LayerPlan:
    """vLLM's two sources of a sliding window on Llama-style attention: a per-layer window where ``layer_types`` says
    sliding_attention (llama.py / olmo3.py / exaone4.py ``*Attention.__init__``: per_layer_sliding_window), else the
    model-level window: arg_utils.py create_engine_config sets CacheConfig.sliding_window to the config's
    sliding_window unless layer_types mixes kinds (transformers_utils/config.py is_interleaved), and Attention uses
    it for every layer without a per-layer window (attention.py Attention.__init__). ``interval``: the transformers
    config class's layer_types fill when config.json has none (none: the class has no layer_types)."""
    window = cfg.get("sliding_window")
    if not window:  # absent, null or 0 (config/model.py ModelConfig: 0 means disabled)
        return [("attention", None)] * n
    types = cfg.get("layer_types")
    if not (isinstance(types, list) and len(types) == n) and rule.get("interval_default") is not None:
        interval = lookup(cfg, rule["interval_key"]) if rule.get("interval_key") else None
        if interval is None:
            interval = rule["interval_default"]
        if not isinstance(interval, int) or interval < 1:
            raise ModelError(f"{ctx[0]}: {ctx[1]} has no layer_types and a sliding-window pattern {interval!r} the "
                             "planner does not expand", fix="Add the published config's layer_types to config.json.")
        types = ["full_attention" if (i + 1) % interval == 0 else "sliding_attention" for i in range(n)]
    if isinstance(types, list) and len(types) == n and len({str(t) for t in types}) > 1:
        return _layers_layer_types({**cfg, "layer_types": types}, n, rule, ctx)
    return [("sliding", None)] * n


def _layers_pattern(cfg: Cfg, n: int, rule: dict[str, Any], ctx: tuple[str, str]) -> LayerPlan:
    pattern = str(cfg.get(rule["key"]) or "")
    plan: LayerPlan = []
    for ch in pattern:
        kind = rule["values"].get(ch)
        if kind is None:
            raise ModelError(f"{ctx[0]}: {rule['key']} has '{ch}', which the planner has no rule for",
                             fix=f"Known: {', '.join(rule['values'])}.")
        if kind == "mlp_only":
            plan.append(("none", "dense"))
        elif kind == "moe_only":
            plan.append(("none", "moe"))
        else:
            plan.append((kind, "none"))
    return plan


def _layers_kda_list(cfg: Cfg, n: int, rule: dict[str, Any], ctx: tuple[str, str]) -> LayerPlan:
    kda = {int(i) for i in (lookup(cfg, "linear_attn_config.kda_layers") or [])}  # 1-indexed (kimi_linear.py)
    return [("kda" if i + 1 in kda else "attention", None) for i in range(n)]


def _layers_flag_list(cfg: Cfg, n: int, rule: dict[str, Any], ctx: tuple[str, str]) -> LayerPlan:
    """A per-layer list of flags (mimo_v2.py is_compressed_softmax_layer: hybrid_layer_pattern[i] == 1 is a
    sliding-window layer, 0 full attention)."""
    flags = cfg.get(rule["key"])
    if not (isinstance(flags, list) and len(flags) >= n):
        raise ModelError(f"{ctx[0]}: {ctx[1]} needs {rule['key']} with one entry per layer ({n})",
                         fix=f"Copy {rule['key']} from the model's published config.json.")
    values: dict[int, Mixer] = {int(k): v for k, v in rule["values"].items()}
    return [(values[int(flags[i])], None) for i in range(n)]


LAYER_RULES: dict[str, Callable[[Cfg, int, dict[str, Any], tuple[str, str]], LayerPlan]] = {
    "all": _layers_all, "alternate_sliding": _layers_alternate_sliding, "layer_types": _layers_layer_types,
    "pattern": _layers_pattern, "kda_list": _layers_kda_list, "window": _layers_window,
    "flag_list": _layers_flag_list,
}


def num_layers(cfg: Cfg, fam: dict[str, Any], ctx: tuple[str, str]) -> int:
    rule = fam["layers"]
    if rule["rule"] == "pattern" and cfg.get(rule["key"]):
        return len(str(cfg[rule["key"]]))  # nemotron_h: one decoder layer per pattern character
    return need_int(cfg, "num_hidden_layers", ctx)


# --------------------------------------------------------------------------------------------- assembly


def mla_spec(cfg: Cfg, ctx: tuple[str, str]) -> MLASpec:
    q_lora = cfg.get("q_lora_rank")
    return MLASpec(q_lora_rank=int(q_lora) if q_lora else None, kv_lora_rank=need_int(cfg, "kv_lora_rank", ctx),
                   qk_nope_head_dim=need_int(cfg, "qk_nope_head_dim", ctx),
                   qk_rope_head_dim=need_int(cfg, "qk_rope_head_dim", ctx), v_head_dim=need_int(cfg, "v_head_dim", ctx))


def indexer_owners(cfg: Cfg, n: int) -> tuple[int, ...]:
    """Layers that own a DSA indexer cache, as vLLM decides (deepseek_v2.py DeepseekV2MLAAttention.__init__ 0.26;
    deepseek_v32/attention.py 0.33): ``index_topk_pattern`` ('S' skips), else every ``index_topk_freq``-th layer
    counted from ``index_skip_topk_offset``. vLLM does not read ``indexer_types``."""
    pattern = cfg.get("index_topk_pattern")
    if isinstance(pattern, (list, str)) and len(pattern) >= n:
        return tuple(i for i in range(n) if str(pattern[i]) != "S")
    freq = _int_or(cfg, "index_topk_freq", 1)
    offset = _int_or(cfg, "index_skip_topk_offset", 2)
    return tuple(i for i in range(n) if max(i - offset + 1, 0) % freq == 0)


def state_spec(cfg: Cfg, fam: dict[str, Any], ctx: tuple[str, str]) -> StateSpec | None:
    st = fam.get("state")
    if not st:
        return None
    keys: dict[str, Any] = st["keys"]
    dims = {field: need_int(cfg, key, ctx) for field, key in keys.items()}
    for field, (key, default) in (st.get("optional") or {}).items():
        dims[field] = _int_or(cfg, key, int(default))
    ssm = cfg.get(st["ssm_dtype_key"]) if st.get("ssm_dtype_key") else None
    if ssm in (None, "auto"):
        ssm = st.get("ssm_dtype_default")
    return StateSpec(kind=st["kind"], ssm_dtype=str(ssm) if ssm else None, **dims)


_LAYER_TYPE = {"attention": "full_attention", "sliding": "sliding_attention"}


def _rope_config(cfg: Cfg) -> Any:
    """The config's rope parameters: transformers 5's rope_parameters, else the older rope_scaling (None if neither)."""
    return cfg.get("rope_parameters") or cfg.get("rope_scaling")


def _rope_kind(params: Mapping[str, Any]) -> str:
    """A rope entry's type, under either spelling (rope_type, or the older type); plain rope when it names none."""
    return str(params.get("rope_type") or params.get("type") or "default")


def _rope_params(cfg: Cfg, mixer: str, label: str) -> dict[str, Any]:
    """The rope parameters one layer kind passes to get_rope: a transformers-v5 per-layer-type entry of
    rope_parameters when present (gemma3.py Gemma3Attention.__init__), else plain rope for ``default`` (the
    sliding layers' local rope), else the config's rope_parameters / rope_scaling."""
    params = _rope_config(cfg) or {}
    if isinstance(params, Mapping) and isinstance(params.get(_LAYER_TYPE.get(mixer, "")), Mapping):
        return dict(params[_LAYER_TYPE[mixer]])
    if label == "default":
        return {"rope_type": "default"}
    return dict(params) if isinstance(params, Mapping) else {}


_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                 "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")


class MaxLen(NamedTuple):
    """vLLM's derived max_model_len, the key it names, the number as vLLM prints it, the default length, and the
    config's own model_max_length (an integer, else None), which vLLM also lets a request reach."""

    derived: int | None
    key: str | None
    text: str | None
    default: int | None
    model_max_length: int | None = None


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ModelError(f"config.json: {what} is {value!r}, not a number",
                         fix=f"Fix {what} in config.json (the published config has a number there).")
    return float(value)


def max_len_facts(cfg: Cfg) -> MaxLen:
    """vLLM's derived max_model_len of a (text) config (0.26 transformers_utils/model_arch_config_convertor.py
    derive_max_model_len_and_key: the smallest length key, the first in vLLM's order on ties, model_max_length
    winning when set; config/model.py _get_and_verify_max_len: the rope factor multiplies it, yarn from
    original_max_position_embeddings, except "su" / "longrope" / "llama3" and Gemma-3, whose length is already
    scaled; a null factor counts 1.0; with rope the number is a float in vLLM's message; with longrope and no
    max_model_len the default is original_max_position_embeddings). All None when the config names no length."""
    present = [(int(_number(cfg[k], k)), i, k) for i, k in enumerate(_MAX_LEN_KEYS) if cfg.get(k) is not None]
    mml = int(cfg["model_max_length"]) if isinstance(cfg.get("model_max_length"), int) else None
    if not present:
        return MaxLen(None, None, None, None, mml)
    derived, _, key = min(present)
    if cfg.get("model_max_length"):
        derived, key = int(_number(cfg["model_max_length"], "model_max_length")), "model_max_length"
    params = _rope_config(cfg) or {}  # transformers 5 fills a default
    if not isinstance(params, Mapping) or "gemma3" in str(cfg.get("model_type") or ""):
        return MaxLen(derived, key, str(derived), derived, mml)
    nested = params and not any(k in params for k in ("rope_type", "type", "factor", "rope_theta"))
    entries = [rp for rp in (params.values() if nested else [params]) if isinstance(rp, Mapping)]
    factor: float | None = 1.0
    length = float(derived)
    for rp in entries:
        kind = _rope_kind(rp)
        if kind in ("su", "longrope", "llama3"):
            continue
        if "factor" in rp:
            factor = None if rp["factor"] is None else _number(rp["factor"], "rope factor")
        if kind == "yarn":
            length = _number(rp.get("original_max_position_embeddings"), "yarn original_max_position_embeddings")
    scaled = length * (1.0 if factor is None else factor)
    default = int(scaled)
    if any(_rope_kind(rp) == "longrope" for rp in entries):
        default = int(_number(cfg.get("original_max_position_embeddings", scaled), "original_max_position_embeddings"))
    return MaxLen(int(scaled), key, str(scaled), default, mml)


def derived_max_len(cfg: Cfg) -> tuple[int | None, str | None]:
    """vLLM's derived max_model_len and the key it names (``max_len_facts``)."""
    facts = max_len_facts(cfg)
    return facts.derived, facts.key


def _rope_rows(params: Mapping[str, Any], max_position: int) -> int:
    """Positions in the cos/sin cache get_rope builds (rotary_embedding/__init__.py get_rope @0.26.0): plain and
    llama3 rope max_position; linear max_position x factor (LinearScalingRotaryEmbedding._compute_cos_sin_cache);
    yarn original_max_position_embeddings x factor (get_rope passes the original length,
    YaRNScalingRotaryEmbedding._compute_cos_sin_cache multiplies); plain rope with ``mrope_section`` is
    MRotaryEmbedding, whose cache holds 4 x max_position (mrope.py MRotaryEmbedding.__init__
    cache_max_position_num). Other kinds: 0 (not modelled)."""
    kind = _rope_kind(params)
    if kind == "default" and params.get("mrope_section"):
        return 4 * max_position
    if kind in ("default", "llama3"):
        return max_position
    if kind == "linear":
        raw = params.get("factor")
        factors = raw if isinstance(raw, list) else [raw]
        return sum(int(max_position * _number(f, "linear rope factor")) for f in factors)
    if kind == "yarn":
        return int(_number(params.get("original_max_position_embeddings"), "yarn original_max_position_embeddings")
                   * _number(params.get("factor"), "yarn rope factor"))
    return 0


def rope_caches(cfg: Cfg, fam: Mapping[str, Any], plan: LayerPlan, head_dim: int,
                dtype_bytes: int) -> tuple[RopeCache, ...]:
    """The rotary caches of a family whose entry has ``rope_cache`` (architectures.yaml): per mixer kind, the
    rope its attention builds; kinds with the same parameters share one cache (get_rope's _ROPE_DICT)."""
    spec = fam.get("rope_cache")
    if not spec:
        return ()
    nbytes = 4 if spec.get("dtype") == "float32" else dtype_bytes
    max_position = _int_or(cfg, "max_position_embeddings", 2048)
    present = {mixer for mixer, _ in plan}
    caches: dict[str, tuple[list[Any], int, int]] = {}
    for mixer, label in spec.items():
        if mixer == "dtype" or mixer not in present:
            continue
        params = _rope_params(cfg, mixer, str(label))
        factor = float(params.get("partial_rotary_factor") or cfg.get("partial_rotary_factor") or 1.0)
        width = int(params.get("rope_dim") or int(head_dim * factor))
        key = f"{label}:{sorted(params.items())}"
        mixers = caches.get(key, ([], 0, 0))[0]
        caches[key] = ([*mixers, mixer], _rope_rows(params, max_position), width)
    return tuple(RopeCache(mixers=tuple(m), rows=rows, width=width, dtype_bytes=nbytes)
                 for m, rows, width in caches.values() if rows)


def _layers(plan: LayerPlan, mlps: list[Mlp], owners: set[int],
            flags: tuple[set[int], set[int]] = (set(), set())) -> tuple[LayerSpec, ...]:
    shared, wide = flags
    return tuple(LayerSpec(index=i, mixer=mixer, mlp=fixed if fixed is not None else mlps[i], indexer=i in owners,
                           kv_shared=i in shared, wide_mlp=i in wide)
                 for i, (mixer, fixed) in enumerate(plan))


def build(raw: Cfg, *, name: str, source: str) -> ModelSpec:
    """A ModelSpec from a parsed config.json, through the family's rules."""
    cfg = text_config(raw)
    arch, family, fam = family_for(cfg, source)
    if (_vision_arch(fam, arch) or _text_only(fam, arch)) and "tie_word_embeddings" not in cfg and \
            "tie_word_embeddings" in raw:
        cfg = {**cfg, "tie_word_embeddings": raw["tie_word_embeddings"]}  # assumption: the wrapper's flag
    if fam.get("defaults"):  # the transformers config class's field defaults, which vLLM sees for absent keys
        cfg = {**fam["defaults"], **{k: v for k, v in cfg.items() if v is not None}}
    ctx = (source, arch)
    check_required(cfg, fam, ctx)
    check_unmodelled(cfg, fam, ctx)
    if _text_only(fam, arch, cfg):
        check_unmodelled(cfg, fam["text_only"], ctx)
    n = num_layers(cfg, fam, ctx)
    plan = LAYER_RULES[fam["layers"]["rule"]](cfg, n, fam["layers"], ctx)
    moe, mlps = MLP_RULES[fam["mlp"]["rule"]](cfg, n, plan, ctx)
    csa = csa_spec(cfg, n, ctx) if fam.get("csa") else None  # DeepSeek-V4: its own latent, no kv_lora_rank
    mla = mla_spec(cfg, ctx) if fam["attention"] == "mla" and csa is None else None
    heads = need_int(cfg, "num_attention_heads", ctx)
    hidden = need_int(cfg, "hidden_size", ctx)
    owners = indexer_owners(cfg, n) if fam.get("indexer") else ()
    indexer = IndexerSpec(n_heads=need_int(cfg, "index_n_heads", ctx), head_dim=need_int(cfg, "index_head_dim", ctx),
                          layers=owners, topk=_int_or(cfg, "index_topk", 2048)) if fam.get("indexer") else None
    attn = fam.get("attn", {})
    sliding = cfg.get(fam.get("window_key", "sliding_window")) if any(m == "sliding" for m, _ in plan) else None
    shapes = SHAPE_RULES[fam["attn_shapes"]](cfg, ctx) if fam.get("attn_shapes") else ()
    full = next((sh for sh in shapes if sh.mixer == "attention"), None)  # the model-level heads: full layers'
    norms = int(fam.get("norms", 2)) + (int(fam.get("moe_norms", 0)) if moe is not None else 0)
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    ssm_vllm_min = (fam.get("vllm_min") or {}).get(arch)
    head_dim = (mla.kv_lora_rank + mla.qk_rope_head_dim) if mla else int(cfg.get("head_dim") or hidden // heads)
    head_dim = full.head_dim if full is not None else head_dim
    max_len = max_len_facts(cfg)
    mtp = {**_MTP_DEFAULT, **fam.get("mtp", {})}
    return ModelSpec(
        name=name, architecture=arch, family=family, attention=fam["attention"], hidden_size=hidden, num_layers=n,
        num_heads=heads, num_kv_heads=1 if mla else full.kv_heads if full is not None else int(
            cfg.get("num_key_value_heads") or heads),
        head_dim=head_dim, intermediate_size=_dense_intermediate(cfg), vocab_size=need_int(cfg, "vocab_size", ctx),
        max_position_embeddings=_int_or(cfg, "max_position_embeddings", 2048),
        derived_max_len=max_len.derived, max_len_key=max_len.key, derived_max_len_text=max_len.text,
        default_max_len=max_len.default, model_max_length=max_len.model_max_length,
        tie_word_embeddings=fam.get("tie") == "always" or (
            fam.get("tie") != "never" and bool(cfg.get("tie_word_embeddings", False))),
        dtype_bytes=_DTYPE_BYTES.get(dtype, 2), layer_norms=norms, attn_shapes=shapes, **per_layer_inputs(cfg, fam),
        attention_bias=bool(attn.get("qkv_bias")) or bool(cfg.get(attn.get("bias_key", "attention_bias"), False)),
        qk_norm=bool(attn.get("qk_norm")) or bool(cfg.get("use_qk_norm")) or cfg.get("model_type") == "qwen3",
        gated_q=bool(attn.get("gated_q")), sliding_window=int(sliding) if sliding else None,
        layers=_layers(plan, mlps, set(owners), layer_flags(cfg, fam, n)), moe=moe, mla=mla, indexer=indexer, csa=csa,
        state=state_spec(cfg, fam, ctx),
        supports_mamba_prefix_caching=bool(fam.get("supports_mamba_prefix_caching")), vllm_min=ssm_vllm_min,
        mtp_layers=_int_or(cfg, str(mtp["key"]), 0), mtp_proj_split=mtp["proj_split"], mtp_norms=int(mtp["norms"]),
        vision=_vision(raw, fam, arch, hidden, source),
        text_only=_text_only(fam, arch, cfg),
        rope_caches=csa_rope_caches(cfg, csa, ctx) if csa is not None else rope_caches(
            cfg, fam, plan, head_dim, _DTYPE_BYTES.get(dtype, 2)),
        quant=scheme_from_config(cfg.get("quantization_config"), source=source, hf=cfg),
    )


# DeepSeek-style MTP blocks (deepseek_mtp.py DeepSeekMultiTokenPredictorLayer: enorm, hnorm, eh_proj replicated,
# shared_head.norm); a family's `mtp` entry in architectures.yaml overrides these
_MTP_DEFAULT: dict[str, Any] = {"key": "num_nextn_predict_layers", "proj_split": "replicated", "norms": 4}


def _vision_arch(fam: dict[str, Any], arch: str) -> bool:
    return bool(fam.get("vision")) and arch in fam["vision"]["archs"]


def _text_only(fam: dict[str, Any], arch: str, cfg: Cfg | None = None) -> tuple[str, ...]:
    """The modalities that must be off for ``arch`` to plan as its language model (architectures.yaml
    ``text_only``); () when the architecture has no unshaped tower, or (``when``: a config key) when that key is
    0 / absent in ``cfg`` (DeepSeek-V4: vision_n_layers 0 builds no tower)."""
    entry = fam.get("text_only") or {}
    if arch not in entry.get("archs", ()):
        return ()
    if entry.get("when") and cfg is not None and not cfg.get(entry["when"]):
        return ()
    return tuple(entry.get("modalities", ()))


def _vision(raw: Cfg, fam: dict[str, Any], arch: str, text_hidden: int, source: str) -> VisionSpec | None:
    """The wrapper's vision tower, for the architectures the family lists under ``vision.archs``."""
    if not _vision_arch(fam, arch):
        return None
    vis = fam["vision"]
    return vision_spec(vis["tower"], raw, text_hidden, source)


def _dense_intermediate(cfg: Cfg) -> int:
    inter = cfg.get("intermediate_size")
    if isinstance(inter, list):  # nemotron_h may list one per MLP layer
        inter = inter[0] if inter else 0
    return int(inter or 0)


def from_config(raw: Mapping[str, Any], *, name: str = "model", source: str = "config.json") -> ModelSpec:
    """Build a ModelSpec from a parsed config.json (the family's rules in architectures.yaml)."""
    return build(raw, name=name, source=source)

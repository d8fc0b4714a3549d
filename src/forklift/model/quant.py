"""A checkpoint's ``quantization_config`` as vLLM maps it to a method: the stored format of the linear layers, which
modules stay in the model dtype (matched the way that method matches: substring for AWQ, exact or ``re:`` regex for
compressed-tensors, exact / substring / wildcard for ModelOpt, exact for fp8, ``-:`` regex for GPTQ dynamic, ...),
and the parameters the kernels and start rules need (bits, group, zero points, act-order, blocks).

The per-method knowledge is data: ``quant_layouts.yaml`` (methods, with the vLLM file and function each row was read
from) and ``quant_formats.yaml`` (bytes per parameter of the fixed formats). This module reads a config with the row
of its method; only configs that are a structure (compressed-tensors config groups, ModelOpt's quant_algo, AutoRound's
data types, bitsandbytes' flags) have a reader of their own. What a kernel keeps per GPU family is
forklift.plan.quant_layout's (it needs the hardware).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping
from functools import cache
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from forklift.errors import ModelError
from forklift.yamlio import load_data

Match = Literal["none", "exact", "substring", "modelopt", "ct", "fp8", "gptq", "bnb"]
_SHARDS = {"gate_up_proj": ("gate_proj", "up_proj"), "qkv_proj": ("q_proj", "k_proj", "v_proj")}


@cache
def format_bytes() -> dict[str, float]:
    """Bytes per parameter of the named weight formats (data: quant_formats.yaml)."""
    text = (resources.files("forklift.model") / "quant_formats.yaml").read_text()
    return {str(k): float(v) for k, v in load_data(text).items()}


@cache
def layouts() -> dict[str, Any]:
    """The method and kernel rows (data: quant_layouts.yaml)."""
    data: dict[str, Any] = load_data((resources.files("forklift.model") / "quant_layouts.yaml").read_text())
    return data


@cache
def _method_of_checkpoint() -> dict[str, str]:
    """config.json quant_method -> vLLM's method name (each row's ``checkpoint`` list)."""
    return {str(alias): name for name, row in layouts()["methods"].items() for alias in row["checkpoint"]}


def _names(module: str) -> list[str]:
    """The checkpoint names a module stands for (vLLM checks each shard of a fused projection)."""
    head, _, proj = module.rpartition(".")
    return [f"{head}.{s}" for s in _SHARDS[proj]] if proj in _SHARDS else [module]


def _regex(entry: str, name: str) -> bool:
    try:
        return re.match(entry, name) is not None
    except re.error:
        return False


def _skip_exact(name: str, entries: tuple[str, ...]) -> bool:
    return all(n in entries for n in _names(name))


def _skip_substring(name: str, entries: tuple[str, ...]) -> bool:
    return all(any(e in n for e in entries) for n in _names(name))


def _skip_modelopt(name: str, entries: tuple[str, ...]) -> bool:
    return _skip_exact(name, entries) or any(e in name or fnmatch.fnmatchcase(name, e) for e in entries)


def _skip_ct(name: str, entries: tuple[str, ...]) -> bool:
    def one(n: str) -> bool:
        return any(_regex(e[3:], n) if e.startswith("re:") else e == n for e in entries)

    return all(one(n) for n in _names(name))


def _skip_fp8(name: str, entries: tuple[str, ...]) -> bool:
    if "experts" in name:  # is_layer_skipped: an experts prefix is skipped when it is a substring of an entry
        return any(name in e for e in entries if "experts" in e)
    return _skip_exact(name, entries)


def _skip_gptq(name: str, entries: tuple[str, ...]) -> bool:
    """``entries``: the dynamic ``-:REGEX`` keys (leave unquantized), plus ``+only:X`` for
    modules_in_block_to_quantize (a layer is quantized only when an entry is a substring of its name)."""
    only = [e[len("+only:"):] for e in entries if e.startswith("+only:")]
    # gptq_utils.is_layer_gptq_quantized: a fused projection (qkv_proj, gate_up_proj) is quantized when each of its
    # checkpoint shards (q_proj, k_proj, ...) has an entry as a substring
    if only and "layers." in name and not all(any(o in n for o in only) for n in _names(name)):
        return True
    return any(_regex(e[2:], name) for e in entries if e.startswith("-:"))


def _skip_bnb(name: str, entries: tuple[str, ...]) -> bool:
    """bitsandbytes.py is_layer_skipped_bnb: an entry equal to one dotted component of the (fused) name, or to one
    of its leading prefixes."""
    parts = name.split(".")
    prefixes = {".".join(parts[: i + 1]) for i in range(len(parts))}
    return any(e in parts or e in prefixes for e in entries)


_MATCHERS: dict[Match, Callable[[str, tuple[str, ...]], bool]] = {
    "none": lambda name, entries: False, "exact": _skip_exact, "substring": _skip_substring,
    "modelopt": _skip_modelopt, "ct": _skip_ct, "fp8": _skip_fp8, "gptq": _skip_gptq, "bnb": _skip_bnb,
}


class QuantScheme(BaseModel):
    """Which format linear weights are stored in, and which modules stay in the model dtype."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str = "none"
    """vLLM's method name (auto_awq, auto_gptq, inc, compressed-tensors, modelopt, modelopt_fp4, fp8, mxfp4, ...)."""
    linear_format: str = "bf16"
    linear_bytes: float = 2.0
    """Bytes per parameter of a quantized linear layer as the checkpoint stores it (the kernel's own layout, which
    depends on the GPU: forklift.plan.quant_layout)."""
    exclude: tuple[str, ...] = ()
    match: Match = "none"
    experts_only: bool = False
    expert_bytes: float | None = None
    """Bytes per parameter of routed experts when they differ from the other linear layers."""
    expert_format: str | None = Field(default=None, exclude=True)
    """The routed experts' format name when ``expert_bytes`` is set by a mixed fp8 checkpoint (mxfp4)."""
    weight_block: tuple[int, int] | None = None
    """Block-FP8 ``weight_block_size`` [block_n, block_k] (fp8, ModelOpt FP8_PB_WO, compressed-tensors block)."""
    lm_head: bool = True
    """Whether the method quantizes lm_head. vLLM's ParallelLMHead is a VocabParallelEmbedding, not a LinearBase:
    fp8 (fp8.py Fp8Config.get_quant_method) and compressed-tensors (compressed_tensors.py get_quant_method) quantize
    LinearBase layers only; auto_awq / auto_gptq take lm_head only with ``lm_head: true`` (auto_awq.py
    AutoAWQConfig.get_quant_method, gptq_utils.py get_linear_quant_method). Other methods: their exclude lists."""
    layers_from_checkpoint: bool = False
    """vLLM learns which layers are quantized from the checkpoint's safetensors headers (auto_gptq without
    ``modules_in_block_to_quantize``: AutoGPTQConfig.maybe_update_config keeps the layers whose stored dtype is not
    a float); a dummy load has no headers, so every layer stays unquantized (``loaded_scheme``)."""
    kv_cache_dtype: str | None = None
    """The KV dtype the checkpoint declares (ModelOpt kv_cache_quant_algo, compressed-tensors kv_cache_scheme):
    vLLM's ``--kv-cache-dtype auto`` resolves to it (utils/torch_utils.py resolve_kv_cache_dtype_string)."""
    # What the kernels and start rules read (quant_layouts.yaml); kept out of dumps so model fingerprints (stored
    # calibrations and probes) stay what they were.
    layout: str = Field(default="none", exclude=True)
    """The stored layout family: a key of quant_layouts.yaml ``kernels`` (wna16, fp8, fp8_block, int8, nvfp4, mxfp4,
    mxfp8, bnb4, bnb8) or none."""
    bits: int = Field(default=16, exclude=True)
    group: int = Field(default=0, exclude=True)
    """Integer layouts: the group size along K (-1: one group per output channel)."""
    zero_point: bool = Field(default=False, exclude=True)
    act_order: bool = Field(default=False, exclude=True)
    loaded_zeros: bool = Field(default=False, exclude=True)
    loaded_g_idx: bool = Field(default=False, exclude=True)
    act_order_scales_full: bool = Field(default=False, exclude=True)
    params: tuple[tuple[str, str], ...] = Field(default=(), exclude=True)
    """Config values the start rules check (sym, data_type, ...), as read."""
    rules: tuple[str, ...] = Field(default=(), exclude=True)
    """The start rules of this method (quant_layouts.yaml start_rules)."""

    def excluded(self, module: str) -> bool:
        return _MATCHERS[self.match](module, self.exclude)

    def quantized(self, module: str, *, linear: bool, role: str) -> bool:
        """Whether vLLM quantizes this tensor (False: it stays in the model dtype)."""
        if not linear or self.method == "none":
            return False
        if self.experts_only and role != "experts":
            return False
        if role == "lm_head" and not self.lm_head:
            return False
        return not self.excluded(module)

    def bytes_for(self, module: str, *, linear: bool, role: str, base_bytes: float) -> float:
        if not self.quantized(module, linear=linear, role=role):
            return base_bytes
        if role == "experts" and self.expert_bytes is not None:
            return self.expert_bytes
        return self.linear_bytes

    def format_for(self, module: str, *, linear: bool, role: str, base: str) -> str:
        """The format name of one tensor (display and roofline)."""
        if self.bytes_for(module, linear=linear, role=role, base_bytes=-1.0) == -1.0:
            return base
        if role == "experts" and self.expert_format is not None:
            return self.expert_format
        return self.linear_format

    def param(self, key: str, default: str = "") -> str:
        return dict(self.params).get(key, default)


def _patterns(values: Any) -> tuple[str, ...]:
    if isinstance(values, str):
        return (values,)
    if not isinstance(values, list):
        return ()
    return tuple(str(v) for v in values)


def int_bytes(bits: int, group: int, *, zeros: bool, scale_bytes: int = 2) -> float:
    """Packed integer weights with one scale (and a packed zero point when asymmetric) per group."""
    g = float(group) if group and group > 0 else 4096.0  # per-channel: one scale per output row (~free)
    return bits / 8 + scale_bytes / g + (bits / 8 / g if zeros else 0.0)


def _first(qc: Mapping[str, Any], keys: list[str], default: Any = None) -> Any:
    """The first of ``keys`` the config sets (vLLM's QuantizationConfig.get_from_keys_or; an empty list counts as
    unset, as fp8.py Fp8Config.from_config falls back from ignored_layers to modules_to_not_convert), else
    ``default``."""
    for key in keys:
        value = qc.get(key)
        if value is not None and value != [] and value != {}:
            return value
    return default


def _read_keys(row: Mapping[str, Any], qc: Mapping[str, Any]) -> dict[str, Any]:
    """The row's keys from the config, with its defaults."""
    defaults = row.get("defaults") or {}
    return {name: _first(qc, list(keys), defaults.get(name)) for name, keys in (row.get("keys") or {}).items()}


# --------------------------------------------------------------------------------------------- readers
# Each returns the scheme's fields from a config. ``keys`` serves every method whose config is flat; the others read
# a structure.


def _wna16(p: dict[str, Any], *, zero_point: bool) -> dict[str, Any]:
    bits, group = int(p.get("bits") or 4), int(p.get("group") or 128)
    return {"layout": "wna16", "bits": bits, "group": group, "zero_point": zero_point,
            "linear_format": f"int{bits}_g{group}", "linear_bytes": int_bytes(bits, group, zeros=zero_point)}


def _reader_keys(row: Mapping[str, Any], qc: Mapping[str, Any]) -> dict[str, Any]:
    p = _read_keys(row, qc)
    out: dict[str, Any] = {"exclude": _patterns(p.get("exclude"))}
    if "lm_head" in p:
        out["lm_head"] = bool(p["lm_head"])
    layout = str(row["layout"])
    if layout == "wna16":
        sym = p.get("sym")
        zero = bool(p["zero_point"]) if "zero_point" in p else not bool(sym if sym is not None else True)
        out |= _wna16(p, zero_point=zero)
        out["params"] = {"sym": str(sym if sym is not None else not zero).lower(), "bits": str(out["bits"]),
                         "group": str(out["group"])}
        # AutoGPTQConfig.__init__: act-order with one group per channel is no act-order
        out["act_order"] = bool(p.get("act_order")) and out["group"] != -1
    elif layout == "fp8":
        block = p.get("block")
        pair = (int(block[0]), int(block[1])) if isinstance(block, list) and len(block) == 2 else None
        fmt = "fp8_block" if block else "fp8"
        out |= {"layout": fmt, "linear_format": fmt, "linear_bytes": format_bytes()[fmt], "weight_block": pair}
    else:
        out |= {"layout": layout, "linear_format": layout, "linear_bytes": format_bytes()[layout]}
    return out


def _reader_gptq_lists(row: Mapping[str, Any], qc: Mapping[str, Any], out: dict[str, Any]) -> None:
    """GPTQ's ``dynamic`` negative keys and ``modules_in_block_to_quantize`` as matcher entries."""
    dynamic = qc.get("dynamic") or {}
    entries = [str(k) for k in dynamic if str(k).startswith("-:")] if isinstance(dynamic, Mapping) else []
    blocks = qc.get("modules_in_block_to_quantize")
    if isinstance(blocks, list):
        flat = [str(m) for b in blocks for m in (b if isinstance(b, list) else [b])]
        entries += [f"+only:{m}" for m in flat]
    out["exclude"] = tuple(entries)
    out["layers_from_checkpoint"] = not isinstance(blocks, list) or not blocks


def _reader_auto_round(row: Mapping[str, Any], qc: Mapping[str, Any]) -> dict[str, Any]:
    """vLLM's INC method (auto-round): int packing (auto_gptq / auto_awq), mx_fp or fp data types; layers with
    bits >= 16 in extra_config stay unquantized (inc/config_parser.py INCConfigParser._resolve_raw)."""
    p = _read_keys(row, qc)
    bits = int(p.get("bits") or 4)
    dtype = str(p.get("data_type") or "int")
    out: dict[str, Any] = {"params": {"data_type": dtype, "bits": str(bits), "packing": str(p.get("packing"))}}
    if dtype.startswith(("mx_fp", "mxfp")):
        out |= {"layout": "mxfp4" if bits == 4 else "mxfp8", "linear_format": f"mxfp{bits}",
                "linear_bytes": bits / 8 + 1 / 32}
    elif dtype.startswith("fp") and bits == 8:
        out |= {"layout": "fp8", "linear_format": "fp8", "linear_bytes": 1.0}
    else:
        out |= _wna16(p, zero_point=not bool(p.get("sym", True)))
    extra = qc.get("extra_config") or {}
    keep = [k for k, v in extra.items() if isinstance(v, Mapping) and int(v.get("bits") or bits) >= 16]
    out["exclude"] = tuple(f"re:{k}" if any(c in k for c in "*[]()?+\\") else k for k in keep)
    return out


def _ct_group(weights: Mapping[str, Any], fmt_name: str) -> dict[str, Any]:
    """One compressed-tensors config group's weights (compressed_tensors.py _get_scheme_from_parts)."""
    bits = int(weights.get("num_bits") or 16)
    kind = str(weights.get("type", "int"))
    group = int(weights.get("group_size") or 0)
    if bits == 4 and kind == "float":
        fmt = "mxfp4" if "mxfp4" in fmt_name or group == 32 else "nvfp4"
        return {"layout": fmt, "linear_format": fmt, "linear_bytes": format_bytes()[fmt]}
    if bits == 8:
        fmt = "fp8" if kind == "float" else "int8"
        block = weights.get("block_structure")
        out: dict[str, Any] = {"layout": fmt, "linear_format": fmt,
                               "linear_bytes": 1.0 + (2.0 / group if group else 0.0)}
        if fmt == "fp8" and str(weights.get("strategy")) == "block" and isinstance(block, list) and len(block) == 2:
            out |= {"layout": "fp8_block", "weight_block": (int(block[0]), int(block[1]))}
        elif group and kind == "int":  # W8A16 groups: the wNa16 scheme
            out |= {"layout": "wna16", "bits": 8, "group": group}
        return out
    if bits >= 16:
        return {"layout": "none", "linear_format": "bf16", "linear_bytes": 2.0}
    zero = not weights.get("symmetric", True)
    return {"layout": "wna16", "bits": bits, "group": group or -1, "zero_point": zero,
            "act_order": str(weights.get("actorder") or "") == "group",
            "linear_format": f"int{bits}_g{group or 'ch'}", "linear_bytes": int_bytes(bits, group, zeros=zero)}


def _reader_compressed_tensors(row: Mapping[str, Any], qc: Mapping[str, Any]) -> dict[str, Any]:
    """compressed-tensors: the config group targeting Linear sets the linear format; one targeting experts (a
    regex naming mlp.experts) sets the experts' format; ``ignore`` is exact names or ``re:`` regexes."""
    groups = qc.get("config_groups") or {}
    linear: dict[str, Any] = {"layout": "none", "linear_format": "bf16", "linear_bytes": 2.0}
    experts: dict[str, Any] | None = None
    for group in groups.values() if isinstance(groups, Mapping) else []:
        found = _ct_group(group.get("weights") or {}, str(group.get("format") or qc.get("format") or ""))
        targets = " ".join(str(t) for t in group.get("targets") or ["Linear"])
        if "experts" in targets and "Linear" not in targets:
            experts = found
        else:
            linear = found
    kv = qc.get("kv_cache_scheme")
    out = dict(linear)
    if experts is not None:
        out["expert_bytes"] = experts["linear_bytes"]
    out["exclude"] = _patterns(qc.get("ignore"))
    out["kv_cache_dtype"] = "fp8" if isinstance(kv, Mapping) and int(kv.get("num_bits") or 0) == 8 else None
    return out


def _reader_modelopt(row: Mapping[str, Any], qc: Mapping[str, Any]) -> dict[str, Any]:
    """modelopt / modelopt_fp4 / modelopt_mxfp8: quant_algo (quant_layouts.yaml modelopt_algos); exclude_modules or
    ignore; kv_cache_quant_algo."""
    algo = str(qc.get("quant_algo", "")).upper()
    hit = next(a for a in layouts()["modelopt_algos"] if str(a["contains"]) in algo)
    fmt = str(hit["layout"])
    kv = str(qc.get("kv_cache_quant_algo") or "").upper()
    block = hit.get("block")
    return {"method": str(hit["method"]), "layout": fmt, "linear_format": fmt, "linear_bytes": format_bytes()[fmt],
            "params": {"block_check": str(hit["block_check"])} if hit.get("block_check") else {},
            "exclude": _patterns(qc.get("exclude_modules") or qc.get("ignore")),
            "weight_block": (int(block[0]), int(block[1])) if block else None,
            "kv_cache_dtype": "fp8" if kv == "FP8" else ("nvfp4" if "FP4" in kv else None)}


def _reader_bitsandbytes(row: Mapping[str, Any], qc: Mapping[str, Any]) -> dict[str, Any]:
    """load_in_4bit (nf4 / fp4, with or without double quantization) or load_in_8bit."""
    p = _read_keys(row, qc)
    if qc.get("load_in_4bit"):
        fmt = "nf4_double" if qc.get("bnb_4bit_use_double_quant") else "nf4"
        return {"layout": "bnb4", "linear_format": "nf4", "linear_bytes": format_bytes()[fmt],
                "exclude": _patterns(p.get("exclude"))}
    return {"layout": "bnb8", "linear_format": "int8", "linear_bytes": 1.0, "exclude": _patterns(p.get("exclude"))}


_READERS: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, Any]]] = {
    "keys": _reader_keys, "auto_round": _reader_auto_round, "compressed_tensors": _reader_compressed_tensors,
    "modelopt": _reader_modelopt, "bitsandbytes": _reader_bitsandbytes,
}


_MODULE_LISTS: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any], dict[str, Any]], None]] = {
    "gptq": _reader_gptq_lists,
}


def _scheme_from_row(name: str, row: Mapping[str, Any], qc: Mapping[str, Any]) -> QuantScheme:
    fields = _READERS[str(row["reader"])](row, qc)
    if row.get("module_lists"):
        _MODULE_LISTS[str(row["module_lists"])](row, qc, fields)
    loaded = row.get("loaded") or {}
    params = fields.pop("params", {})
    fields.setdefault("method", name)
    lm_head = row.get("lm_head", "unless_excluded")
    if lm_head == "never":
        fields["lm_head"] = False
    elif lm_head == "unless_excluded":
        fields["lm_head"] = True
    return QuantScheme(
        match=row["match"], experts_only=bool(row.get("experts_only", False)),
        loaded_zeros=bool(loaded.get("zeros", False)), loaded_g_idx=bool(loaded.get("g_idx", False)),
        act_order_scales_full=bool(row.get("act_order_scales_full", False)),
        params=tuple(sorted((str(k), str(v)) for k, v in params.items())),
        rules=tuple(str(r) for r in row.get("start_rules") or ()), **fields)


def scheme_from_config(qc: Mapping[str, Any] | None, *, source: str = "config.json",
                       hf: Mapping[str, Any] | None = None) -> QuantScheme:
    """Interpret a config.json ``quantization_config`` (None: unquantized); ``hf`` is the rest of the config
    (model_type and expert_dtype pick DeepSeek-V4's method)."""
    if not qc:
        return QuantScheme()
    method = str(qc.get("quant_method", "")).lower()
    name = _method_of_checkpoint().get(method)
    if name is None:
        why = {"intel/auto-round": "vLLM's INC override accepts only quant_method 'auto-round' (inc/inc.py)",
               "gguf": "vLLM 0.26 and 0.33 have no GGUF loader", "exl2": "vLLM has no EXL2 method",
               "exl3": "vLLM has no EXL3 method"}.get(method, "no vLLM quantization method by that name is modelled")
        raise ModelError(
            f"{source}: quantization method '{method or '?'}' is unknown to the planner: {why}",
            fix="Known: " + ", ".join(sorted(_method_of_checkpoint())) + ". A checkpoint vLLM cannot load cannot be "
            "planned either; for a method vLLM has, add its row to forklift/model/quant_layouts.yaml (and its bytes "
            "per parameter to quant_formats.yaml).")
    if name == "fp8" and (qc.get("store_dtype") is not None or (hf or {}).get("model_type") == "deepseek_v4"
                          or method == "deepseek_v4_fp8"):
        return _fp8_mixed(_scheme_from_row(name, layouts()["methods"][name], qc), qc, hf or {}, source)
    return _scheme_from_row(name, layouts()["methods"][name], qc)


def _fp8_mixed(base: QuantScheme, qc: Mapping[str, Any], hf: Mapping[str, Any], source: str) -> QuantScheme:
    """fp8 checkpoints whose routed experts are stored in another format (vLLM 0.32.0, paths under vllm/):

    - DeepSeek-V4 (models/deepseek_v4/quant_config.py DeepseekV4FP8Config: override_quantization_method turns
      quant_method fp8 / deepseek_v4_fp8 with model_type deepseek_v4 into deepseek_v4_fp8). get_quant_method: routed
      experts (RoutedExperts) by the config's top-level ``expert_dtype`` (default fp4): fp4 -> Mxfp4MoEMethod
      (layers/quantization/mxfp4.py create_weights: uint8 values 2 per byte, one uint8 e8m0 scale per 32), unless
      quantization_config.moe_quant_algo is NVFP4 (ModelOptNvFp4FusedMoE, not modelled); fp8 -> Fp8MoEMethod
      (block fp32 scales). Everything else through Fp8Config.get_quant_method: LinearBase -> Fp8LinearMethod, whose
      create_weights registers weight (e4m3) and a weight_scale_inv per 128 x 128 block in float8_e8m0fnu when
      ``is_scale_e8m0`` (expert_dtype fp4) else float32. Layers built with quant_config=None stay in the model dtype
      (compressor.py fused_wkv_wgate, attention.py DeepseekV4Indexer.weights_proj, cpu/model.py GateLinear), as do
      the non-linear parameters (hc_*, ape, attn_sink: fp32) and lm_head (a ParallelLMHead).
    - fp8 with ``store_dtype: mxfp4`` (MiMo-V2's published checkpoints; layers/quantization/fp8.py
      Fp8Config.get_quant_method: RoutedExperts -> Mxfp4MoEMethod, from 0.26.0): linears as plain fp8 (fp32 scales),
      ignored_layers matched exactly.

    Mxfp4MoEMethod.maybe_roundup_sizes pads hidden / intermediate-per-partition to the backend's tile
    (fused_moe/oracle/mxfp4.py mxfp4_round_up_hidden_size_and_intermediate_size: at most 256 / 128 on CUDA, 32 on
    the CPU backend); the planner counts unpadded experts: exact when hidden is a multiple of 256 and the
    intermediate per partition of 128 (DeepSeek-V4-Flash: 4096 and 2048 / TP at TP 1-8), an under-count of the
    padding otherwise (not checked)."""
    store = qc.get("store_dtype")
    if (hf.get("model_type") == "deepseek_v4" or qc.get("quant_method") == "deepseek_v4_fp8") and store is None:
        experts = str(hf.get("expert_dtype") or "fp4")
        if experts not in ("fp4", "fp8"):
            raise ModelError(f"{source}: expert_dtype '{experts}': vLLM's DeepseekV4FP8Config takes fp4 or fp8 "
                             "(models/deepseek_v4/quant_config.py expert_dtype raises ValueError)",
                             fix="Use the published config.json's expert_dtype.")
        if experts == "fp4" and str(qc.get("moe_quant_algo") or "").upper() == "NVFP4":
            raise ModelError(f"{source}: deepseek_v4_fp8 with moe_quant_algo NVFP4: vLLM loads the experts with "
                             "ModelOptNvFp4FusedMoE (models/deepseek_v4/quant_config.py get_quant_method), whose "
                             "per-expert global scales the planner does not model",
                             fix="Plan the MXFP4 checkpoint, or start it once with `forklift probe`.")
        linear = "fp8_block_e8m0" if experts == "fp4" else "fp8_block"
        if base.weight_block is None:
            linear = "fp8"
        expert = "mxfp4" if experts == "fp4" else linear
        return base.model_copy(update={
            "method": "deepseek_v4_fp8", "linear_format": linear, "linear_bytes": format_bytes()[linear],
            "expert_bytes": format_bytes()[expert], "expert_format": expert})
    if store != "mxfp4":
        raise ModelError(
            f"{source}: quantization_config quant_method 'fp8' with store_dtype '{store}': vLLM 0.32.0's "
            "Fp8Config.get_quant_method (layers/quantization/fp8.py) reads only store_dtype 'mxfp4' "
            "(-> Mxfp4MoEMethod for the routed experts); the planner models that one",
            fix="Check the checkpoint's quantization_config; plan without memory figures otherwise.")
    return base.model_copy(update={"expert_bytes": format_bytes()["mxfp4"], "expert_format": "mxfp4"})


def online_scheme(quantization: str | None, current: QuantScheme) -> QuantScheme:
    """A recipe's ``serve.quantization`` applied to an unquantized checkpoint (vLLM quantizes at load)."""
    if quantization is None or current.method != "none":
        return current
    if quantization == "fp8":
        # vLLM's online fp8 quantizes every linear layer but keeps embeddings and lm_head
        return QuantScheme(method="fp8-online", linear_format="fp8", linear_bytes=1.0, exclude=("lm_head",),
                           match="exact", layout="fp8")
    return current


def loaded_scheme(scheme: QuantScheme, *, dummy: bool) -> QuantScheme:
    """The scheme vLLM applies for a load format: with ``--load-format dummy`` a method that reads its quantized
    layers from the checkpoint's headers finds none (transformers_utils/config.py get_safetensors_params_metadata
    returns {} for a folder without safetensors) and leaves every linear layer unquantized."""
    if not (dummy and scheme.layers_from_checkpoint):
        return scheme
    return scheme.model_copy(update={"exclude": (*scheme.exclude, "-:.*")})

"""Stored bytes per parameter, as vLLM maps a checkpoint's ``quantization_config`` to a method (config/model.py
``_verify_quantization`` and each method's ``override_quantization_method``), and which modules each method
leaves unquantized, matched the way that method matches (substring for AWQ, exact or ``re:`` regex for
compressed-tensors, exact / substring / wildcard for ModelOpt, exact for fp8, ``-:`` regex for GPTQ dynamic, ...).

Sources: vLLM 0.26.0 ``model_executor/layers/quantization/`` (utils/quant_utils.py is_layer_skipped,
compressed_tensors/utils.py should_ignore_layer, modelopt.py is_layer_excluded, utils/gptq_utils.py
get_dynamic_override, inc/inc.py override_quantization_method); bytes per format: research notes
kv-and-arch-spec.md section 8.2.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping
from functools import cache
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from forklift.errors import ModelError
from forklift.yamlio import load_data

Match = Literal["none", "exact", "substring", "modelopt", "ct", "fp8", "gptq"]
_SHARDS = {"gate_up_proj": ("gate_proj", "up_proj"), "qkv_proj": ("q_proj", "k_proj", "v_proj")}


@cache
def format_bytes() -> dict[str, float]:
    """Bytes per parameter of the named weight formats (data: quant_formats.yaml)."""
    text = (resources.files("forklift.model") / "quant_formats.yaml").read_text()
    return {str(k): float(v) for k, v in load_data(text).items()}


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


_MATCHERS: dict[Match, Callable[[str, tuple[str, ...]], bool]] = {
    "none": lambda name, entries: False, "exact": _skip_exact, "substring": _skip_substring,
    "modelopt": _skip_modelopt, "ct": _skip_ct, "fp8": _skip_fp8, "gptq": _skip_gptq,
}


class QuantScheme(BaseModel):
    """Which format linear weights are stored in, and which modules stay in the model dtype."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str = "none"
    """vLLM's method name (auto_awq, auto_gptq, inc, compressed-tensors, modelopt, modelopt_fp4, fp8, mxfp4, ...)."""
    linear_format: str = "bf16"
    linear_bytes: float = 2.0
    exclude: tuple[str, ...] = ()
    match: Match = "none"
    experts_only: bool = False
    expert_bytes: float | None = None
    """Bytes per parameter of routed experts when they differ from the other linear layers."""
    weight_block: tuple[int, int] | None = None
    """Block-FP8 ``weight_block_size`` [block_n, block_k] (fp8 method), None for other formats."""
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

    def excluded(self, module: str) -> bool:
        return _MATCHERS[self.match](module, self.exclude)

    def bytes_for(self, module: str, *, linear: bool, role: str, base_bytes: float) -> float:
        if not linear or self.method == "none":
            return base_bytes
        if self.experts_only and role != "experts":
            return base_bytes
        if role == "lm_head" and not self.lm_head:
            return base_bytes
        if self.excluded(module):
            return base_bytes
        if role == "experts" and self.expert_bytes is not None:
            return self.expert_bytes
        return self.linear_bytes

    def format_for(self, module: str, *, linear: bool, role: str, base: str) -> str:
        """The format name of one tensor (display and roofline)."""
        if self.bytes_for(module, linear=linear, role=role, base_bytes=-1.0) == -1.0:
            return base
        return self.linear_format


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


def _scheme(method: str, fmt: str, nbytes: float, exclude: tuple[str, ...], match: Match, **kw: Any) -> QuantScheme:
    return QuantScheme(method=method, linear_format=fmt, linear_bytes=nbytes, exclude=exclude, match=match, **kw)


# --------------------------------------------------------------------------------------------- methods


def _modelopt(qc: Mapping[str, Any]) -> QuantScheme:
    """modelopt / modelopt_fp4 / modelopt_mxfp8: quant_algo FP8*, NVFP4, MXFP8; exclude_modules or ignore."""
    algo = str(qc.get("quant_algo", "")).upper()
    fmt = "nvfp4" if "FP4" in algo else "mxfp8" if "MXFP8" in algo else "fp8"
    method = {"nvfp4": "modelopt_fp4", "mxfp8": "modelopt_mxfp8"}.get(fmt, "modelopt")
    kv = str(qc.get("kv_cache_quant_algo") or "").upper()
    return _scheme(method, fmt, format_bytes()[fmt], _patterns(qc.get("exclude_modules") or qc.get("ignore")),
                   "modelopt", kv_cache_dtype="fp8" if kv == "FP8" else ("nvfp4" if "FP4" in kv else None))


def _fp8(qc: Mapping[str, Any]) -> QuantScheme:
    block = qc.get("weight_block_size")
    fmt = "fp8_block" if block else "fp8"
    pair = (int(block[0]), int(block[1])) if isinstance(block, list) and len(block) == 2 else None
    return _scheme("fp8", fmt, format_bytes()[fmt],
                   _patterns(qc.get("ignored_layers") or qc.get("modules_to_not_convert")), "fp8", weight_block=pair,
                   lm_head=False)


def _mxfp4(qc: Mapping[str, Any]) -> QuantScheme:
    # Mxfp4Config.get_quant_method: every LinearBase stays unquantized; only the routed experts are MXFP4
    return _scheme("mxfp4", "mxfp4", format_bytes()["mxfp4"], _patterns(qc.get("modules_to_not_convert")), "none",
                   experts_only=True)


def _awq(qc: Mapping[str, Any]) -> QuantScheme:
    bits = int(qc.get("bits") or qc.get("w_bit") or 4)
    group = int(qc.get("group_size") or qc.get("q_group_size") or 128)
    return _scheme("auto_awq", f"int{bits}_g{group}", int_bytes(bits, group, zeros=True),
                   _patterns(qc.get("modules_to_not_convert")), "substring", lm_head=bool(qc.get("lm_head", False)))


def _gptq(qc: Mapping[str, Any]) -> QuantScheme:
    bits = int(qc.get("bits") or 4)
    group = int(qc.get("group_size") or 128)
    dynamic = qc.get("dynamic") or {}
    entries = [str(k) for k in dynamic if str(k).startswith("-:")] if isinstance(dynamic, Mapping) else []
    blocks = qc.get("modules_in_block_to_quantize")
    if isinstance(blocks, list):
        flat = [str(m) for b in blocks for m in (b if isinstance(b, list) else [b])]
        entries += [f"+only:{m}" for m in flat]
    return _scheme("auto_gptq", f"int{bits}_g{group}", int_bytes(bits, group, zeros=not qc.get("sym", True)),
                   tuple(entries), "gptq", lm_head=bool(qc.get("lm_head", False)),
                   layers_from_checkpoint=not isinstance(blocks, list) or not blocks)


def _auto_round(qc: Mapping[str, Any]) -> QuantScheme:
    """vLLM's INC method (auto-round): int packing (auto_gptq / auto_awq), mx_fp or fp data types; layers with
    bits >= 16 in extra_config stay unquantized (inc/config_parser.py INCConfigParser._resolve_raw)."""
    bits = int(qc.get("bits") or 4)
    group = int(qc.get("group_size") or 128)
    dtype = str(qc.get("data_type") or "int")
    if dtype.startswith(("mx_fp", "mxfp")):
        fmt, nbytes = f"mxfp{bits}", bits / 8 + 1 / 32
    elif dtype.startswith("fp") and bits == 8:
        fmt, nbytes = "fp8", 1.0
    else:
        fmt, nbytes = f"int{bits}_g{group}", int_bytes(bits, group, zeros=not qc.get("sym", True))
    extra = qc.get("extra_config") or {}
    keep = [k for k, v in extra.items() if isinstance(v, Mapping) and int(v.get("bits") or bits) >= 16]
    regexes = tuple(f"re:{k}" if any(c in k for c in "*[]()?+\\") else k for k in keep)
    return _scheme("inc", fmt, nbytes, regexes, "ct")


def _ct_group_bytes(weights: Mapping[str, Any], fmt_name: str) -> tuple[str, float]:
    bits = int(weights.get("num_bits") or 16)
    kind = str(weights.get("type", "int"))
    group = int(weights.get("group_size") or 0)
    if bits == 4 and kind == "float":
        fmt = "mxfp4" if "mxfp4" in fmt_name or group == 32 else "nvfp4"
        return fmt, format_bytes()[fmt]
    if bits == 8:
        return ("fp8" if kind == "float" else "int8"), 1.0 + (2.0 / group if group else 0.0)
    if bits >= 16:
        return "bf16", 2.0
    return f"int{bits}_g{group or 'ch'}", int_bytes(bits, group, zeros=not weights.get("symmetric", True))


def _compressed_tensors(qc: Mapping[str, Any]) -> QuantScheme:
    """compressed-tensors: the config group targeting Linear sets the linear format; one targeting experts (a
    regex naming mlp.experts) sets the experts' format; ``ignore`` is exact names or ``re:`` regexes."""
    groups = qc.get("config_groups") or {}
    linear: tuple[str, float] = ("bf16", 2.0)
    experts: tuple[str, float] | None = None
    for group in groups.values() if isinstance(groups, Mapping) else []:
        found = _ct_group_bytes(group.get("weights") or {}, str(group.get("format") or qc.get("format") or ""))
        targets = " ".join(str(t) for t in group.get("targets") or ["Linear"])
        if "experts" in targets and "Linear" not in targets:
            experts = found
        else:
            linear = found
    kv = qc.get("kv_cache_scheme")
    return _scheme("compressed-tensors", linear[0], linear[1], _patterns(qc.get("ignore")), "ct",
                   expert_bytes=experts[1] if experts else None, lm_head=False,
                   kv_cache_dtype="fp8" if isinstance(kv, Mapping) and int(kv.get("num_bits") or 0) == 8 else None)


def _bitsandbytes(qc: Mapping[str, Any]) -> QuantScheme:
    four = bool(qc.get("load_in_4bit"))
    return _scheme("bitsandbytes", "nf4" if four else "int8", 0.5625 if four else 1.0,
                   _patterns(qc.get("llm_int8_skip_modules")), "substring")


_METHODS: dict[str, Callable[[Mapping[str, Any]], QuantScheme]] = {
    "modelopt": _modelopt, "modelopt_fp4": _modelopt, "modelopt_mxfp8": _modelopt, "mxfp8": _modelopt,
    "fp8": _fp8, "mxfp4": _mxfp4, "awq": _awq, "awq_marlin": _awq, "auto_awq": _awq, "gptq": _gptq,
    "gptq_marlin": _gptq, "auto_gptq": _gptq, "auto-round": _auto_round, "compressed-tensors": _compressed_tensors,
    "compressed_tensors": _compressed_tensors, "bitsandbytes": _bitsandbytes,
}


def scheme_from_config(qc: Mapping[str, Any] | None, *, source: str = "config.json") -> QuantScheme:
    """Interpret a config.json ``quantization_config`` (None: unquantized)."""
    if not qc:
        return QuantScheme()
    method = str(qc.get("quant_method", "")).lower()
    parse = _METHODS.get(method)
    if parse is None:
        why = {"intel/auto-round": "vLLM's INC override accepts only quant_method 'auto-round' (inc/inc.py)",
               "gguf": "vLLM 0.26 and 0.33 have no GGUF loader", "exl2": "vLLM has no EXL2 method",
               "exl3": "vLLM has no EXL3 method"}.get(method, "no vLLM quantization method by that name is modelled")
        raise ModelError(
            f"{source}: quantization method '{method or '?'}' is unknown to the planner: {why}",
            fix="Known: " + ", ".join(sorted(_METHODS)) + ". A checkpoint vLLM cannot load cannot be planned either; "
            "for a method vLLM has, add its bytes per parameter and ignore-list rule to forklift.model.quant.")
    return parse(qc)


def online_scheme(quantization: str | None, current: QuantScheme) -> QuantScheme:
    """A recipe's ``serve.quantization`` applied to an unquantized checkpoint (vLLM quantizes at load)."""
    if quantization is None or current.method != "none":
        return current
    if quantization == "fp8":
        # vLLM's online fp8 quantizes every linear layer but keeps embeddings and lm_head
        return _scheme("fp8-online", "fp8", 1.0, ("lm_head",), "exact")
    return current


def loaded_scheme(scheme: QuantScheme, *, dummy: bool) -> QuantScheme:
    """The scheme vLLM applies for a load format: with ``--load-format dummy`` a method that reads its quantized
    layers from the checkpoint's headers finds none (transformers_utils/config.py get_safetensors_params_metadata
    returns {} for a folder without safetensors) and leaves every linear layer unquantized."""
    if not (dummy and scheme.layers_from_checkpoint):
        return scheme
    return scheme.model_copy(update={"exclude": (*scheme.exclude, "-:.*")})

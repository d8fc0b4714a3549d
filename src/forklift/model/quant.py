"""Stored bytes per parameter: the checkpoint's quantization config, honouring what it keeps unquantized."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

from forklift.errors import ModelError


@cache
def format_bytes() -> dict[str, float]:
    """Bytes per parameter of each weight format (data: quant_formats.yaml)."""
    text = (resources.files("forklift.model") / "quant_formats.yaml").read_text()
    return {str(k): float(v) for k, v in yaml.safe_load(text).items()}


class QuantScheme(BaseModel):
    """Which format linear weights are stored in, and which modules stay in the model dtype."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str = "none"
    linear_format: str = "bf16"
    exclude: tuple[str, ...] = ()
    # only these modules are quantized when set (e.g. MXFP4 experts-only checkpoints)
    experts_only: bool = False

    def format_for(self, module: str, *, linear: bool, role: str, base: str) -> str:
        if not linear or self.linear_format == base:
            return base
        if self.experts_only and role != "experts":
            return base
        for pat in self.exclude:
            if fnmatch.fnmatchcase(module, pat) or fnmatch.fnmatchcase(module, pat + ".*") or module == pat:
                return base
        return self.linear_format


def _patterns(values: Any) -> tuple[str, ...]:
    if not isinstance(values, list):
        return ()
    return tuple(str(v) for v in values)


def scheme_from_config(qc: Mapping[str, Any] | None, *, source: str = "config.json") -> QuantScheme:
    """Interpret a config.json ``quantization_config`` (None: unquantized)."""
    if not qc:
        return QuantScheme()
    method = str(qc.get("quant_method", "")).lower()
    if method in ("modelopt", "modelopt_fp4"):
        algo = str(qc.get("quant_algo", "")).upper()
        fmt = "nvfp4" if "FP4" in algo else "fp8"
        return QuantScheme(method=method, linear_format=fmt, exclude=_patterns(qc.get("exclude_modules")))
    if method == "fp8":
        fmt = "fp8_block" if qc.get("weight_block_size") else "fp8"
        return QuantScheme(method=method, linear_format=fmt,
                           exclude=_patterns(qc.get("modules_to_not_convert") or qc.get("ignored_layers")))
    if method == "mxfp4":
        return QuantScheme(method=method, linear_format="mxfp4",
                           exclude=_patterns(qc.get("modules_to_not_convert")), experts_only=True)
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = int(qc.get("bits") or qc.get("w_bit") or 4)
        fmt = "int4_g128" if bits == 4 else "int8"
        return QuantScheme(method=method, linear_format=fmt,
                           exclude=_patterns(qc.get("modules_to_not_convert")))
    if method == "compressed-tensors":
        groups = qc.get("config_groups") or {}
        fmt = "bf16"
        for group in groups.values() if isinstance(groups, Mapping) else []:
            weights = group.get("weights") or {}
            bits = int(weights.get("num_bits") or 16)
            gsize = weights.get("group_size")
            wtype = str(weights.get("type", "int"))
            if bits == 4 and wtype == "float":
                fmt = "nvfp4"
            elif bits == 4:
                fmt = "int4_g128" if gsize else "int4_g128"
            elif bits == 8:
                fmt = "fp8" if wtype == "float" else "int8"
        return QuantScheme(method=method, linear_format=fmt, exclude=_patterns(qc.get("ignore")))
    raise ModelError(
        f"{source}: quantization method '{method}' is unknown to the planner",
        fix="Known: modelopt (NVFP4/FP8), fp8, mxfp4, awq, gptq, compressed-tensors; "
        "add its bytes per parameter to forklift/model/quant_formats.yaml and a case in forklift.model.quant.",
    )


def online_scheme(quantization: str | None, current: QuantScheme) -> QuantScheme:
    """A recipe's ``serve.quantization`` applied to an unquantized checkpoint (vLLM quantizes at load)."""
    if quantization is None or current.method != "none":
        return current
    if quantization == "fp8":
        # vLLM's online fp8 quantizes every linear layer but keeps embeddings and lm_head
        return QuantScheme(method="fp8-online", linear_format="fp8", exclude=("lm_head",))
    return current

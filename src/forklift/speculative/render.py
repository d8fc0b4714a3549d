"""``--speculative-config``: the recipe's typed config as the JSON vLLM parses (``json.loads`` then
``SpeculativeConfig(**dict)``), keys under vLLM's names, ``method`` first, nulls left to vLLM."""

from __future__ import annotations

import json
from typing import Any

from forklift.recipe.speculative import SpeculativeConfig

FLAG = "--speculative-config"


def config_dict(spec: SpeculativeConfig) -> dict[str, Any]:
    """The keys forklift sends: ``method``, ``num_speculative_tokens``, every non-null knob, then ``extra``."""
    body = spec.model_dump(exclude_none=True, exclude={"extra", "method"})
    out: dict[str, Any] = {"method": spec.method, "num_speculative_tokens": body.pop("num_speculative_tokens")}
    out.update(body)
    if out.get("num_speculative_tokens_per_batch_size") is not None:
        out["num_speculative_tokens_per_batch_size"] = [list(t) for t in out["num_speculative_tokens_per_batch_size"]]
    out.update(spec.extra)
    return out


def config_json(spec: SpeculativeConfig) -> str:
    """Compact JSON for the flag's value."""
    return json.dumps(config_dict(spec), separators=(",", ":"))


def flags(spec: SpeculativeConfig | None) -> list[str]:
    """``[--speculative-config, JSON]``, or nothing without speculative decoding."""
    return [] if spec is None else [FLAG, config_json(spec)]

"""Advice computed from a finding's numbers, and the optional hook into the planner.

``kv_advice`` needs only the numbers vLLM printed. ``planner_numbers`` asks ``forklift.plan.make``
for its view of the same recipe when that module provides it, and says why not when it does not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from forklift.errors import ForkliftError


def _num(facts: Mapping[str, str], key: str) -> float | None:
    try:
        return float(facts[key].replace(",", ""))
    except (KeyError, ValueError):
        return None


def kv_advice(facts: Mapping[str, str], serve: Mapping[str, Any] | None = None) -> list[str]:
    """Changes that make the KV pool fit, cheapest first, from the numbers in the message.

    ``serve`` is the recipe's ``serve`` section when known (so options already taken are skipped).
    """
    serve = serve or {}
    needed = _num(facts, "needed_gib")
    available = _num(facts, "available_gib")
    max_len = _num(facts, "max_seq_len")
    est = _num(facts, "estimated_max_len")
    kv_tokens = _num(facts, "kv_tokens")
    if est is None and kv_tokens is not None:
        est = kv_tokens
    if est is None and needed and available is not None and max_len:
        est = max_len * available / needed
    out: list[str] = []
    if est is not None and est >= 1024:
        fit = int(est) // 1024 * 1024
        out.append(f"serve.max_model_len: {fit} (--max-model-len {fit}) fits the KV pool as it is"
                   + (f"; you asked for {int(max_len)}" if max_len else ""))
    if needed is not None and available is not None:
        short = needed - available
        if serve.get("kv_cache_dtype", "auto") in ("auto", "bfloat16", "float16"):
            half = needed / 2
            verdict = "fits" if half <= available else f"still {half - available:.2f} GiB short"
            out.append(f"serve.kv_cache_dtype: fp8 (--kv-cache-dtype fp8) halves the need to {half:.2f} GiB: "
                       f"{verdict} (check the checkpoint ships k/v scales)")
        out.append("serve.max_num_batched_tokens: 8192 and serve.max_num_seqs: 8 shrink the profiler's "
                   "activation peak (the seed freed ~9 GiB this way)")
        util = serve.get("gpu_memory_utilization")
        util_text = f" from {util}" if util else ""
        out.append(f"serve.gpu_memory_utilization: raise{util_text} by {short:.2f} GiB / total memory "
                   "(on unified-memory hosts leave room for the OS)")
    elif not out:
        out.append("serve.max_model_len: lower it, or serve.gpu_memory_utilization: raise it, "
                   "or serve.kv_cache_dtype: fp8")
    if not serve.get("enforce_eager"):
        out.append("serve.enforce_eager: true frees the CUDA-graph memory, at some decode speed")
    return out


@dataclasses.dataclass(frozen=True)
class PlannerView:
    """What the planner says about a recipe, or why it could not say anything."""

    available: bool
    numbers: dict[str, Any]
    reason: str | None = None


_KEYS = ("kv", "max_model_len", "gpu_memory_utilization", "weights", "activation", "fits", "tokens")


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(data, Mapping):
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}{k}."))
    elif isinstance(data, (list, tuple)) and data and all(isinstance(x, Mapping) for x in data):
        for i, v in enumerate(data):
            out.update(_flatten(v, f"{prefix}{i}."))
    elif isinstance(data, (int, float, str, bool)) or data is None:
        out[prefix.rstrip(".")] = data
    return out


def _as_data(plan: Any) -> Any:
    if hasattr(plan, "model_dump"):
        return plan.model_dump()
    if dataclasses.is_dataclass(plan) and not isinstance(plan, type):
        return dataclasses.asdict(plan)
    return getattr(plan, "__dict__", {})


def planner_numbers(recipe: Any, make: Callable[[Any], Any]) -> PlannerView:
    """``make(recipe)`` (the caller passes ``forklift.plan.make``: doctor sits below the planner and never imports
    it); keep its KV-related numbers.

    Degrades to ``available=False`` with a reason when the planner refuses the recipe or fails, so a diagnosis
    never fails because of it.
    """
    try:
        plan = make(recipe)
    except ForkliftError as exc:
        return PlannerView(False, {}, f"the planner refused the recipe: {exc.message}")
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        return PlannerView(False, {}, f"the planner failed: {type(exc).__name__}: {exc}")
    flat = _flatten(_as_data(plan))
    picked = {k: v for k, v in flat.items() if any(key in k.lower() for key in _KEYS)}
    return PlannerView(True, dict(list(picked.items())[:16]))

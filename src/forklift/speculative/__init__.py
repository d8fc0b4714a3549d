"""Speculative decoding: everything forklift knows about vLLM's ``--speculative-config``, in one place.

* ``render``: the recipe's typed ``serve.speculative`` (``forklift.recipe.speculative``) as the flag's JSON.
* ``versions`` / ``rules``: which methods and keys each vLLM release has, and the layout rules (method x PP / TP /
  DCP x backend x platform), as data with their sources; ``check`` runs them, raising for errors.
* ``sizing``: draft weights and KV per rank, the batch budget with drafts, the roofline at a stated acceptance.
* ``metrics``: acceptance length, per-position acceptance, tokens per step from vLLM's counters.
* ``workload``: repetitive prompts where lookup drafting pays.

Layer: beside ``model`` and ``patches``; imports recipe, hardware, errors, results only. ``plan``, ``launch``,
``cluster``, ``check`` and ``bench`` call it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from forklift.errors import HardwareError
from forklift.hardware.profiles import get as hardware_profile
from forklift.recipe.schema import Recipe
from forklift.speculative import sizing
from forklift.speculative.shape import ModelShape

if TYPE_CHECKING:
    from forklift.speculative import metrics, render, versions, workload
    from forklift.speculative.rules import Finding


def __getattr__(name: str) -> Any:
    """The submodules other than ``sizing`` load when first used: ``metrics`` (prometheus_client), ``workload``,
    and ``render`` / ``versions`` / ``rules``, which a recipe without ``serve.speculative`` never needs."""
    if name in ("metrics", "render", "rules", "versions", "workload"):
        return importlib.import_module(f"forklift.speculative.{name}")
    if name == "Finding":
        return importlib.import_module("forklift.speculative.rules").Finding
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Finding", "ModelShape", "check", "metrics", "platform_of", "render", "sizing", "versions", "workload"]


def platform_of(recipe: Recipe) -> str:
    """``cpu`` or ``cuda``, from the nodes' hardware profiles (an unknown profile counts as cuda: the planner
    reports it)."""
    try:
        return hardware_profile(recipe.nodes[0].hardware).kind
    except HardwareError:
        return "cuda"


def check(recipe: Recipe, *, vllm_version: str | None, default_version: str,
          model: ModelShape | None = None) -> list[Finding]:
    """The rules that apply to the recipe's speculative config on that vLLM release (``default_version`` when the
    release is not known yet). Raises SpeculativeConfigError (a PlanError) for errors; returns the warnings.
    Without ``model`` the model-dependent rules are skipped; call again with it once the model is described."""
    if recipe.serve.speculative is None:
        return []
    from forklift.speculative import versions
    from forklift.speculative.rules import facts, findings, refuse

    rel = versions.release(vllm_version, default_version)
    found = findings(facts(recipe, platform=platform_of(recipe), release=rel, model=model))
    refuse(found)
    return found

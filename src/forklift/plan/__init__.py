"""The planner: per-rank memory, KV capacity, max context, speed bounds and advice, before anything loads.

``make(deployment) -> Plan`` is the entry point (``forklift.plan("default")``, the package called, is
``for_recipe``: a recipe by name or file, resolved and planned); ``for_launch`` gives ``render`` and ``up`` a Plan or an
``Unplanned``; ``layout`` is the one home of vLLM's PP split and rank placement.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from forklift.plan.calibrate import Calibration
from forklift.plan.layout import pp_partition
from forklift.plan.make import calibrate_from_log, for_launch, for_recipe, make
from forklift.plan.result import Advice, Decisions, ModelFiles, NodeFiles, Plan, RankPlan, Roofline, Unplanned

if TYPE_CHECKING:
    from forklift.plan.startlog import LogFacts, parse_log


def __getattr__(name: str) -> Any:
    """``parse_log`` and ``LogFacts`` (the startup-log reader) load when first used: ``plan`` does not read logs."""
    if name in ("LogFacts", "parse_log"):
        return getattr(importlib.import_module("forklift.plan.startlog"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Advice", "Calibration", "Decisions", "LogFacts", "ModelFiles", "NodeFiles", "Plan", "RankPlan",
           "Roofline", "Unplanned", "calibrate_from_log", "for_launch", "for_recipe", "make", "parse_log",
           "pp_partition"]


class _Planner(types.ModuleType):
    """The package is also the public call: ``forklift.plan(recipe, overrides)`` is ``for_recipe``."""

    def __call__(self, recipe: str | None = None, overrides: Sequence[str] = (), *, vllm_version: str | None = None,
                 apply: bool = False) -> Plan:
        return for_recipe(recipe, overrides, vllm_version=vllm_version, apply=apply)


sys.modules[__name__].__class__ = _Planner

"""Acceptance checks: does a deployment really work, not just answer /health.

Each check is a small function over a :class:`Session` returning a :class:`forklift.results.CheckResult`;
:func:`run` runs a tier against a :class:`forklift.endpoint.Target` and returns a :class:`Report`.

Names are imported on first use: the suite needs the ``openai`` client, which ``forklift check --help`` does not.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from forklift.check.context import CheckContext, Options
    from forklift.check.parity import Transcript, reference_from
    from forklift.check.registry import CheckSpec, Tier, ids
    from forklift.check.result import CheckId, Report
    from forklift.check.runner import plan, run, save_reference
    from forklift.endpoint import Target

_HOMES = {
    "CheckContext": "context", "CheckId": "result", "CheckSpec": "registry", "Options": "context",
    "Report": "result", "Tier": "registry", "ids": "registry",
    "Transcript": "parity", "plan": "runner", "reference_from": "parity", "run": "runner",
    "save_reference": "runner",
}

__all__ = [
    "CheckContext",
    "CheckId",
    "CheckSpec",
    "Options",
    "Report",
    "Tier",
    "Transcript",
    "ids",
    "plan",
    "reference_from",
    "run",
    "save_reference",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'forklift.check' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"forklift.check.{home}"), name)
    globals()[name] = value
    return value


class _Checks(types.ModuleType):
    """The package is also the public call: ``forklift.check(target, tier, opts)`` is ``run``."""

    def __call__(self, target: Target, tier: Tier = "quick", opts: Options | None = None) -> Report:
        from forklift.check.runner import run as run_checks

        return run_checks(target, tier, opts)


sys.modules[__name__].__class__ = _Checks

"""Node preparation: check, apply and revert host settings for big-model loads, and the guard daemon.

``check`` reads a node against a profile (data in ``profiles/``); ``apply`` changes it through a
Runner and records what was there; ``revert`` restores it exactly; ``preflight`` is what ``up`` runs.
"""

from forklift.errors import SudoRequiredError
from forklift.node.api import (
    GuardLaunch,
    apply,
    check,
    plan,
    preflight,
    resolve_profile,
    revert,
    run_guard_foreground,
    start_guard,
)
from forklift.node.apply import ApplyPlan, ApplyResult, NodeState, Step
from forklift.node.profile import NodeProfile, bundled_names, load_profile
from forklift.results import CheckResult, worst

__all__ = [
    "ApplyPlan",
    "ApplyResult",
    "CheckResult",
    "GuardLaunch",
    "NodeProfile",
    "NodeState",
    "Step",
    "SudoRequiredError",
    "apply",
    "bundled_names",
    "check",
    "load_profile",
    "plan",
    "preflight",
    "resolve_profile",
    "revert",
    "run_guard_foreground",
    "start_guard",
    "worst",
]

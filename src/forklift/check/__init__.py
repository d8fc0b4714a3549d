"""Acceptance checks: does a deployment really work, not just answer /health.

Each check is a small function over a :class:`Session` returning a :class:`CheckResult`; :func:`run` runs a tier.
"""

from forklift.check.parity import Transcript
from forklift.check.result import CHECK_IDS, CheckId, CheckResult, Evidence, Report, Status, Tier
from forklift.check.runner import Options, plan, run, save_reference
from forklift.check.target import Target, from_record, from_url

__all__ = [
    "CHECK_IDS",
    "CheckId",
    "CheckResult",
    "Evidence",
    "Options",
    "Report",
    "Status",
    "Target",
    "Tier",
    "Transcript",
    "from_record",
    "from_url",
    "plan",
    "run",
    "save_reference",
]

"""The planner: per-rank memory, KV capacity, max context, speed bounds and advice, before anything loads.

``make(deployment) -> Plan`` is the entry point; ``for_launch`` gives ``render`` and ``up`` a Plan or an
``Unplanned``; ``layout`` is the one home of vLLM's PP split and rank placement.
"""

from forklift.plan.calibrate import Calibration, LogFacts, parse_log
from forklift.plan.layout import pp_partition
from forklift.plan.make import calibrate_from_log, for_launch, make
from forklift.plan.model import Advice, Decisions, ModelFiles, NodeFiles, Plan, RankPlan, Roofline, Unplanned

__all__ = ["Advice", "Calibration", "Decisions", "LogFacts", "ModelFiles", "NodeFiles", "Plan", "RankPlan",
           "Roofline", "Unplanned", "calibrate_from_log", "for_launch", "make", "parse_log", "pp_partition"]

"""The planner: per-rank memory, KV capacity, max context, speed bounds and advice, before anything loads.

``make(recipe) -> Plan`` is the entry point; ``Plan.to_json()`` is what ``up`` embeds in the run record.
"""

from forklift.plan.calibrate import Calibration, LogFacts, parse_log
from forklift.plan.make import calibrate_from_log, make
from forklift.plan.memory import pp_partition
from forklift.plan.model import Advice, ModelFiles, NodeFiles, Plan, RankPlan, Roofline

__all__ = ["Advice", "Calibration", "LogFacts", "ModelFiles", "NodeFiles", "Plan", "RankPlan", "Roofline",
           "calibrate_from_log", "make", "parse_log", "pp_partition"]

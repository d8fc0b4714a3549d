"""Upgrades without regressions: compare two saved results with confidence intervals, and try a candidate
deployment against a running baseline (``canary.run``), keeping it or restoring the baseline.

    a, b = canary.load("runs/x/bench/1/results.json"), canary.load("runs/x/bench/2/results.json")
    print(canary.compare(a, b).verdict)         # ok / regressed / improved
"""

from forklift.canary.compare import DEFAULT_THRESHOLD, GATED, Comparison, MetricDelta, compare, judge
from forklift.canary.saved import Bench, Check, Level, Request, Saved, from_json, load

__all__ = [
    "Bench",
    "Check",
    "Comparison",
    "DEFAULT_THRESHOLD",
    "GATED",
    "Level",
    "MetricDelta",
    "Request",
    "Saved",
    "compare",
    "from_json",
    "judge",
    "load",
]

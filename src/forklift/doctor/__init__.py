"""doctor: turn vLLM, NCCL, Ray and out-of-memory failures into the cause and the fix.

The knowledge base is YAML under ``rules/``; the matcher is pure (text lines in, ranked findings
out) and never imports ``forklift.cluster``: gathering logs from ranks is the caller's job.
"""

from __future__ import annotations

from forklift.doctor.advice import PlannerView, kv_advice, planner_numbers
from forklift.doctor.kb import load_rules
from forklift.doctor.lines import iter_binary, iter_text
from forklift.doctor.match import Matcher, diagnose, diagnose_report, version_applies
from forklift.doctor.model import Category, Finding, Report, Rule

__all__ = [
    "Category",
    "Finding",
    "Matcher",
    "PlannerView",
    "Report",
    "Rule",
    "diagnose",
    "diagnose_report",
    "iter_binary",
    "iter_text",
    "kv_advice",
    "load_rules",
    "planner_numbers",
    "version_applies",
]

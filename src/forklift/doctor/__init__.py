"""doctor: turn vLLM, NCCL, Ray, driver and out-of-memory failures into the cause, its probability and the fix.

Three layers (``engine``): exact signatures (YAML under ``rules/``), a statistical classifier for wordings
no rule has seen (``data/classifier.json``), and the run's context (``context.Context``). Pure: text and
context in, findings out; it never imports ``forklift.cluster`` (collecting logs from nodes is
``forklift.cluster.collect``'s job).
"""

from __future__ import annotations

from forklift.doctor.advice import PlannerView, kv_advice, planner_numbers
from forklift.doctor.checks import to_checks
from forklift.doctor.classify import Classifier, load_classifier
from forklift.doctor.context import Context, phase_of
from forklift.doctor.diagnosis import Source, diagnose, diagnose_report, diagnose_sources
from forklift.doctor.findings import Category, CategoryInfo, Finding, Line, Report, Rule
from forklift.doctor.kb import load_categories, load_rules
from forklift.doctor.lines import iter_binary, iter_text
from forklift.doctor.match import Matcher, version_applies
from forklift.doctor.scan import Excerpt, scan_bytes, scan_stream, scan_text

__all__ = [
    "Category",
    "CategoryInfo",
    "Classifier",
    "Context",
    "Excerpt",
    "Finding",
    "Line",
    "Matcher",
    "PlannerView",
    "Report",
    "Rule",
    "Source",
    "diagnose",
    "diagnose_report",
    "diagnose_sources",
    "iter_binary",
    "iter_text",
    "kv_advice",
    "load_categories",
    "load_classifier",
    "load_rules",
    "phase_of",
    "planner_numbers",
    "scan_bytes",
    "scan_stream",
    "scan_text",
    "to_checks",
    "version_applies",
]

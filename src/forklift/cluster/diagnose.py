"""One diagnosis of a run, read from every rank: ``forklift doctor RUN``, `up`'s failure message and canary's
verdict on a failed candidate all call :func:`diagnose_run`, so one failure gets one finding.

The run's context comes from its record (status, the failed rank and phase `up` recorded, the plan's KV margin,
patches, unified memory); the text from every rank's log, and for doctor also each node's kernel log, Ray's logs and
free memory (cluster.collect). doctor reads the text; this module only gathers it and the context.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from forklift.cluster import collect as gather
from forklift.doctor import Context, Report, Source, diagnose_sources, scan_bytes
from forklift.errors import DoctorError
from forklift.record import RunRecord
from forklift.runner import Runner

_FAILED_RANK = re.compile(r"(?:rank|ray) (\d+) on (\S+) (?:exited|stopped)|^(\S+) stopped answering")
_PHASE = re.compile(r"\(phase: ([^)]+)\)|during startup \((?!phase: )([^)]+)\)")


@dataclass
class RunDiagnosis:
    """doctor's report on a run, the context it was given, and what was read on each node."""

    report: Report
    context: Context
    read: dict[str, list[str]] = field(default_factory=dict)
    sources: list[Source] = field(default_factory=list)
    collection: gather.Collection | None = None
    """Everything gathered, piece by piece (the supervisor keeps it as an incident's evidence)."""

    def top_line(self) -> str | None:
        """The top finding that is not informational, as one line: title (category): fix."""
        top = next((f for f in self.report.findings if f.severity != "info"), None)
        return f"{top.title} ({top.category}): {top.fix}" if top else None


def _plan_facts(record: RunRecord) -> dict[str, Any]:
    plan = record.planned
    if plan is None:
        return {"plan_fits": False} if getattr(record.plan, "kind", "") == "unplanned" else {}
    margins = [r.kv_pool_gib - r.kv_needed_gib for r in plan.ranks]
    notes = tuple(f"plan: rank {r.rank} KV pool {r.kv_pool_gib:.2f} GiB, one max_model_len request needs "
                  f"{r.kv_needed_gib:.2f} GiB" for r in plan.ranks)
    return {"plan_fits": plan.fits, "kv_margin_gib": round(min(margins), 3) if margins else None, "plan_notes": notes}


def context_of(record: RunRecord, mem: Mapping[str, tuple[int, int]] | None = None) -> Context:
    """What the record knows about the run, for doctor: the failed rank and phase come from the error `up` wrote."""
    from forklift.hardware.profiles import is_unified

    recipe = record.recipe
    error = record.error or ""
    failed = _FAILED_RANK.search(error)
    phase = _PHASE.search(error)
    unified = [is_unified(node.hardware) for node in recipe.nodes]
    applied = tuple(dict.fromkeys([p.id for p in record.pins.patches] + [str(p.get("id")) for p in record.patches
                                                                         if isinstance(p, dict) and p.get("id")]))
    return Context(
        vllm_version=record.vllm_version, phase=(phase.group(1) or phase.group(2)) if phase else None,
        status=record.status, error=record.error,
        failed_rank=int(failed.group(1)) if failed and failed.group(1) else None,
        failed_host=(failed.group(2) or failed.group(3)) if failed else None,
        patches_applied=applied, patches_wanted=tuple(p.id for p in recipe.patches), backend=recipe.parallel.backend,
        nodes=len(recipe.nodes), unified_memory=any(unified), mem_available=dict(mem or {}), **_plan_facts(record),
    )


def diagnose_run(record: RunRecord, runners: Mapping[int, Runner], *, nodes: bool = True,
                 threshold: float | None = None) -> RunDiagnosis:
    """doctor over every rank's log; with ``nodes`` also each node's kernel log, Ray's logs and free memory (what
    `forklift doctor RUN` reads; `up` and canary, in a hurry after a failed start, read the rank logs alone).
    Raises DoctorError when nothing could be read from any node."""
    got = gather.collect(record, runners, kernel=nodes, ray=nodes)
    sources = [Source(f"{p.host} {p.label}", scan_bytes(p.text.encode("utf-8", "surrogateescape"),
                                                         f"{p.host} {p.label}"), host=p.host)
               for p in got.pieces if p.text.strip()]
    if not sources:
        raise DoctorError(f"run {record.name}: nothing could be read from its nodes",
                          fix=f"Check the nodes answer over SSH (`forklift status {record.name}`).")
    context = context_of(record, got.mem_available)
    return RunDiagnosis(diagnose_sources(sources, context, threshold=threshold), context, got.read(), sources, got)

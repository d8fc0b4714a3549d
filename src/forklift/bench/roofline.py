"""The planner's single-stream decode limit for a run, read from its record (a record never re-plans)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from forklift.record import RunRecord


@dataclass(frozen=True)
class Roofline:
    """The planner's single-stream decode limit, or why there is none."""

    decode_tok_s: float | None
    source: str


def planned_roofline(record: RunRecord | None) -> Roofline:
    """``decode_tok_s_single`` from the record's plan, or why there is none."""
    if record is None:
        return Roofline(None, "no run record")
    plan = record.planned
    if plan is None:
        return Roofline(None, f"no plan in the run record: {getattr(record.plan, 'error', 'unplanned')}")
    value = plan.roofline.decode_tok_s_single
    if value <= 0:
        return Roofline(None, "plan has no decode_tok_s_single")
    return Roofline(value, "run record plan")

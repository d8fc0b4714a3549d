"""Run records: the typed, versioned artifact ``up`` writes and every later command reads."""

from forklift.record.model import SCHEMA_VERSION, PatchPin, Pins, RankState, RunRecord, Status, migrate, run_dir
from forklift.record.store import (
    benches_dir,
    latest_bench,
    list_names,
    list_records,
    load,
    resolve_name,
    save_status,
    validate_name,
)

__all__ = ["SCHEMA_VERSION", "PatchPin", "Pins", "RankState", "RunRecord", "Status", "benches_dir", "latest_bench",
           "list_names", "list_records", "load", "migrate", "resolve_name", "run_dir", "save_status", "validate_name"]

"""Run records: the typed, versioned artifact ``up`` writes and every later command reads."""

from forklift.record.lock import RunLock, up_in_progress, writable_state
from forklift.record.run_record import SCHEMA_VERSION, PatchPin, Pins, RankState, RunRecord, Status, migrate, run_dir
from forklift.record.store import (
    Salvaged,
    SalvagedRank,
    benches_dir,
    latest_bench,
    list_names,
    list_records,
    list_unreadable,
    load,
    resolve_name,
    salvage,
    save_status,
    set_aside,
    validate_name,
)

__all__ = ["SCHEMA_VERSION", "PatchPin", "Pins", "RankState", "RunLock", "RunRecord", "Salvaged", "SalvagedRank",
           "Status", "benches_dir", "latest_bench", "list_names", "list_records", "list_unreadable", "load", "migrate",
           "resolve_name", "run_dir", "salvage", "save_status", "set_aside", "up_in_progress", "validate_name",
           "writable_state"]

"""Where a run's results are kept, beside its record, so a later check, bench or canary can find, repeat and compare
them (stored here, not in canary, since `forklift check` and `forklift bench` save through it too):

    $FORKLIFT_HOME/runs/NAME/check/STAMP.json          check reports (`forklift check NAME` saves each)
    $FORKLIFT_HOME/runs/NAME/bench/STAMP/results.json  bench results (`forklift bench NAME` writes them there)
    $FORKLIFT_HOME/runs/NAME/canary/STAMP/             each canary: both records, the candidate's results,
                                                       comparison.json, canary.json, report.html

STAMP is ``YYYYmmdd-HHMMSS`` (with ``-N`` appended when two land in one second), so names sort by time.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from forklift.record.run_record import run_dir
from forklift.record.store import benches_dir as benches_dir  # re-exported: where check, bench and canary keep results
from forklift.record.store import latest_bench as latest_bench


def stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def fresh(parent: Path, suffix: str = "") -> Path:
    """A path under ``parent`` named by the time that does not exist yet (nothing is created)."""
    base = stamp()
    candidate = parent / f"{base}{suffix}"
    n = 1
    while candidate.exists():
        candidate = parent / f"{base}-{n}{suffix}"
        n += 1
    return candidate


def checks_dir(name: str) -> Path:
    return run_dir(name) / "check"


def canaries_dir(name: str) -> Path:
    return run_dir(name) / "canary"


def save_check(name: str, report: dict[str, Any], run_id: str | None = None) -> Path:
    """Keep a check report with its run (``report`` as ``Report.to_json()`` gives it)."""
    folder = checks_dir(name)
    folder.mkdir(parents=True, exist_ok=True)
    path = fresh(folder, ".json")
    path.write_text(json.dumps(report | {"saved_at": time.time(), "run_id": run_id}, indent=2, default=str))
    return path


def _newest(paths: list[Path]) -> Path | None:
    return max(paths, key=lambda p: (p.stat().st_mtime, p.name)) if paths else None


def latest_check(name: str) -> Path | None:
    folder = checks_dir(name)
    return _newest(list(folder.glob("*.json"))) if folder.is_dir() else None


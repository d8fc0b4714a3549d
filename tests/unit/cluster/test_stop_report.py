"""`down` says which processes ignored SIGTERM for the grace period and had to be SIGKILLed."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from forklift.cluster.stop import stop_all
from forklift.record import RankState
from forklift.runner import LocalRunner

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
POLITE = "import time; print('up', flush=True); time.sleep(60)"


def _start(tmp_path: Path, rank: int, code: str, role: str = "engine") -> RankState:
    log = tmp_path / f"{role}{rank}.log"
    spawned = LocalRunner().spawn([sys.executable, "-c", code], log_path=str(log))
    deadline = time.monotonic() + 20
    while "up" not in (log.read_text() if log.exists() else ""):  # its SIGTERM handler is in place
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return RankState(rank=rank, host="localhost", pid=spawned.pid, pgid=spawned.pid, log_path=str(log),
                     node_index=0, role=role)


def test_stubborn_process_is_killed_and_named_polite_one_is_not(tmp_path: Path) -> None:
    ranks = [_start(tmp_path, 0, POLITE), _start(tmp_path, 1, STUBBORN, role="ray-worker")]
    record: Any = SimpleNamespace(ranks=ranks)
    t0 = time.monotonic()
    report = stop_all(record, {0: LocalRunner()}, grace_s=1.0)
    assert report.leftovers == []
    assert report.killed == [f"ray-worker 1 on localhost (pgid {ranks[1].pgid})"]
    assert time.monotonic() - t0 < 15
    again = stop_all(record, {0: LocalRunner()}, grace_s=1.0)
    assert again.leftovers == [] and again.killed == []  # both gone: nothing to kill twice

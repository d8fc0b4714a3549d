"""Host memory of each grid point's vLLM process tree, read from ID-MODEL.mem.tsv (run_grid.py samples RssAnon
summed over the server's session and the host's MemAvailable once a second, with the last startup milestone
seen in the log). On a unified-memory GPU (GB10) vLLM reads free memory from MemAvailable (profile, 0.20+) and
from cudaMemGetInfo (CUDA-graph estimate), so host growth there is taken from the KV budget; on the H200 it is
not, which makes the H200 the place to measure it.

Per point: RSS at the worker's init snapshot (its epoch timestamp is in the DEBUG line "worker init memory
snapshot"), at "Memory profiling takes" (vLLM's after-profile snapshot, after the CUDA-graph estimate in 0.26) and
at "Graph capturing finished" (the real capture), each the last sample at or before that moment (log times are
UTC, as the snapshot's epoch shows); the milestone column is the fallback. With the graph count from the log.
Stdlib only.

    python3 scripts/gpu/grid/host_memory.py tests/data/calibration/h200-grid [--json]
"""

from __future__ import annotations

import calendar
import json
import re
import sys
import time
from pathlib import Path

GRAPHS_RE = re.compile(r"Profiling CUDA graph memory: PIECEWISE=(\d+) \(largest=\d+\)(?:, FULL=(\d+))?")
SNAP_RE = re.compile(r"worker init memory snapshot: .*?timestamp=([0-9.]+)")
LINE_TIME = r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) \[[^\]]*\] "
PROFILED_RE = re.compile(LINE_TIME + r"Memory profiling takes")
CAPTURED_RE = re.compile(LINE_TIME + r"Graph capturing finished")


def log_epoch(m: re.Match[str] | None, year: int) -> float | None:
    if m is None:
        return None
    mo, d, hh, mm, ss = (int(x) for x in m.groups())
    return float(calendar.timegm((year, mo, d, hh, mm, ss, 0, 0, 0)))


def epoch_samples(path: Path) -> list[tuple[float, float]]:
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        parts = line.split("\t")
        out.append((float(parts[0]), float(parts[2])))
    return out


def rss_before(rows: list[tuple[float, float]], t: float | None) -> float | None:
    """RSS of the last sample at or before t (the sample after the second ends, as log times are whole seconds)."""
    if t is None or not rows or rows[0][0] > t + 1:
        return None
    return [rss for ts, rss in rows if ts <= t + 1][-1]


def samples(path: Path) -> list[tuple[float, float, str]]:
    """(seconds since start, RssAnon MiB, phase) per sample."""
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        parts = line.split("\t")
        out.append((float(parts[1]), float(parts[2]), parts[4]))
    return out


def rss_at(rows: list[tuple[float, float, str]], phase: str, last_before: bool = False) -> float | None:
    """RSS at the first sample in ``phase`` (or the last sample before the first one in it)."""
    for i, (_, rss, ph) in enumerate(rows):
        if ph == phase:
            return rows[i - 1][1] if last_before and i else rss
    return None


def point(mem: Path) -> dict[str, object]:
    rows = samples(mem)
    log = mem.with_name(mem.name.replace(".mem.tsv", ".log"))
    text = log.read_text(errors="replace") if log.is_file() else ""
    graphs = GRAPHS_RE.search(text)
    n_graphs = (int(graphs.group(1)) + int(graphs.group(2) or 0)) if graphs else None
    timed = epoch_samples(mem)
    snap_m = SNAP_RE.search(text)
    t_snap = float(snap_m.group(1)) if snap_m else None
    year = time.gmtime(t_snap if t_snap else (timed[0][0] if timed else 0)).tm_year
    snap = rss_before(timed, t_snap) if t_snap else rss_at(rows, "load", last_before=True)
    after = rss_before(timed, log_epoch(PROFILED_RE.search(text), year)) or rss_at(rows, "kv")
    captured = rss_before(timed, log_epoch(CAPTURED_RE.search(text), year)) or rss_at(rows, "done")
    out: dict[str, object] = {"point": mem.name.split(".")[0], "graphs": n_graphs, "rss_snapshot_mib": snap,
                              "rss_after_profile_mib": after, "rss_after_capture_mib": captured,
                              "peak_mib": max((r[1] for r in rows), default=None)}
    if snap is not None and after is not None:
        out["profile_growth_mib"] = after - snap
    if after is not None and captured is not None and n_graphs:
        out["capture_growth_mib"] = captured - after
        out["capture_mib_per_graph"] = round((captured - after) / n_graphs, 2)
    return out


def main() -> int:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("tests/data/calibration/h200-grid")
    rows = [point(m) for m in sorted(folder.glob("*.mem.tsv"))]
    if "--json" in sys.argv:
        print(json.dumps(rows, indent=1))
        return 0
    for r in rows:
        print(" ".join(f"{k}={v}" for k, v in r.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

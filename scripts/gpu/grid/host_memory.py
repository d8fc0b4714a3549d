"""Host memory of each grid point's vLLM process tree, read from ID-MODEL.mem.tsv (run_grid.py samples RssAnon
summed over the server's session and the host's MemAvailable once a second, with the last startup milestone
seen in the log). On a unified-memory GPU (GB10) vLLM reads free memory from MemAvailable (profile, 0.20+) and
from cudaMemGetInfo (CUDA-graph estimate), so host growth there is taken from the KV budget; on the H200 it is
not, which makes the H200 the place to measure it.

Per point: RSS when the model starts loading (the worker's init snapshot is taken just before), after the
profile run and the CUDA-graph estimate ("kv": vLLM's after-profile snapshot), and after the real graph capture,
with the graph count from the log. Stdlib only.

    python3 scripts/gpu/grid/host_memory.py tests/data/calibration/h200-grid [--json]
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

GRAPHS_RE = re.compile(r"Profiling CUDA graph memory: PIECEWISE=(\d+) \(largest=\d+\)(?:, FULL=(\d+))?")
LAYERS_RE = re.compile(r'"num_hidden_layers": (\d+)')


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
    snap = rss_at(rows, "load", last_before=True)
    after = rss_at(rows, "kv") or rss_at(rows, "captured")
    captured = rss_at(rows, "done") or rss_at(rows, "captured")
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

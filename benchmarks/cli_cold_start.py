"""Benchmark (not a test): wall time of a cold `forklift` process, the way a user types it.

Runs `forklift --help`, `forklift plan default --json` and `forklift plan glm-4.7-nvfp4-2x-spark --json` as
fresh processes, RUNS times each (interleaved, so machine load hits all alike), and writes
bench-results/cli_cold_start.json with each median against the 0.4 s bar (issue 14). Interleaved with them, two
probes forklift cannot affect: a bare interpreter start and a fixed pure-Python loop (2 million additions), so a
reader can tell a slow machine from slow code (this VM's speed swings by 2-3x within an hour).

    python -m benchmarks.cli_cold_start
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 9
BAR_S = 0.4
COMMANDS = {
    "--help": ["--help"],
    "plan default": ["plan", "default", "--json"],
    "plan glm-4.7-nvfp4-2x-spark": ["plan", "glm-4.7-nvfp4-2x-spark", "--json"],
}


def _once(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "forklift.cli.main", *argv], env=env,  # noqa: S603
                         capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    if res.returncode not in (0, 1):  # 1: a plan that does not fit
        raise RuntimeError(f"forklift {' '.join(argv)} exited {res.returncode}: {res.stderr[-300:]}")
    return elapsed


PROBES = {
    "python -c pass": ["-c", "pass"],
    "python loop 2e6": ["-c", "s = 0\nfor i in range(2_000_000):\n    s += i"],
}


def _probe(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *argv], check=True, capture_output=True)  # noqa: S603
    return time.perf_counter() - t0


def main() -> int:
    env = {**os.environ, "FORKLIFT_HOME": tempfile.mkdtemp(prefix="fl-cold-")}
    env.setdefault("FORKLIFT_CACHE", str(Path.home() / ".cache" / "forklift"))
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    probes: dict[str, list[float]] = {name: [] for name in PROBES}
    for argv in COMMANDS.values():
        _once(argv, env)  # warm the page cache and .pyc files once: "cold" means a new process, not a new disk
    for _ in range(RUNS):
        for name, argv in COMMANDS.items():
            times[name].append(_once(argv, env))
        for name, argv in PROBES.items():
            probes[name].append(_probe(argv))
    rows = {name: {"median_s": round(statistics.median(t), 3), "min_s": round(min(t), 3), "max_s": round(max(t), 3),
                   "under_bar": statistics.median(t) <= BAR_S} for name, t in times.items()}
    for name, row in rows.items():
        print(f"{name:32s} median {row['median_s']:.3f} s  min {row['min_s']:.3f}  max {row['max_s']:.3f}  "
              f"{'OK' if row['under_bar'] else 'OVER'} (bar {BAR_S} s)")
    machine = {name: round(statistics.median(t), 3) for name, t in probes.items()}
    print("machine: " + ", ".join(f"{name} median {s:.3f} s" for name, s in machine.items()))
    load = os.getloadavg()[0]
    out = Path("bench-results")
    out.mkdir(exist_ok=True)
    (out / "cli_cold_start.json").write_text(json.dumps({"bar_s": BAR_S, "runs": RUNS, "loadavg_1m": load,
                                                         "machine_probes_s": machine, "results": rows}, indent=2))
    return 0 if all(r["under_bar"] for r in rows.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())

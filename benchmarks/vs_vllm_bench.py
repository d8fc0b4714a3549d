"""forklift bench against ``vllm bench serve`` (shipped with vLLM), same server, same settings, one run.

Both tools drive ``/v1/completions`` with streaming and ``include_usage``, random prompts of exactly
``--input-len`` tokens, ``--output-len`` tokens with EOS ignored, greedy sampling, ``--requests`` requests
at a fixed ``--concurrency`` (``--max-concurrency`` for vLLM), one warm-up request. The two alternate
(vllm, forklift, forklift, vllm, ...) so that drift in a shared machine's load hits both alike.
Compares output tok/s and mean TTFT (target: within 5 %, judged on the median over rounds of the
difference between a round's two adjacent runs) and reports both tools' numbers.
Writes bench-results/vs_vllm_bench.json.

Run: ``python -m benchmarks.vs_vllm_bench [--url URL] [--rounds N] ...``; without ``--url`` it starts
the default recipe with ``forklift up`` (in a temporary FORKLIFT_HOME) and stops it afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from forklift import bench
from forklift.endpoint import Endpoint, Target

OUT = Path("bench-results")
TOLERANCE = 0.05


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, FORKLIFT_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "forklift.cli.main", *args],  # noqa: S603
                          capture_output=True, text=True, env=env, check=False, timeout=900)


@contextmanager
def server(url: str | None) -> Iterator[tuple[str, str | None]]:
    """(endpoint, tokenizer path): the given URL, or a fresh `forklift up default` stopped afterwards."""
    if url:
        yield url, None
        return
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        res = _cli("up", "default", "--name", "vsbench", "--set", f"serve.port={_free_port()}", "--json", home=home)
        if res.returncode != 0:
            raise RuntimeError(f"forklift up failed:\n{res.stdout}\n{res.stderr}")
        info = json.loads(res.stdout)
        record = json.loads((home / "runs" / "vsbench" / "record.json").read_text())
        try:
            yield info["endpoint"], record["launch"]["model_path"]
        finally:
            _cli("down", "vsbench", home=home)


def run_vllm(url: str, model: str, tokenizer: str, args: argparse.Namespace, out: Path, tag: str) -> dict[str, Any]:
    argv = [sys.executable, "-m", "forklift.engine.vllm_main", "bench", "serve",
            "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
            "--model", model, "--tokenizer", tokenizer,
            "--dataset-name", "random", "--random-input-len", str(args.input_len),
            "--random-output-len", str(args.output_len), "--random-range-ratio", "0",
            "--num-prompts", str(args.requests), "--max-concurrency", str(args.concurrency),
            "--request-rate", "inf", "--ignore-eos", "--temperature", "0", "--num-warmups", "1",
            "--seed", str(args.seed), "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--save-result", "--result-dir", str(out), "--result-filename", f"{tag}.json", "--disable-tqdm"]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1800)  # noqa: S603
    (out / f"{tag}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed ({proc.returncode}); see {out / f'{tag}.log'}")
    data: dict[str, Any] = json.loads((out / f"{tag}.json").read_text())
    return {"output_tok_s": data["output_throughput"], "mean_ttft_ms": data["mean_ttft_ms"],
            "median_tpot_ms": data["median_tpot_ms"], "mean_itl_ms": data["mean_itl_ms"],
            "completed": data["completed"], "input_tokens": data["total_input_tokens"],
            "output_tokens": data["total_output_tokens"], "duration_s": data["duration"],
            "wall_s": time.perf_counter() - t0}


def run_forklift(target: Target, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    config = bench.BenchConfig(concurrency=(args.concurrency,), input_len=args.input_len, output_len=args.output_len,
                               requests=args.requests, warmup=1, seed=seed)
    t0 = time.perf_counter()
    result = bench.run(config, target)
    run = result.runs[0]
    ttft, tpot, itl = run.ttft, run.tpot, run.itl
    return {"output_tok_s": run.output_tok_s, "mean_ttft_ms": ttft.mean if ttft else None,
            "median_tpot_ms": tpot.p50 if tpot else None, "mean_itl_ms": itl.mean if itl else None,
            "completed": run.completed, "input_tokens": run.input_tokens, "output_tokens": run.output_tokens,
            "duration_s": run.duration_s, "wall_s": time.perf_counter() - t0,
            "server_counts_match": run.counters.match if run.counters else None}


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.fmean(float(r[key]) for r in rows)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vs_vllm_bench")
    parser.add_argument("--url", default=None)
    parser.add_argument("--tokenizer", default=None, help="default: the server's model path (from /v1/models)")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2, help="pairs of runs, alternating the order")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(list(argv) if argv is not None else [])
    OUT.mkdir(exist_ok=True)
    raw = OUT / "vs_vllm_bench"
    raw.mkdir(exist_ok=True)
    with server(args.url) as (url, model_path):
        with Endpoint.of(Target.from_url(url)) as endpoint:
            found = endpoint.discover()
        tokenizer = args.tokenizer or model_path or str(found.listing[0]["root"])
        target = Target.from_url(url, model=found.model, tokenizer=tokenizer)
        vllm_rows: list[dict[str, Any]] = []
        fk_rows: list[dict[str, Any]] = []
        for i in range(args.rounds):
            order = ("vllm", "forklift") if i % 2 == 0 else ("forklift", "vllm")
            for tool in order:
                if tool == "vllm":
                    vllm_rows.append(run_vllm(target.base_url, found.model, tokenizer, args, raw, f"vllm-{i}"))
                else:
                    fk_rows.append(run_forklift(target, args, args.seed + i))
    summary: dict[str, Any] = {}
    for key in ("output_tok_s", "mean_ttft_ms", "median_tpot_ms", "mean_itl_ms"):
        v, f = _mean(vllm_rows, key), _mean(fk_rows, key)
        # Each round's two runs sit next to each other in time: their ratio is less exposed to drift.
        paired = statistics.median(float(fr[key]) / float(vr[key]) - 1.0 for vr, fr in zip(vllm_rows, fk_rows,
                                                                                           strict=True))
        summary[key] = {"vllm_bench_serve": v, "forklift": f, "relative_difference": (f - v) / v if v else None,
                        "median_paired_difference": paired}
    within = all(abs(summary[k]["median_paired_difference"]) <= TOLERANCE for k in ("output_tok_s", "mean_ttft_ms"))
    report = {
        "benchmark": "vs_vllm_bench", "url": url, "model": found.model, "tokenizer": tokenizer,
        "settings": {k: getattr(args, k) for k in ("input_len", "output_len", "requests", "concurrency", "rounds")},
        "python": platform.python_version(), "tolerance": TOLERANCE, "within_tolerance": within,
        "summary": summary, "vllm_bench_serve_runs": vllm_rows, "forklift_runs": fk_rows,
    }
    (OUT / "vs_vllm_bench.json").write_text(json.dumps(report, indent=2))
    for key, row in summary.items():
        print(f"{key:16s} vllm bench serve {row['vllm_bench_serve']:10.2f}   forklift {row['forklift']:10.2f}   "
              f"{100 * (row['relative_difference'] or 0):+6.1f}% "
              f"(median paired {100 * row['median_paired_difference']:+.1f}%)")
    print(f"output tok/s and mean TTFT within {TOLERANCE:.0%}: {'yes' if within else 'NO'}; "
          f"wrote {OUT / 'vs_vllm_bench.json'}")
    return report


if __name__ == "__main__":
    main(sys.argv[1:])

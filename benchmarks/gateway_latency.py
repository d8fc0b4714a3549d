"""The gateway's added latency: TTFT of streamed chat completions through `forklift gateway` (LiteLLM's proxy with
forklift's hooks: key check, allow-list, rate, health, audit) against the same run directly.

One run of the bundled SmolLM2 (`forklift up default`, enforce_eager), the gateway in front of it, one key.
Requests alternate direct / through the gateway, one at a time, N each (after a warm-up of each); writes
bench-results/gateway_latency.json with p50/p99 TTFT of both and the difference.
Run: `python -m benchmarks.gateway_latency [N]`.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import httpx

OUT = Path("bench-results")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ttft(url: str, model: str, key: str | None) -> float:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4,
            "temperature": 0, "stream": True}
    t0 = time.perf_counter()
    took: float | None = None
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers, timeout=120) as res:
        res.raise_for_status()
        for line in res.iter_lines():  # read to the end: the next request starts on an idle server
            if took is None and line.startswith("data: ") and line != "data: [DONE]":
                chunk = json.loads(line[6:])
                if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                    took = time.perf_counter() - t0
    if took is None:
        raise RuntimeError("no token streamed")
    return took


def _pct(xs: list[float], q: float) -> float:
    ys = sorted(xs)
    return ys[min(len(ys) - 1, round(q * (len(ys) - 1)))]


def main(n: int = 50) -> dict[str, object]:
    home = tempfile.mkdtemp(prefix="fl-gw-bench-")
    env = {**os.environ, "FORKLIFT_HOME": home}
    env.setdefault("FORKLIFT_CACHE", str(Path.home() / ".cache" / "forklift"))
    cli = [sys.executable, "-m", "forklift.cli.main"]

    def run(*args: str) -> dict[str, Any]:
        res = subprocess.run([*cli, *args, "--json"], env=env, capture_output=True, text=True,  # noqa: S603
                             check=False, timeout=1500)
        if res.returncode != 0:
            raise RuntimeError(f"forklift {' '.join(args)} failed: {res.stderr[-800:]}")
        return cast(dict[str, Any], json.loads(res.stdout))

    port, gw_port = _free_port(), _free_port()
    try:
        up = run("up", "default", "--name", "b", "--set", f"serve.port={port}")
        run("gateway", "up", "b", "--port", str(gw_port))
        key = str(run("gateway", "key", "add", "bench")["key"])
        direct_url, gw_url, model = str(up["endpoint"]), f"http://127.0.0.1:{gw_port}", str(up["served_name"])
        ttft(direct_url, model, None)
        ttft(gw_url, model, key)
        direct, through = [], []
        for _ in range(n):
            direct.append(ttft(direct_url, model, None))
            through.append(ttft(gw_url, model, key))
    finally:
        subprocess.run([*cli, "gateway", "down"], env=env, capture_output=True, check=False)  # noqa: S603
        subprocess.run([*cli, "down", "b"], env=env, capture_output=True, check=False)  # noqa: S603
        shutil.rmtree(home, ignore_errors=True)
    ms = 1000.0
    result = {
        "benchmark": "gateway_latency",
        "what": "TTFT (ms) of a streamed chat completion, one at a time, bundled SmolLM2 on vLLM-CPU (enforce_eager), "
                "direct vs through `forklift gateway` (LiteLLM proxy + forklift hooks)",
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_1m": round(os.getloadavg()[0], 2)},
        "requests_each": n,
        "direct_p50_ms": round(statistics.median(direct) * ms, 1),
        "direct_p99_ms": round(_pct(direct, 0.99) * ms, 1),
        "gateway_p50_ms": round(statistics.median(through) * ms, 1),
        "gateway_p99_ms": round(_pct(through, 0.99) * ms, 1),
        "added_p50_ms": round((statistics.median(through) - statistics.median(direct)) * ms, 1),
        "added_p99_ms": round((_pct(through, 0.99) - _pct(direct, 0.99)) * ms, 1),
        "added_paired_median_ms": round(statistics.median(t - d for t, d in zip(through, direct, strict=True)) * ms, 1),
        "direct_ms": [round(x * ms, 1) for x in direct],
        "gateway_ms": [round(x * ms, 1) for x in through],
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "gateway_latency.json").write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50), indent=2))

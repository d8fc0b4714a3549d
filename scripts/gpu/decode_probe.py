#!/usr/bin/env python3
"""Single-stream decode and prefill speed of an OpenAI-compatible endpoint, standard library only.

Independent of forklift's bench, so plain `vllm serve` and forklift deployments are measured the same way.
Prints one JSON object. Usage: decode_probe.py [ENDPOINT] [MODEL]   (default http://127.0.0.1:8000 m)
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request


def post(endpoint: str, body: dict[str, object]) -> tuple[dict[str, object], float]:
    req = urllib.request.Request(f"{endpoint}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=300) as resp:  # noqa: S310 - local endpoint
        data = json.load(resp)
    return data, time.perf_counter() - t


def main() -> None:
    endpoint = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000"
    model = sys.argv[2] if len(sys.argv) > 2 else "m"
    out: dict[str, object] = {"endpoint": endpoint, "model": model}
    post(endpoint, {"model": model, "prompt": "hello", "max_tokens": 16})  # warm-up
    for n in (256, 1024):
        data, dt = post(endpoint, {"model": model, "prompt": "hello world", "max_tokens": n,
                                   "ignore_eos": True, "temperature": 0})
        toks = data["usage"]["completion_tokens"]  # type: ignore[index]
        out[f"decode_{n}_tok_s"] = round(toks / dt, 1)
        out[f"decode_{n}_s"] = round(dt, 3)
    data, dt = post(endpoint, {"model": model, "prompt": "hi " * 4000, "max_tokens": 1})
    out["prefill_prompt_tokens"] = data["usage"]["prompt_tokens"]  # type: ignore[index]
    out["prefill_tok_s_incl_1_decode"] = round(data["usage"]["prompt_tokens"] / dt, 1)  # type: ignore[index]
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""Cold `forklift up` -> ready, against plain `python -m vllm.entrypoints.openai.api_server`.

Same model (the bundled SmolLM2), same flags and env, same readiness bar for both: /health 200 and a
streamed chat completion's first token. Alternates the two, N runs each; writes
bench-results/up_vs_plain.json. Run: `python -m benchmarks.up_vs_plain [N]`.
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

import httpx

from forklift import recipe as recipes
from forklift.endpoint import Endpoint
from forklift.launch.flags import rank_env, serve_flags
from forklift.model.bundled import prepare
from forklift.plan import Decisions

OUT = Path("bench-results")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def plain_once(model_dir: Path, port: int) -> float:
    r = recipes.load("default", [f"serve.port={port}"])
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
            "--served-model-name", r.served_name, *serve_flags(r.serve), "--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, **rank_env(r, Decisions())}
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)  # noqa: S603
        try:
            endpoint = f"http://127.0.0.1:{port}"
            while True:
                if proc.poll() is not None:
                    raise RuntimeError("plain vLLM exited during startup")
                with Endpoint(endpoint) as client:
                    try:
                        if client.healthy(timeout=2):
                            client.first_token(r.served_name)
                            return time.monotonic() - t0
                    except httpx.HTTPError:
                        pass
                time.sleep(1.0)
        finally:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=60)


def forklift_once(port: int) -> float:
    home = tempfile.mkdtemp(prefix="fl-bench-")
    env = {**os.environ, "FORKLIFT_HOME": home}
    cli = [sys.executable, "-m", "forklift.cli.main"]
    t0 = time.monotonic()
    res = subprocess.run([*cli, "up", "--name", "b", "--set", f"serve.port={port}", "--json"],  # noqa: S603
                         env=env, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - t0
    subprocess.run([*cli, "down", "b"], env=env, capture_output=True, check=False)  # noqa: S603
    shutil.rmtree(home, ignore_errors=True)
    if res.returncode != 0:
        raise RuntimeError(f"forklift up failed: {res.stderr[-500:]}")
    return elapsed


def main(runs: int = 3) -> dict[str, object]:
    model_dir = prepare("smollm2-135m-instruct")
    plain: list[float] = []
    fork: list[float] = []
    for _ in range(runs):
        fork.append(round(forklift_once(_free_port()), 2))
        plain.append(round(plain_once(model_dir, _free_port()), 2))
    result = {
        "benchmark": "up_vs_plain",
        "what": "seconds from process start to the first streamed token, bundled SmolLM2, enforce_eager",
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "runs": runs,
        "forklift_up_s": fork,
        "plain_api_server_s": plain,
        "forklift_median_s": statistics.median(fork),
        "plain_median_s": statistics.median(plain),
        "overhead_s": round(statistics.median(fork) - statistics.median(plain), 2),
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "up_vs_plain.json").write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3), indent=2))

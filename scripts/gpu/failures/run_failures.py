"""Runs ON THE DEVICE: causes the failures doctor's corpus wants (issue 17) with real vLLM 0.26 on dummy weights.

Each item is a plain `vllm serve` that fails within a minute or two (bounded by TIMEOUT); items run in lanes, one
lane per GPU given (--gpus 2,3), so they never share a GPU with anything measured. Per item, under OUT/doctor-gpu/ID/:
serve.log (stdout+stderr, whole), dmesg.txt, cmd.txt, rc.txt. Stdlib only.

    python3 scripts/gpu/failures/run_failures.py --gpus 2,3 --out $OUT --budget 400
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

TIMEOUT = 150
M = str(Path.home() / "stage" / "models" / "llama8b-like")
BASE = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", M, "--load-format", "dummy"]
# id -> (extra args, setup shell command run first (killed after), extra env)
ITEMS: dict[str, tuple[list[str], str | None, dict[str, str]]] = {
    "g01-kv-too-small": (["--max-model-len", "32768", "--gpu-memory-utilization", "0.13"], None, {}),
    "g06-tp-heads": (["--tensor-parallel-size", "3"], None, {}),
    "g08-port-taken": ([], "python3 -m http.server {port} --bind 127.0.0.1", {}),
    "g09-model-missing": (["--model", "/nonexistent/llama8b-like"], None, {}),
    "g11-max-len-too-big": (["--max-model-len", "1000000"], None, {}),
    "g12-bad-tool-parser": (["--enable-auto-tool-choice", "--tool-call-parser", "no-such-parser"], None, {}),
    "g02-kv-no-blocks": (["--gpu-memory-utilization", "0.08"], None, {}),
    "g13-attn-backend-missing": (["--attention-backend", "FLASHINFER"], None, {}),
    "g14-bad-kv-dtype": (["--kv-cache-dtype", "fp8_e5m2", "--attention-backend", "FLASH_ATTN"], None, {}),
    "g10-repo-offline": (["--model", "someorg/not-a-real-model-xyz"], None, {}),
    "g05-oom-profile": (["--max-num-batched-tokens", "2000000", "--max-num-seqs", "2048", "--max-model-len", "8192",
                         "--gpu-memory-utilization", "0.95"], None, {}),
    "g04-oom-weights": (["--gpu-memory-utilization", "0.05", "--enforce-eager"],
                        "python3 -c \"import torch,time; x=torch.empty(int(128e9),dtype=torch.uint8,device='cuda'); "
                        "print('holding', flush=True); time.sleep(600)\"", {}),
    "g07-tp-more-than-gpus": (["--tensor-parallel-size", "2"], None, {}),
}


def _argv(item: str, port: int) -> list[str]:
    extra, _, _ = ITEMS[item]
    argv = list(BASE)
    if "--model" in extra:  # replaces the model path
        i = extra.index("--model")
        argv[4] = extra[i + 1]
        extra = extra[:i] + extra[i + 2:]
        if "/" in argv[4] and not argv[4].startswith("/"):
            argv = argv[:5]  # a hub id: no dummy load format, so it really asks the hub (offline)
    return [*argv, "--port", str(port), *extra]


def run_item(item: str, gpu: str, port: int, out: Path) -> str:
    folder = out / "doctor-gpu" / item
    folder.mkdir(parents=True, exist_ok=True)
    _, setup, extra_env = ITEMS[item]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu, **extra_env}
    helper = None
    if setup:
        helper = subprocess.Popen(setup.format(port=port), shell=True, env=env, start_new_session=True,  # noqa: S602
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(15 if "torch" in setup else 2)
    argv = _argv(item, port)
    (folder / "cmd.txt").write_text(f"CUDA_VISIBLE_DEVICES={gpu} " + shlex.join(argv)
                                    + (f"\nsetup: {setup.format(port=port)}" if setup else "") + "\n")
    t0 = time.monotonic()
    with open(folder / "serve.log", "wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # noqa: S603
        try:
            rc = proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
            (folder / "cmd.txt").open("a").write(f"note: still running after {TIMEOUT} s (killed)\n")
    if helper is not None:
        os.killpg(helper.pid, signal.SIGKILL)
        helper.wait()
    (folder / "rc.txt").write_text(f"{rc}\n")
    dmesg = subprocess.run(["dmesg", "-T"], capture_output=True, text=True, check=False)
    (folder / "dmesg.txt").write_text("\n".join((dmesg.stdout or dmesg.stderr).splitlines()[-300:]) + "\n")
    return f"{item} gpu {gpu} rc {rc} {time.monotonic() - t0:.0f}s"


def lane(gpu: str, port: int, queue: list[str], out: Path, deadline: float, lock: threading.Lock) -> None:
    while True:
        with lock:
            if not queue or time.monotonic() + 30 > deadline:
                return
            item = queue.pop(0)
        print(f"[{time.strftime('%H:%M:%S')}] {run_item(item, gpu, port, out)}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="0")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--budget", type=float, default=400)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    queue = [i for i in ITEMS if not args.only or i in args.only.split(",")]
    deadline = time.monotonic() + args.budget
    lock = threading.Lock()
    threads = [threading.Thread(target=lane, args=(g, 8100 + k, queue, Path(args.out), deadline, lock))
               for k, g in enumerate(args.gpus.split(","))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"not run: {' '.join(queue) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

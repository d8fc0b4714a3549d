"""Runs the planner's H200 grid ON THE DEVICE (stdlib only; called by scripts/gpu/device_grid.sh after staging).

Each point of points.json boots plain `vllm serve MODEL --load-format dummy` with the point's settings, keeps the
whole log, and stops the server as soon as the engine reports `init engine (profile, create kv cache, warmup
model) took` (after the KV sizing and the CUDA-graph capture lines), or when it exits (a point that does not fit
exits with vLLM's own error). One lane per GPU of the machine (nvidia-smi -L; GRID_GPUS=N overrides): a point with
TP=k waits for k free GPUs, so nvidia-h200-x4 runs two TP=2 points at once. While a point runs, its process tree's
anonymous host memory (RssAnon summed over the session) and the host's MemAvailable are sampled once a second into
ID-MODEL.mem.tsv with the last startup milestone reached (on a unified-memory GPU vLLM counts that growth as
non-torch memory). A point is not started when less than --min-start seconds of the call's budget are left; running
points are stopped at the deadline and marked "cut". Logs stay in $HOME/grid/logs (so a later call on the same
warm machine skips finished points) and every call packs all of them into ONE tarball under $OUT with a
one-line-per-point summary.

    python3 scripts/gpu/grid/run_grid.py --out "$OUT" --budget 560 [--only p23,p24] [--from p09] [--redo]
    (--only runs the listed points in the listed order, finished or not)
    python3 scripts/gpu/grid/run_grid.py --dry        # print the commands (no GPU needed)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
HOME = Path(os.environ.get("GRID_HOME", Path.home() / "grid"))
STAGE_MODELS = Path.home() / "stage" / "models"
DONE_RE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took")
# GRID_STOP_AT_KV=1: a sizing run stops once vLLM logged the pool and its concurrency (both come before the
# CUDA-graph capture, ENGINE-NOTES "H200, vLLM 0.26, quantized dummy checkpoints")
if os.environ.get("GRID_STOP_AT_KV"):
    DONE_RE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took|Maximum concurrency for")
FATAL_RE = re.compile(r"(Error|error|Traceback)")
FLAGS = {
    "max_model_len": "--max-model-len", "gpu_memory_utilization": "--gpu-memory-utilization",
    "max_num_batched_tokens": "--max-num-batched-tokens", "max_num_seqs": "--max-num-seqs",
    "kv_cache_dtype": "--kv-cache-dtype", "block_size": "--block-size",
    "kv_cache_memory_bytes": "--kv-cache-memory-bytes",
}
BOOL_FLAGS = {"enforce_eager": "--enforce-eager", "enable_prefix_caching": "--enable-prefix-caching"}
SUMMARY_RES = {
    "weights": re.compile(r"Model loading took ([0-9.]+) GiB"),
    "kv_gib": re.compile(r"Available KV cache memory: ([0-9.]+) GiB"),
    "tokens": re.compile(r"GPU KV cache size: ([0-9,]+) tokens"),
    "conc": re.compile(r"Maximum concurrency for [0-9,]+ tokens per request: ([0-9.]+)x"),
    "cg_est": re.compile(r"Estimated CUDA graph memory: ([0-9.]+) GiB"),
    "cg_took": re.compile(r"Graph capturing finished in [0-9.]+ secs, took ([0-9.]+) GiB"),
    "act": re.compile(r"GiB for weight, ([0-9.]+) GiB for peak activation, ([0-9.]+) GiB for non-torch"),
    "block": re.compile(r"Setting attention block size to ([0-9]+) tokens"),
    "kvblock": re.compile(r"Setting kv cache block size to ([0-9]+)"),
    "need": re.compile(r"\(([0-9.]+) GiB KV cache is needed"),
    "maxlen": re.compile(r"estimated maximum model length is ([0-9]+)"),
}
MILESTONES = [("load", "Model loading took"), ("compiled", "torch.compile took"),
              ("profiled", "Initial profiling/warmup run took"), ("cg_est", "Estimated CUDA graph memory"),
              ("kv", "Available KV cache memory"), ("captured", "Graph capturing finished"), ("done", "init engine")]


def gpu_count() -> int:
    if os.environ.get("GRID_GPUS"):
        return int(os.environ["GRID_GPUS"])
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 2
    return max(1, sum(1 for ln in out.splitlines() if ln.startswith("GPU ")))


def session_rss_anon_kib(sid: int) -> int:
    """RssAnon summed over every process of session sid (the server, its engine and workers, compile workers)."""
    total = 0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[3]) != sid:
                continue
            for ln in (d / "status").read_text().splitlines():
                if ln.startswith("RssAnon:"):
                    total += int(ln.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total


def mem_available_kib() -> int:
    for ln in Path("/proc/meminfo").read_text().splitlines():
        if ln.startswith("MemAvailable:"):
            return int(ln.split()[1])
    return -1


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def model_dir(name: str) -> Path:
    """The staged model folder (config + SmolLM2 tokenizer); built from the tree's copy when not staged."""
    staged = STAGE_MODELS / name
    if (staged / "config.json").is_file() and (staged / "tokenizer.json").is_file():
        return staged
    src = HERE / "models" / f"{name}.config.json"
    if not src.is_file():
        src = HERE.parent / "models" / f"{name}.config.json"
    dst = HOME / "models" / name
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dst / "config.json")
    tok = STAGE_MODELS / "_tokenizer"
    for f in tok.glob("*") if tok.is_dir() else []:
        shutil.copy(f, dst / f.name)
    return dst


def command(point: dict, port: int, dry: bool = False) -> list[str]:
    model = str(STAGE_MODELS / point["model"]) if dry else str(model_dir(point["model"]))
    argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", model, "--load-format", "dummy",
            "--served-model-name", "m", "--host", "127.0.0.1", "--port", str(port),
            "--tensor-parallel-size", str(point.get("tp", 1))]
    for key, value in point.get("serve", {}).items():
        if key in FLAGS:
            argv += [FLAGS[key], str(value)]
        elif key in BOOL_FLAGS:
            argv += [BOOL_FLAGS[key]] if value else []
        else:
            raise SystemExit(f"{point['id']}: unknown serve key {key}")
    return argv + list(point.get("vllm_args", []))


class Run:
    def __init__(self, point: dict, gpus: list[int], port: int) -> None:
        self.point, self.gpus, self.t0 = point, gpus, time.time()
        self.log = HOME / "logs" / f"{point['id']}-{point['model']}.log"
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(map(str, gpus)), VLLM_LOGGING_LEVEL="DEBUG",
                   NCCL_NVLS_ENABLE="0", PYTHONUNBUFFERED="1", **point.get("env", {}))
        argv = command(point, port)
        with self.log.open("w") as fh:
            fh.write(f"# grid point {json.dumps(point)}\n# gpus {gpus}\n# argv {' '.join(argv)}\n")
        self.fh = self.log.open("a")
        self.proc = subprocess.Popen(argv, stdout=self.fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, start_new_session=True)
        self.status = ""
        self.phase, self.seen = -1, 0
        self.mem = (HOME / "logs" / f"{point['id']}-{point['model']}.mem.tsv").open("w")
        self.mem.write("# t_epoch\tt_rel_s\trss_anon_mib\tmem_available_mib\tphase (last milestone in the log)\n")

    def sample(self, text: str) -> None:
        new = text[self.seen:]
        self.phase = max([self.phase] + [i for i, (_, marker) in enumerate(MILESTONES) if marker in new])
        self.seen = max(0, len(text) - 200)
        now = time.time()
        name = MILESTONES[self.phase][0] if self.phase >= 0 else "start"
        self.mem.write(f"{now:.1f}\t{now - self.t0:.1f}\t{session_rss_anon_kib(self.proc.pid) / 1024:.0f}\t"
                       f"{mem_available_kib() / 1024:.0f}\t{name}\n")
        self.mem.flush()

    def poll(self) -> bool:
        """True when finished (sizing done, exited, or past its own limit)."""
        if self.status:
            return True
        text = self.log.read_text(errors="replace")
        self.sample(text)
        if DONE_RE.search(text):
            time.sleep(2)
            self.stop("ok")
        elif self.proc.poll() is not None:
            self.stop(f"exit{self.proc.returncode}")
        elif time.time() - self.t0 > POINT_LIMIT:
            self.stop("timeout")
        return bool(self.status)

    def stop(self, status: str) -> None:
        self.status = status
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                for _ in range(wait * 4):
                    if self.proc.poll() is not None:
                        break
                    time.sleep(0.25)
                if self.proc.poll() is not None:
                    break
        self.fh.close()
        self.mem.close()
        wait_gpus_free(self.gpus, 40)
        self.seconds = time.time() - self.t0
        if status != "cut":  # a cut point runs again in the next call
            (HOME / "done").mkdir(exist_ok=True)
            (HOME / "done" / self.point["id"]).write_text(status)

    def summary(self) -> str:
        text = self.log.read_text(errors="replace")
        found = []
        for key, rx in SUMMARY_RES.items():
            m = rx.findall(text)
            if m:
                found.append(f"{key}={'/'.join(m[-1]) if isinstance(m[-1], tuple) else m[-1]}")
        err = ""
        if not self.status.startswith("ok"):
            lines = [ln for ln in text.splitlines() if FATAL_RE.search(ln) and "DEBUG" not in ln]
            err = " err=" + (lines[-1].strip()[-160:] if lines else "?")
        p = self.point
        return (f"{p['id']} {p['set']} {p['model']} tp{p.get('tp', 1)} {self.status} {self.seconds:.0f}s "
                + " ".join(found) + err)


def wait_gpus_free(gpus: list[int], limit: int) -> None:
    for _ in range(limit):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired):
            return
        used = {int(a): int(b) for a, b in (ln.split(",") for ln in out.strip().splitlines() if "," in ln)}
        if all(used.get(g, 0) < 1024 for g in gpus):
            return
        time.sleep(1)
    log(f"WARNING: GPUs {gpus} still hold memory")


def pack(out: Path, tag: str, lines: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"grid-{tag}.txt").write_text("\n".join(lines) + "\n")
    with tarfile.open(out / f"grid-{tag}.tar.gz", "w:gz") as tar:
        for f in sorted([*(HOME / "logs").glob("*.log"), *(HOME / "logs").glob("*.mem.tsv")]):
            tar.add(f, arcname=f"h200-grid/{f.name}")
        tar.add(out / f"grid-{tag}.txt", arcname=f"h200-grid/summary-{tag}.txt")
        tar.add(HERE / "points.json", arcname="h200-grid/points.json")


def select(points: list[dict], args: argparse.Namespace) -> list[dict]:
    ids = [p["id"] for p in points]
    if args.only:
        by_id = {p["id"]: p for p in points}
        unknown = [i for i in args.only.split(",") if i not in by_id]
        if unknown:
            raise SystemExit(f"--only: no such point(s): {','.join(unknown)}")
        return [by_id[i] for i in args.only.split(",")]
    if args.from_:
        points = points[ids.index(args.from_):]
    if not args.redo:
        points = [p for p in points if not (HOME / "done" / p["id"]).is_file()]
    return points


def main() -> int:
    global POINT_LIMIT
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--budget", type=float, default=560, help="seconds this call may use in all")
    ap.add_argument("--min-start", type=float, default=150, help="do not start a point with less left")
    ap.add_argument("--point-limit", type=float, default=330)
    ap.add_argument("--only", default="")
    ap.add_argument("--from", dest="from_", default="")
    ap.add_argument("--redo", action="store_true")
    ap.add_argument("--dry", action="store_true")
    ap.add_argument("--tag", default=time.strftime("%H%M%S"))
    args = ap.parse_args()
    POINT_LIMIT = args.point_limit
    start = time.time()
    points = json.loads((HERE / "points.json").read_text())["points"]
    if args.dry:
        for p in select(points, args):
            print(p["id"], " ".join(command(p, 8000, dry=True)))
        return 0
    (HOME / "logs").mkdir(parents=True, exist_ok=True)
    queue = select(points, args)
    gpus_all = list(range(gpu_count()))
    log(f"{len(queue)} point(s) to run: {' '.join(p['id'] for p in queue)}; {len(gpus_all)} GPU(s); "
        f"budget {args.budget:.0f} s")
    running: list[Run] = []
    lines: list[str] = []
    while queue or running:
        left = args.budget - (time.time() - start)
        for run in list(running):
            if left < 15:
                run.stop("cut")
            if run.poll():
                running.remove(run)
                lines.append(run.summary())
                log(lines[-1])
        left = args.budget - (time.time() - start)
        free = [g for g in gpus_all if not any(g in r.gpus for r in running)]
        while queue and left >= args.min_start and len(free) >= queue[0].get("tp", 1):
            nxt = queue.pop(0)
            need = nxt.get("tp", 1)
            gpus, free = free[:need], free[need:]
            running.append(Run(nxt, gpus, 8000 + gpus[0]))
            log(f"start {nxt['id']} {nxt['model']} tp{need} on GPU {gpus} ({left:.0f} s left)")
        if queue and queue[0].get("tp", 1) > len(gpus_all):
            skipped = queue.pop(0)
            lines.append(f"{skipped['id']} {skipped['set']} {skipped['model']} tp{skipped.get('tp', 1)} not-run "
                         f"(needs more GPUs than {len(gpus_all)})")
        if queue and not running and left < args.min_start:
            break
        time.sleep(1)
    for p in queue:
        lines.append(f"{p['id']} {p['set']} {p['model']} tp{p.get('tp', 1)} not-run (budget)")
    lines.append(f"# call used {time.time() - start:.0f} s; not run: {' '.join(p['id'] for p in queue) or 'none'}")
    pack(Path(args.out), args.tag, lines)
    log(f"packed {args.out}/grid-{args.tag}.tar.gz; not run: {' '.join(p['id'] for p in queue) or 'none'}")
    return 0


POINT_LIMIT = 330.0

if __name__ == "__main__":
    sys.exit(main())

#!/bin/bash
# Runs ON THE DEVICE (nvidia-h200-x2, after or while staging: device_stage.sh runs first, so the call that carries
# the last chunk can start the grid). Boots every point of scripts/gpu/grid/points.json with plain
# `vllm serve MODEL --load-format dummy` (one point per free GPU set: TP=k takes k GPUs; x4 runs two TP=2 at once),
# stops each server right after its KV sizing and CUDA-graph capture lines ("init engine ... took"), keeps every
# log, and packs them all into ONE tarball $OUT/grid-TAG.tar.gz plus $OUT/grid-TAG.txt (one line per point).
# Finished points are remembered in $HOME/grid/done, so the next call on the same warm machine resumes; on a
# fresh machine pass the remaining ids (ONLY=p12,p13: run in that order) or the first one (FROM=p12). Each point
# also leaves ID-MODEL.mem.tsv (host memory of its process tree, once a second) in the tarball.
#
# Usage: [TAG=a] [BUDGET=s] [ONLY=p01,p02] [FROM=p09] [REDO=1] bash scripts/gpu/device_grid.sh
# A call may run at most 600 s: the budget defaults to 565 s minus the staging time of this call; a point is not
# started with less than 150 s left (MIN_START), and running points are stopped ("cut", rerun next call) at the end.
OUT=${OUT:-/tmp/out}; TAG=${TAG:-$(date +%H%M%S)}; mkdir -p "$OUT"
bash scripts/gpu/device_stage.sh; rc=$?
[ $rc -eq 0 ] || { echo "grid: not staged yet (device_stage.sh rc=$rc)"; exit $rc; }
. "$HOME/stage/env.sh"
export NCCL_NVLS_ENABLE=0
mkdir -p "$HOME/grid/logs"
{
  echo "# grid environment, call $TAG, $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv,noheader
  python3 - <<'PY'
import importlib.metadata as md, importlib.util as iu
for p in ("vllm", "torch", "transformers", "triton"):
    try:
        print(p, md.version(p))
    except md.PackageNotFoundError:
        print(p, "absent")
for m in ("flashinfer", "triton_kernels", "deep_gemm"):
    print(m, "importable" if iu.find_spec(m) else "absent")
PY
  env | grep -E '^(VLLM|NCCL|CUDA|TORCH)_' | sort
} > "$HOME/grid/logs/env-$TAG.log" 2>&1
head -5 "$HOME/grid/logs/env-$TAG.log"
BUDGET=${BUDGET:-$((565 - SECONDS))}
ARGS=(--out "$OUT" --tag "$TAG" --budget "$BUDGET" --min-start "${MIN_START:-150}")
[ -n "${ONLY:-}" ] && ARGS+=(--only "$ONLY")
[ -n "${FROM:-}" ] && ARGS+=(--from "$FROM")
[ -n "${REDO:-}" ] && ARGS+=(--redo)
python3 scripts/gpu/grid/run_grid.py "${ARGS[@]}"

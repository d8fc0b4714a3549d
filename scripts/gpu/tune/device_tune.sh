#!/bin/bash
# ON THE DEVICE: stage (the call may carry the last chunk), then `run_tune.py PHASE BUDGET [SETS]`.
#   run carry=[".dev/cN"] command="bash scripts/gpu/tune/device_tune.sh search 7.5"
#   run command="bash scripts/gpu/tune/device_tune.sh confirm 8 'serve.max_num_seqs=16'"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash scripts/gpu/device_stage.sh || exit $?
. "$HOME/stage/env.sh"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
PYTHONUNBUFFERED=1 python3 scripts/gpu/tune/run_tune.py "$@" 2>&1 | tee "$OUT/tune-$1.log"

#!/bin/bash
# Runs ON THE DEVICE (nvidia-h200, vLLM 0.26.0 staged by scripts/gpu/device_stage.sh). Boots each listed point of
# points.json beside this script with plain `vllm serve MODEL --load-format dummy` (DEBUG logs) and stops it once
# vLLM logged the KV pool and its concurrency ("Maximum concurrency for": the pool is sized before graph capture),
# or when it exits. The model folder (config + Qwen3.5-style preprocessor configs + SmolLM2's tokenizer with the
# four vision tokens added) is built from models/ beside this script. Logs land in $OUT.
# Usage: [HERE=dir] bash run_hybrid.sh h01 h02 ...
HERE=${HERE:-$(cd "$(dirname "$0")" && pwd)}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash scripts/gpu/device_stage.sh >/dev/null 2>&1; rc=$?
[ $rc -eq 0 ] || { echo "hybrid: not staged (rc=$rc)"; exit $rc; }
. "$HOME/stage/env.sh"
M=$HOME/stage/models/qwen36-27b-mtp-vl; mkdir -p "$M"
cp -n "$HOME"/stage/models/_tokenizer/* "$M"/ 2>/dev/null
cp -f "$HERE"/models/qwen36-27b-mtp-vl/* "$M"/
python3 - "$M" <<'PY' || exit 5
import sys, time
t = time.time()
from transformers import AutoProcessor
p = AutoProcessor.from_pretrained(sys.argv[1])
print("processor", type(p).__name__, p.image_token, p.tokenizer.convert_tokens_to_ids(p.image_token), f"{time.time()-t:.1f}s")
PY
for id in "$@"; do
  [ $SECONDS -gt ${BUDGET:-360} ] && { echo "$id: not started (call budget)"; continue; }
  args=$(python3 -c "import json,sys;p=[p for p in json.load(open('$HERE/points.json'))['points'] if p['id']=='$id'][0];print(' '.join(p['vllm_args']))")
  log=$OUT/$id-qwen36-27b-mtp-vl.log; t=$SECONDS
  echo "== $id: vllm serve $args"
  VLLM_LOGGING_LEVEL=DEBUG setsid python3 -m vllm.entrypoints.cli.main serve "$M" --load-format dummy --served-model-name m \
    --host 127.0.0.1 --port 8123 $args > "$log" 2>&1 &
  pid=$!
  while kill -0 $pid 2>/dev/null; do
    grep -q "Maximum concurrency for" "$log" && break
    [ $((SECONDS-t)) -gt ${LIMIT:-420} ] && { echo "$id: cut at ${LIMIT:-420}s"; break; }
    sleep 2
  done
  kill -TERM -- -$pid 2>/dev/null; sleep 3; kill -KILL -- -$pid 2>/dev/null; wait $pid 2>/dev/null
  echo "$id: $((SECONDS-t))s"; grep -E "Model loading took|peak activation|Available KV cache memory|GPU KV cache size|Maximum concurrency|Encoder cache will|Error|error:" "$log" | tail -8
  for i in $(seq 1 20); do [ "$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)" -lt 1000 ] && break; sleep 1; done
done

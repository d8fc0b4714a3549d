#!/bin/bash
# Runs ON THE DEVICE (last call of a staging series): stage, then `forklift up` of one dummy recipe,
# GET /v1/models, a single-stream decode probe, `forklift status`, `forklift down`, GPU memory after.
# Results under $OUT: summary.txt, up.json, down.json, rank0.log, smoke.tar.gz (everything).
# Usage: bash scripts/gpu/device_smoke.sh [RECIPE] [UP_TIMEOUT_S]
R=${1:-scripts/gpu/recipes/llama8b-bf16.yaml}; UPT=${2:-420}
OUT=${OUT:-/tmp/out}; W=$(mktemp -d); mkdir -p "$OUT"
exec > >(tee "$W/summary.txt") 2>&1
T0=$SECONDS
bash scripts/gpu/device_stage.sh; rc=$?
echo "stage rc=$rc at $((SECONDS-T0)) s"
finish() { cp "$W/summary.txt" "$OUT/" 2>/dev/null; tar -czf "$OUT/smoke.tar.gz" -C "$W" . 2>/dev/null; }
[ $rc -eq 0 ] || { finish; exit $rc; }
. "$HOME/stage/env.sh"
nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv,noheader | sed 's/^/gpu before: /'
t=$SECONDS
timeout "$UPT" python3 -m forklift.cli.main up "$R" --name smoke --json --set "timeouts.ready_s=$((UPT-20))" \
  > "$W/up.json" 2> "$W/up.stderr"; uprc=$?
echo "up rc=$uprc in $((SECONDS-t)) s"; cat "$W/up.json"; tail -25 "$W/up.stderr" | cut -c1-300
LOG=$FORKLIFT_HOME/runs/smoke/rank0.log
if [ $uprc -eq 0 ]; then
  curl -s -m 10 http://127.0.0.1:8000/v1/models > "$W/models.json"; echo "v1/models: $(cut -c1-300 "$W/models.json")"
  timeout 90 python3 scripts/gpu/decode_probe.py http://127.0.0.1:8000 m | tee "$W/decode.json"
fi
forklift status smoke --json > "$W/status.json" 2>&1
echo "--- sizing lines (rank 0 log)"
grep -a -E "Model loading took|Available KV cache|GPU KV cache size|Maximum concurrency|CUDA graph|Memory profiling|memory profiling|torch peak|non_torch|Estimated|init engine|Error|error" "$LOG" \
  | cut -c1-260 | head -30
t=$SECONDS
timeout 120 python3 -m forklift.cli.main down smoke --json > "$W/down.json" 2> "$W/down.stderr"; echo "down rc=$? in $((SECONDS-t)) s"
cat "$W/down.json"; tail -5 "$W/down.stderr"
for s in 0 5; do sleep $s; echo "gpu after down +${s}s: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"; done
echo "processes left: $(ps -eo pid,pgid,cmd | grep -E 'vllm|forklift.engine' | grep -v grep | wc -l)"
cp "$LOG" "$W/rank0.log" 2>/dev/null; cp "$LOG" "$W/up.json" "$W/down.json" "$OUT/" 2>/dev/null
echo "total $((SECONDS-T0)) s"
finish

#!/bin/bash
# Runs ON THE DEVICE after device_stage.sh (from this tree's root): load_memory_probe.py with PROBE_TRACE for the
# grid's llama8b AWQ, Qwen3-8B AWQ, llama8b GPTQ and bf16 models, the AWQ one twice (same order of events?).
# $OUT: trace-N-MODEL.json.gz (the allocator's events of the load) and probe-logs.tar.gz (each run's log).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/probe-logs
. "$HOME/stage/env.sh"
export PYTHONUNBUFFERED=1
run() {  # run N MODEL
  local i=$1 m=$2 d=$HOME/models/$2 t=$SECONDS
  mkdir -p "$d"
  local src=scripts/gpu/grid/models/$m.config.json; [ -f "$src" ] || src=scripts/gpu/models/$m.config.json
  cp "$src" "$d/config.json"; cp -n "$HOME"/stage/models/_tokenizer/* "$d/" 2>/dev/null
  PROBE_TRACE=$OUT/trace-$i-$m.json.gz timeout 110 python3 scripts/gpu/grid/load_memory_probe.py "$d" \
    > /tmp/probe-logs/r9-probe-$i-$m.log 2>&1
  echo "$i $m rc=$? $((SECONDS-t)) s $(grep -o '"consumed_bytes": [0-9]*, "before": [0-9]*, "after": [0-9]*, "model_storage_bytes": [0-9]*' /tmp/probe-logs/r9-probe-$i-$m.log) $(stat -c %s $OUT/trace-$i-$m.json.gz 2>/dev/null)"
  grep -E "Error" /tmp/probe-logs/r9-probe-$i-$m.log | tail -3
}
# in parallel: memory_allocated and the allocator's trace are per process; each run stops after its load
i=0
for m in ${MODELS:-llama8b-q-awq qwen3-8b-q-awq llama8b-q-gptq llama8b-like llama8b-q-awq}; do
  i=$((i+1)); run $i $m & sleep 2
done
wait
tar -czf "$OUT/probe-logs.tar.gz" -C /tmp probe-logs
env | grep -E '^(PYTORCH|VLLM)_' | sort

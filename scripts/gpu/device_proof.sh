#!/bin/bash
# Runs ON THE DEVICE after staging (scripts/gpu/device_stage.sh must have reached "ready" on this machine).
# For each recipe: forklift plan (if the command exists) -> up --json -> check --quick --json (if it exists)
# -> bench (if it exists) -> decode_probe.py -> status --json -> rank logs -> down --json -> GPU memory after.
# With PLAIN=1 it also serves plain `vllm serve MODEL --load-format dummy` (vLLM's defaults otherwise) and
# probes it the same way, for the decode-efficiency comparison.
# Every JSON and log goes to a work dir that is tarred to $OUT/proof-TAG.tar.gz; $OUT/proof-TAG.txt is the
# summary (the device tool returns at most 8 files, so keep to one tar per call).
#
# Usage: bash scripts/gpu/device_proof.sh RECIPE.yaml...
#   env: TAG (default: time), PLAIN=1, PLAIN_MODEL (default ~/stage/models/llama8b-like),
#        UP_TIMEOUT (s, default 300), BENCH_ARGS (default "--concurrency 1,4 --input-len 512 --output-len 256 --json"),
#        CHECK_ARGS (default "--quick --json"), NOCHECK=1 / NOBENCH=1 to skip those steps
# Keep each call under the tool's 600 s: a cold start is ~1.5-4 min (llama8b-bf16: ready in 106 s), so 2-3
# recipes per call. The first proof call may carry the last staging chunk: device_stage.sh runs first.
OUT=${OUT:-/tmp/out}; TAG=${TAG:-$(date +%H%M%S)}; W=$(mktemp -d); mkdir -p "$OUT"
UPT=${UP_TIMEOUT:-300}; BENCH_ARGS=${BENCH_ARGS:---concurrency 1,4,16 --requests 16 --input-len 512 --output-len 256 --json}; CHECK_ARGS=${CHECK_ARGS:---quick --json}
exec > >(tee "$W/summary.txt") 2>&1
bash scripts/gpu/device_stage.sh >/dev/null || { echo "not staged: run device_stage.sh first"; exit 10; }
. "$HOME/stage/env.sh"
has() { python3 -m forklift.cli.main "$1" --help >/dev/null 2>&1; }
gpu_mem() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | tr '\n' ' '; }
wait_gpu_free() {  # until every GPU shows < 1 GiB used, at most $1 s
  for _ in $(seq 1 "$1"); do [ -z "$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | awk '$1>=1024')" ] && return 0; sleep 1; done; return 1; }
SIZING='Model loading took|Available KV cache|GPU KV cache size|Maximum concurrency|CUDA graph|Memory profiling|memory profiling|torch peak|non_torch|Estimated|init engine'
echo "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1) x$(nvidia-smi -L | wc -l)"
echo "commands: plan=$(has plan && echo y || echo n) check=$(has check && echo y || echo n) bench=$(has bench && echo y || echo n)"

for R in "$@"; do
  n=$(basename "$R" .yaml); d=$W/$n; mkdir -p "$d"; t0=$SECONDS
  echo "=== $n ($R)"
  if has plan; then timeout 120 python3 -m forklift.cli.main plan "$R" --json > "$d/plan.json" 2> "$d/plan.stderr"; echo "plan rc=$?"; fi
  echo "gpu before up: $(gpu_mem) MiB"
  timeout "$UPT" python3 -m forklift.cli.main up "$R" --name "$n" --json --set "timeouts.ready_s=$((UPT-15))" \
    > "$d/up.json" 2> "$d/up.stderr"; uprc=$?
  echo "up rc=$uprc after $((SECONDS-t0)) s: $(python3 -c "import json,sys;d=json.load(open(sys.argv[1]));print('ready_s',d['ready_s'],'token',repr(d['first_token']))" "$d/up.json" 2>/dev/null || tail -3 "$d/up.stderr")"
  if [ $uprc -eq 0 ]; then
    ep=$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['endpoint'])" "$d/up.json")
    if has check && [ -z "${NOCHECK:-}" ]; then timeout 240 python3 -m forklift.cli.main check "$n" $CHECK_ARGS > "$d/check.json" 2> "$d/check.stderr"; echo "check rc=$?"; fi
    if has bench && [ -z "${NOBENCH:-}" ]; then timeout 300 python3 -m forklift.cli.main bench "$n" $BENCH_ARGS --out "$d/bench" > "$d/bench.json" 2> "$d/bench.stderr"; echo "bench rc=$?"; fi
    timeout 120 python3 scripts/gpu/decode_probe.py "$ep" m > "$d/decode.json" 2> "$d/decode.stderr"; echo "decode: $(cat "$d/decode.json")"
  fi
  python3 -m forklift.cli.main status "$n" --json > "$d/status.json" 2>&1
  for log in "$FORKLIFT_HOME/runs/$n"/*.log; do [ -f "$log" ] && cp "$log" "$d/"; done
  [ -f "$d/rank0.log" ] && grep -a -E "$SIZING" "$d/rank0.log" | cut -c1-240 | head -12
  timeout 120 python3 -m forklift.cli.main down "$n" --json > "$d/down.json" 2> "$d/down.stderr"; echo "down rc=$?"
  echo "gpu after down: $(gpu_mem) MiB; +5 s: $(sleep 5; gpu_mem) MiB"
  echo "ray/vllm processes left: $(ps -eo pid,args | grep -E 'raylet|gcs_server|ray::|default_worker|vllm_main' | grep -v grep | wc -l)"
  wait_gpu_free 60 || echo "WARNING: GPU memory not released after 60 s"
  echo "=== $n done in $((SECONDS-t0)) s"
done

if [ -n "${PLAIN:-}" ]; then
  M=${PLAIN_MODEL:-$HOME/stage/models/llama8b-like}; d=$W/plain-vllm; mkdir -p "$d"; t0=$SECONDS
  echo "=== plain vllm serve $M --load-format dummy (vLLM defaults otherwise)"
  setsid python3 -m vllm.entrypoints.cli.main serve "$M" --load-format dummy --served-model-name m --port 8000 \
    > "$d/serve.log" 2>&1 < /dev/null & pid=$!
  ok=0; for _ in $(seq 1 "$((UPT/2))"); do sleep 2; curl -sf 127.0.0.1:8000/health >/dev/null && ok=1 && break; kill -0 $pid 2>/dev/null || break; done
  echo "plain ready=$ok after $((SECONDS-t0)) s"
  [ $ok = 1 ] && { timeout 120 python3 scripts/gpu/decode_probe.py http://127.0.0.1:8000 m > "$d/decode.json"; echo "decode: $(cat "$d/decode.json")"; }
  grep -a -E "$SIZING|non-default args" "$d/serve.log" | cut -c1-240 | head -12
  kill -TERM -- -$pid 2>/dev/null; for _ in $(seq 1 30); do kill -0 $pid 2>/dev/null || break; sleep 1; done; kill -KILL -- -$pid 2>/dev/null
  wait_gpu_free 60 || echo "WARNING: GPU memory not released after 60 s"
  echo "=== plain done in $((SECONDS-t0)) s"
fi
sleep 1; cp "$W/summary.txt" "$OUT/proof-$TAG.txt"; tar -czf "$OUT/proof-$TAG.tar.gz" -C "$W" .

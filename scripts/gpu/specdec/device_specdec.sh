#!/bin/bash
# Runs ON THE DEVICE (nvidia-h200), from the repo root of the carried working tree, after the vLLM chunks
# (.dev/c1..cN, scripts/gpu/prepare.sh) and SmolLM2's weights (.dev/s1..sN, scripts/gpu/specdec/prepare_smollm2.sh)
# were carried; the last call may carry the last part itself: staging runs first.
#
# A. ngram on SmolLM2-135M's real weights: `forklift up` the baseline and the ngram server (one GPU, 0.25 of its
#    memory each), `check --only speculative` on both, `bench --workload copy|prose --spec-baseline` (c=1 and 4):
#    mean acceptance length, per-position acceptance, tokens per step, decode tok/s with and without drafts.
# B. MTP on a GLM-4.5-Air-like MoE (4 layers + 1 MTP layer, dummy weights): plan vs the startup log (weights, KV),
#    the counters and `check --only speculative` (acceptance is meaningless on random weights), one bench level.
# Everything lands in one tarball, $OUT/specdec-TAG.tar.gz, plus $OUT/specdec-TAG.txt (the summary).
# Bounded: each step has a timeout, B is skipped when A ran long; about 6 minutes in all.
#
# Usage: bash scripts/gpu/specdec/device_specdec.sh
#   env: TAG (default: time), SKIP_MTP=1, REQUESTS (4), DEADLINE (s, default 480: every step's timeout but `down`'s 45 s
#        is cut to what is left, so the servers are stopped and the tarball written inside the tool's 600 s)
OUT=${OUT:-/tmp/out}; TAG=${TAG:-$(date +%H%M%S)}; W=$(mktemp -d); mkdir -p "$OUT"; T0=$SECONDS
REQ=${REQUESTS:-4}; D=scripts/gpu/specdec/recipes; DEADLINE=${DEADLINE:-480}
tmo() { local left=$((DEADLINE - SECONDS + T0)); [ "$left" -lt 5 ] && left=5; [ "$left" -lt "$1" ] && echo "$left" || echo "$1"; }
exec > >(tee "$W/summary.txt") 2>&1
finish() { sleep 1; cp "$W/summary.txt" "$OUT/specdec-$TAG.txt"; tar -czf "$OUT/specdec-$TAG.tar.gz" -C "$W" .; }
trap finish EXIT
bash scripts/gpu/device_stage.sh >/dev/null; rc=$?
[ $rc -eq 0 ] || { echo "vLLM not staged (device_stage.sh rc=$rc): carry .dev/c1..cN first"; exit $rc; }
bash scripts/gpu/specdec/stage_smollm2.sh; rc=$?
[ $rc -eq 0 ] || { echo "SmolLM2 not staged (rc=$rc): carry .dev/s1..sN"; exit $rc; }
. "$HOME/stage/env.sh"
fk() { python3 -m forklift.cli.main "$@"; }
SIZING='Model loading took|Loading drafter|Available KV cache|GPU KV cache size|Maximum concurrency|SpecDecoding metrics|speculative_config=|Model Runner|V2 Model Runner|does not yet support'
echo "device: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1); vllm $(python3 -c 'import importlib.metadata as m;print(m.version("vllm"))')"

up() {  # up NAME RECIPE TIMEOUT
  local t=$SECONDS lim; lim=$(tmo "$3"); [ "$lim" -gt 60 ] || { echo "up $1: skipped, $lim s left"; return 1; }
  timeout "$lim" python3 -m forklift.cli.main up "$2" --name "$1" --json \
    --set "timeouts.ready_s=$((lim - 15))" > "$W/$1.up.json" 2> "$W/$1.up.stderr"; local r=$?
  echo "up $1 rc=$r in $((SECONDS - t)) s"; [ $r -eq 0 ] || tail -5 "$W/$1.up.stderr"; return $r
}
down() {  # down NAME...: logs first, then stop
  for n in "$@"; do
    for log in "$FORKLIFT_HOME/runs/$n"/*.log; do [ -f "$log" ] && cp "$log" "$W/$n.$(basename "$log")"; done
    [ -f "$W/$n.rank0.log" ] && grep -a -E "$SIZING" "$W/$n.rank0.log" | cut -c1-260 | head -14 | sed "s/^/  $n| /"
    timeout 45 python3 -m forklift.cli.main down "$n" --json > "$W/$n.down.json" 2>&1; echo "down $n rc=$?"
  done
}
spec_line() {  # the comparison levels, one line each
  python3 - "$1" <<'PY'
import json, sys
try:
    data = json.load(open(sys.argv[1]))
except Exception as exc:  # noqa: BLE001
    print(f"  no comparison: {exc}"); raise SystemExit
for lv in data.get("spec_comparison", {}).get("levels", []):
    d = lv["decode_tok_s_per_stream"]
    print(f"  c={lv['concurrency']}: AL {lv['acceptance_length']} per-pos {lv['per_position_acceptance_rate']} "
          f"tok/step {lv['tokens_per_step']} coverage {lv['draft_coverage']} | decode/stream {d['speculative']} vs "
          f"{d['baseline']} tok/s = {d['speedup']}x | output {lv['output_tok_s']}")
PY
}

echo "=== A. ngram, SmolLM2-135M real weights ($((SECONDS - T0)) s)"
timeout "$(tmo 60)" python3 -m forklift.cli.main plan "$D/smollm2-ngram.yaml" --json > "$W/plan-ngram.json" 2> "$W/plan-ngram.stderr"
echo "plan rc=$?"
if up smollm2-base "$D/smollm2-base.yaml" 200 && up smollm2-ngram "$D/smollm2-ngram.yaml" 200; then
  for n in smollm2-ngram smollm2-base; do
    timeout "$(tmo 60)" python3 -m forklift.cli.main check "$n" --only speculative --json > "$W/$n.check.json" 2>&1
    python3 -c "import json,sys;c=json.load(open(sys.argv[1]))['checks'][0];print('check',sys.argv[2],c['status'],c['summary'])" "$W/$n.check.json" "$n" 2>/dev/null || tail -2 "$W/$n.check.json"
  done
  for wl in copy prose; do
    len=256; [ $wl = prose ] && len=128
    timeout "$(tmo 150)" python3 -m forklift.cli.main bench smollm2-ngram --workload $wl --concurrency 1,4 --requests "$REQ" \
      --output-len $len --warmup 1 --spec-baseline smollm2-base --out "$W/bench-$wl" --json > "$W/bench-$wl.json" 2> "$W/bench-$wl.stderr"
    echo "bench $wl rc=$?"; spec_line "$W/bench-$wl.json"
  done
fi
down smollm2-ngram smollm2-base

if [ -z "${SKIP_MTP:-}" ] && [ $((SECONDS - T0)) -lt 300 ]; then
  echo "=== B. MTP, GLM-4.5-Air-like 4L + MTP, dummy weights ($((SECONDS - T0)) s)"
  M=$HOME/stage/models/glm45air-4L-mtp-like; mkdir -p "$M"
  cp scripts/gpu/specdec/models/glm45air-4L-mtp-like.config.json "$M/config.json"
  cp -n "$HOME"/stage/models/_tokenizer/* "$M/" 2>/dev/null || cp -n "$HOME"/stage/models/smollm2-135m-instruct/tokenizer* "$M/"
  timeout "$(tmo 60)" python3 -m forklift.cli.main plan "$D/glm-mtp-dummy.yaml" --json > "$W/plan-mtp.json" 2> "$W/plan-mtp.stderr"
  echo "plan rc=$?: $(python3 -c "import json,sys;p=json.load(open(sys.argv[1]));r=p['ranks'][-1];print('weights',r['weights_gib'],'GiB, KV B/token',r['kv_bytes_per_token'],', kv_tokens',p['kv_tokens'])" "$W/plan-mtp.json" 2>/dev/null)"
  if up glm-mtp "$D/glm-mtp-dummy.yaml" 240; then
    timeout "$(tmo 60)" python3 -m forklift.cli.main check glm-mtp --only speculative --json > "$W/glm-mtp.check.json" 2>&1
    python3 -c "import json,sys;c=json.load(open(sys.argv[1]))['checks'][0];print('check glm-mtp',c['status'],c['summary'])" "$W/glm-mtp.check.json" 2>/dev/null
    timeout "$(tmo 90)" python3 -m forklift.cli.main bench glm-mtp --workload copy --concurrency 1 --requests 2 --output-len 128 \
      --warmup 1 --out "$W/bench-mtp" --json > "$W/bench-mtp.json" 2> "$W/bench-mtp.stderr"
    echo "bench mtp rc=$?: $(python3 -c "import json,sys;r=json.load(open(sys.argv[1]))['runs'][0];print('spec_decode',r.get('server_counts',{}).get('spec_decode'),'decode/stream',r.get('decode_tok_s_per_stream'))" "$W/bench-mtp.json" 2>/dev/null)"
  fi
  down glm-mtp
else
  echo "=== B skipped ($((SECONDS - T0)) s used)"
fi
echo "gpu after: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | tr '\n' ' ') MiB; processes left: $(ps -eo args | grep -c '[v]llm_main')"
echo "=== done in $((SECONDS - T0)) s"

#!/bin/bash
# Runs ON THE DEVICE (last call of a staging series): stage, then `forklift probe` of one dummy recipe, the next
# `forklift plan --json` and `plan --apply --json`, GPU memory and processes after. Results under $OUT.
# Usage: bash scripts/gpu/device_probe.sh [RECIPE] [TIMEOUT_S]
R=${1:-scripts/gpu/recipes/llama8b-bf16.yaml}; PT=${2:-420}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/summary.txt") 2>&1
T0=$SECONDS
bash scripts/gpu/device_stage.sh; rc=$?
echo "stage rc=$rc at $((SECONDS-T0)) s"
[ $rc -eq 0 ] || exit $rc
. "$HOME/stage/env.sh"
V=$(python3 -c 'import importlib.metadata as m; print(m.version("vllm"))' 2>/dev/null || echo 0.26.0)
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader | sed 's/^/gpu before: /'
t=$SECONDS
timeout "$PT" python3 -m forklift.cli.main probe "$R" --json --timeout $((PT-30)) > "$OUT/probe.json" 2> "$OUT/probe.stderr"
echo "probe rc=$? in $((SECONDS-t)) s"; head -c 1500 "$OUT/probe.json"; echo; tail -30 "$OUT/probe.stderr" | cut -c1-300
echo "gpu after probe: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
echo "processes left: $(ps -eo pid,pgid,cmd | grep -E 'vllm|forklift.engine' | grep -v grep | wc -l)"
python3 -m forklift.cli.main plan "$R" --json --vllm-version "${V%%+*}" > "$OUT/plan.json" 2> "$OUT/plan.stderr"
echo "plan rc=$?"
python3 -m forklift.cli.main plan "$R" --json --apply --vllm-version "${V%%+*}" > "$OUT/plan-apply.json" 2>> "$OUT/plan.stderr"
echo "plan --apply rc=$?"
python3 -m forklift.cli.main plan "$R" --vllm-version "${V%%+*}" 2>&1 | tail -12
cp -r "$FORKLIFT_HOME/probes" "$OUT/" 2>/dev/null
cp "$FORKLIFT_HOME"/runs/probe-*/rank0.log "$OUT/" 2>/dev/null
echo "total $((SECONDS-T0)) s"

#!/bin/bash
# Runs ON THE DEVICE, at the start of every call, from the repo root of the carried working tree.
# 1. moves each carried chunk (.dev/cK, made by scripts/gpu/prepare.sh) into $HOME/stage (kept while the
#    machine stays warm, ~30 s after a call);
# 2. once every file of the MANIFEST is there (sizes checked): installs the wheels into $HOME/site with
#    pip --target, unpacks the slim vLLM tree there, puts the tokenizer beside each model config in
#    $HOME/stage/models/NAME, and checks that vLLM's API server imports. Each step runs once (marker files).
# 3. writes $HOME/stage/env.sh: PYTHONPATH (this checkout's src first, then $HOME/site), FORKLIFT_HOME, and a
#    `forklift` shell function. Source it: `. $HOME/stage/env.sh`.
# Exit: 0 when staged and importable, 10 while chunks are still missing, other codes on failure.
# Usage: bash scripts/gpu/device_stage.sh [--quiet]
S=$HOME/stage; SITE=$HOME/site; REPO=$PWD
mkdir -p "$S" "$SITE"
for d in .dev/c[0-9]*; do
  [ -d "$d" ] || continue
  (cd "$d" && find . -type f | while read -r f; do mkdir -p "$S/$(dirname "$f")"; mv -f "$f" "$S/$f"; done)
done
[ -f "$S/MANIFEST" ] || { echo "stage: no MANIFEST yet (carry .dev/c1..)"; exit 10; }
missing=0; have=0
while read -r chunk size sum rel; do
  [ "$chunk" = chunks ] && continue
  case "$rel" in vllm.part.*) [ -f "$SITE/.vllm-done" ] && { have=$((have+1)); continue; } ;; esac
  if [ -f "$S/$rel" ] && [ "$(stat -c %s "$S/$rel")" = "$size" ]; then have=$((have+1)); else missing=$((missing+1)); miss_chunks="${miss_chunks:-} $chunk"; fi
done < "$S/MANIFEST"
echo "stage: $have files present, $missing missing$( [ $missing -gt 0 ] && echo " (from:$(echo $miss_chunks | tr ' ' '\n' | sort -u | tr '\n' ' '))")"
df -h "$HOME" | tail -1
[ $missing -eq 0 ] || exit 10

cat > "$S/env.sh" <<EOF
export PYTHONPATH=$REPO/src:$SITE\${PYTHONPATH:+:\$PYTHONPATH}
export FORKLIFT_HOME=\${FORKLIFT_HOME:-$HOME/forklift-home}
export PYTHONUNBUFFERED=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# flashinfer-python is not carried: without this, vLLM 0.26's V2 model runner imports it for top-p/top-k sampling
# (v1/sample/ops/topk_topp_sampler.py) and the engine dies with "No module named 'flashinfer'".
export VLLM_USE_FLASHINFER_SAMPLER=0
forklift() { python3 -m forklift.cli.main "\$@"; }
EOF
. "$S/env.sh"

if [ ! -f "$SITE/.wheels-done" ]; then
  t=$SECONDS
  for first in "$S"/wheels/*.whl.part.000; do  # wheels carried in parts (prepare.sh splits those over PART)
    [ -f "$first" ] && cat "${first%.000}".* > "${first%.part.000}"
  done
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$S"/wheels/*.whl \
    2>&1 | grep -v -E "^WARNING: Target directory .* already exists" || true
  python3 -c "import zstandard, pydantic, fastapi" || exit 3
  touch "$SITE/.wheels-done"; echo "stage: wheels installed in $((SECONDS-t)) s"
fi
if [ ! -f "$SITE/.vllm-done" ]; then
  t=$SECONDS
  cat "$S"/vllm.part.* | python3 -c "import sys,zstandard;zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer,sys.stdout.buffer)" \
    | tar -x -C "$SITE" || exit 4
  rm -f "$S"/vllm.part.*   # free the disk; the tree is in $SITE now
  touch "$SITE/.vllm-done"; echo "stage: vLLM unpacked in $((SECONDS-t)) s"
fi
for m in "$S"/models/*/; do
  case "$m" in */_tokenizer/) continue ;; esac
  cp -n "$S"/models/_tokenizer/* "$m" 2>/dev/null || true
done
if [ ! -f "$SITE/.import-ok" ]; then
  python3 - <<'PY' || exit 5
import importlib.metadata as md, time
t = time.time()
import torch, vllm
import vllm.entrypoints.openai.api_server  # noqa: F401  (names any missing dependency)
import forklift.cli.main  # noqa: F401
print(f"stage: vllm {md.version('vllm')} torch {torch.__version__} cuda {torch.version.cuda} "
      f"gpus {torch.cuda.device_count()}; imports {time.time() - t:.1f} s")
PY
  touch "$SITE/.import-ok"
fi
echo "stage: ready (. $S/env.sh)"

#!/bin/bash
# Builds, on this (dev) machine, the folders that carry SmolLM2-135M-Instruct's real weights to the lent H200:
# .dev/s1 .. .dev/sN, each under PART_MAX bytes (one `run` call carries one, beside the ~2 MB working tree).
# The safetensors file is zstd-compressed (-3: 269 MB -> ~205 MB) and split; config, tokenizer and chat template
# travel in the last part. scripts/gpu/specdec/stage_smollm2.sh reassembles it on the device into
# ~/stage/models/smollm2-135m-instruct (md5-checked). Idempotent: parts newer than the weights are kept.
#
#   bash scripts/gpu/specdec/prepare_smollm2.sh            # build / refresh .dev/s*
#   MODEL=~/.cache/forklift/models/smollm2-135m-instruct    # where the weights are (`forklift model prepare
#                                                           #  bundled:smollm2-135m-instruct` puts them there)
set -euo pipefail
cd "$(dirname "$0")/../../.."
MODEL=${MODEL:-$HOME/.cache/forklift/models/smollm2-135m-instruct}
PART_MAX=${PART_MAX:-58000000}   # bytes per part: < 60 MB, and one part + the working tree < 64 MiB a call
[ -f "$MODEL/model.safetensors" ] || { echo "no $MODEL/model.safetensors" >&2; exit 2; }
command -v zstd >/dev/null || { echo "zstd is needed here" >&2; exit 2; }
if [ -f .dev/s1/MANIFEST ] && [ .dev/s1/MANIFEST -nt "$MODEL/model.safetensors" ] && [ -z "${FORCE:-}" ]; then
  echo "parts up to date:"; du -sb .dev/s[0-9]*; exit 0
fi
rm -rf .dev/s[0-9]* .dev/smollm2-items && mkdir -p .dev/smollm2-items
zstd -q -3 -T0 -f -o .dev/smollm2-items/model.safetensors.zst "$MODEL/model.safetensors"
(cd .dev/smollm2-items && split -b "$((PART_MAX - 4500000))" -d -a 2 model.safetensors.zst weights.part. \
  && rm model.safetensors.zst)
parts=(.dev/smollm2-items/weights.part.*)
n=${#parts[@]}
SUM=$(md5sum "$MODEL/model.safetensors" | cut -d' ' -f1)
for i in $(seq 1 "$n"); do
  d=.dev/s$i; mkdir -p "$d"; mv "${parts[$((i-1))]}" "$d/"
done
for f in config.json generation_config.json tokenizer.json tokenizer_config.json chat_template.jinja \
         special_tokens_map.json; do
  [ -f "$MODEL/$f" ] && cp "$MODEL/$f" ".dev/s$n/"
done
{ echo "parts $n"; echo "md5 $SUM model.safetensors"
  for i in $(seq 1 "$n"); do (cd ".dev/s$i" && for f in *; do echo "s$i $(stat -c %s "$f") $f"; done); done
} > .dev/smollm2-items/MANIFEST
for i in $(seq 1 "$n"); do cp .dev/smollm2-items/MANIFEST ".dev/s$i/MANIFEST"; done
rm -rf .dev/smollm2-items
for i in $(seq 1 "$n"); do
  size=$(du -sb ".dev/s$i" | cut -f1); echo ".dev/s$i: $size bytes"
  [ "$size" -lt 60000000 ] || { echo ".dev/s$i is not under 60 MB" >&2; exit 3; }
done
echo "carry one part per call, back to back, after the vLLM chunks: .dev/s1 .. .dev/s$n"

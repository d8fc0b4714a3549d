#!/bin/bash
# Builds, on this (dev) machine, the folders that carry real vLLM 0.26.0 (CUDA) and forklift's missing
# dependencies to the lent H200: .dev/c1 .. .dev/cN, each under CHUNK_MAX bytes (one `run` call carries one).
# Idempotent: downloads, the slim vLLM tarball and the chunks are reused when present.
#
#   bash scripts/gpu/prepare.sh          # build / refresh .dev/c*
#   FORCE=1 bash scripts/gpu/prepare.sh  # rebuild the slim tarball and the chunks (downloads are kept)
#   ZSTD_LEVEL=6 bash scripts/gpu/prepare.sh  # faster pack on a busy machine (a larger tarball, one more chunk maybe)
#
# Layout (both folders are ignored through .git/info/exclude):
#   .whl/vllm/   the 303 MB vLLM wheel, its unpacked slim tree, vllm-0.26.0-slim.tar.zst
#   .whl/deps/   dependency wheels for cp312 manylinux x86_64 that the device image lacks
#   .dev/cK/     what travels: MANIFEST (every file of every chunk), vllm.part.NNN, wheels/*.whl,
#                models/NAME/config.json (scripts/gpu/models and scripts/gpu/grid/models), models/_tokenizer/* (copied beside each config on the device)
# Then on the device: scripts/gpu/device_stage.sh (see there).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
VLLM_VERSION=0.26.0
CHUNK_MAX=${CHUNK_MAX:-52000000}     # bytes per chunk; the working tree (~9 MB with the grid logs and doctor corpus) travels too: 64 MiB = 67.1 MB a call
PART=${PART:-20000000}               # vLLM tarball part size, small enough to pack chunks tightly
PY=${PY:-$ROOT/.venv/bin/python}
TOKENIZER=${TOKENIZER:-$HOME/.cache/forklift/models/smollm2-135m-instruct}
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64)

EXCLUDE=$(git rev-parse --git-path info/exclude)  # a linked worktree's .git is a file: the common dir's
mkdir -p "$(dirname "$EXCLUDE")"
for line in /.whl/ /.dev/; do
  grep -qxF "$line" "$EXCLUDE" 2>/dev/null || echo "$line" >> "$EXCLUDE"
done
mkdir -p .whl/vllm .whl/deps .dev
command -v zstd >/dev/null || { echo "zstd is needed here" >&2; exit 2; }

# 1. vLLM wheel
WHL=$(ls .whl/vllm/vllm-$VLLM_VERSION-*.whl 2>/dev/null | head -1 || true)
if [ -z "$WHL" ]; then
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLAT[@]}" \
    -d .whl/vllm "vllm==$VLLM_VERSION"
  WHL=$(ls .whl/vllm/vllm-$VLLM_VERSION-*.whl | head -1)
fi

# 2. slim tree -> tar.zst (FA2 kernels, the Rust CLI and deep_gemm builds for other Pythons removed)
TAR=.whl/vllm/vllm-$VLLM_VERSION-slim.tar.zst
if [ ! -f "$TAR" ] || [ -n "${FORCE:-}" ]; then
  rm -rf .whl/vllm/tree && mkdir -p .whl/vllm/tree
  (cd .whl/vllm/tree && unzip -q "$ROOT/$WHL" \
    && rm -f vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so vllm/vllm-rs vllm/third_party/deep_gemm/_C.cpython-3{10,11,13,14}-*.so \
    && tar -cf - vllm "vllm-$VLLM_VERSION.dist-info" | zstd -q -"${ZSTD_LEVEL:-19}" -T0 -o "$ROOT/$TAR.tmp")
  mv "$TAR.tmp" "$TAR"
fi

# 3. dependency wheels (vLLM's own requirements + forklift's), minus the image's packages
REQS=$(unzip -p "$WHL" "vllm-$VLLM_VERSION.dist-info/METADATA" | grep '^Requires-Dist' | grep -v 'extra ==' \
       | sed 's/^Requires-Dist: //')
FK_REQS=$("$PY" - <<'PY'
import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))
PY
)
if [ ! -f .whl/deps/.resolved ] || [ -n "${FORCE_DEPS:-}" ]; then
  # ray: for the Ray-backend proof (`parallel.backend: ray`); vLLM's CUDA wheel does not require it
  IFS=$'\n' read -r -d '' -a ALL < <(printf '%s\n%s\nzstandard\n%s\n' "$REQS" "$FK_REQS" "${EXTRA_REQS:-ray==2.60.0}"; printf '\0') || true
  "$PY" scripts/gpu/resolve_deps.py .whl/deps "${ALL[@]}" 2> >(grep -v "is ignored: it is neither" >&2)
  touch .whl/deps/.resolved
fi

# 4. pack chunks: first-fit-decreasing over vLLM parts, wheels and model files
if [ -z "${FORCE:-}" ] && [ -f .dev/c1/MANIFEST ] && [ .dev/c1/MANIFEST -nt "$TAR" ] && [ .dev/c1/MANIFEST -nt .whl/deps/.resolved ] \
   && [ .dev/c1/MANIFEST -nt scripts/gpu/models ] && [ .dev/c1/MANIFEST -nt scripts/gpu/grid/models ]; then
  echo "chunks up to date:"; du -sb .dev/c* ; exit 0
fi
rm -rf .dev/c[0-9]* .dev/items && mkdir -p .dev/items/wheels .dev/items/models/_tokenizer
(cd .dev/items && split -b "$PART" -d -a 3 "$ROOT/$TAR" vllm.part.)
cp .whl/deps/*.whl .dev/items/wheels/
# a wheel bigger than a part (ray: 79 MB) travels in parts; device_stage.sh joins them before pip
for w in .dev/items/wheels/*.whl; do
  [ "$(stat -c %s "$w")" -gt "$PART" ] || continue
  split -b "$PART" -d -a 3 "$w" "$w.part." && rm -f "$w"
done
for f in tokenizer.json tokenizer_config.json chat_template.jinja generation_config.json special_tokens_map.json; do
  [ -f "$TOKENIZER/$f" ] && cp "$TOKENIZER/$f" .dev/items/models/_tokenizer/
done
[ -f .dev/items/models/_tokenizer/tokenizer.json ] || { echo "no tokenizer in $TOKENIZER" >&2; exit 2; }
for cfg in scripts/gpu/models/*.config.json scripts/gpu/grid/models/*.config.json; do  # grid: device_grid.sh
  name=$(basename "$cfg" .config.json); mkdir -p ".dev/items/models/$name"; cp "$cfg" ".dev/items/models/$name/config.json"
done
"$PY" - "$CHUNK_MAX" <<'PY'
import hashlib, os, shutil, sys
from pathlib import Path
limit = int(sys.argv[1]) - 200_000  # room for the MANIFEST
items = sorted((p for p in Path(".dev/items").rglob("*") if p.is_file()), key=lambda p: -p.stat().st_size)
bins: list[list[Path]] = []
sizes: list[int] = []
for p in items:
    s = p.stat().st_size
    for i, used in enumerate(sizes):
        if used + s <= limit:
            bins[i].append(p); sizes[i] += s; break
    else:
        bins.append([p]); sizes.append(s)
manifest = []
for i, group in enumerate(bins, 1):
    for p in group:
        rel = p.relative_to(".dev/items")
        manifest.append(f"c{i} {p.stat().st_size} {hashlib.md5(p.read_bytes()).hexdigest()} {rel}")
for i, group in enumerate(bins, 1):
    for p in group:
        dst = Path(f".dev/c{i}") / p.relative_to(".dev/items")
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.link(p, dst) if hasattr(os, "link") else shutil.copy(p, dst)
    Path(f".dev/c{i}/MANIFEST").write_text(f"chunks {len(bins)}\n" + "\n".join(manifest) + "\n")
for i, used in enumerate(sizes, 1):
    print(f".dev/c{i}: {used / 1e6:.1f} MB")
PY
rm -rf .dev/items
echo "carry one chunk per call, back to back: .dev/c1 .. .dev/c$(ls -d .dev/c[0-9]* | wc -l)"

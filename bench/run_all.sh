#!/usr/bin/env bash
# Every Tandem benchmark in one go, for a quiet machine (nothing else running).
#
#   bench/run_all.sh [MODEL]        # default: .cache/test-models/gemma-3-270m-q4_k_m.gguf
#
# 1. builds llama.cpp's llama-bench and llama-speculative-simple from the same
#    llama-cpp-python sdist (once; bench/.llama-tools/);
# 2. bench/vs_llamacpp.py: Tandem ÷ llama-bench (plain) and ÷ llama-speculative-simple
#    (draft model = the target itself, k 4, 2 threads), medians of 5 rounds;
# 3. bench/verify_cost.py: what a verification pass's logits cost; bench/memory.py: peak
#    RSS at n_ctx 8192 vs llama.cpp's own tool;
# 4. bench/vs_ngram.py: prompt lookup and suffix vs llama.cpp's n-gram modes;
#    the suffix index's memory; app bench --suffix on agent;
#    app bench --auto with a costly draft (the target itself) on agent and chat;
# 5. python -m app bench with prompt lookup on builtin:code and builtin:chat.
# 6. bench/api_vs_inprocess.py and bench/api_load.py: the local API.
# Every result is also written as JSON under bench/out/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-.venv/bin/python}"
MODEL="${1:-.cache/test-models/gemma-3-270m-q4_k_m.gguf}"
THREADS="${THREADS:-2}"
mkdir -p bench/out
stamp="$(date +%Y%m%d-%H%M%S)"

TOOLS_BIN="${LLAMA_TOOLS_DIR:-bench/.llama-tools}/bin"
[[ -x "$TOOLS_BIN/llama-bench" && -x "$TOOLS_BIN/llama-speculative-simple" ]] \
    || bench/build_llama_tools.sh

echo "== Tandem vs llama.cpp (plain and speculative) =="
"$PY" bench/vs_llamacpp.py --model "$MODEL" --k 4 --threads "$THREADS" --n-predict 128 --repeat 5

echo "== a verification pass: logits at every position vs at the last =="
"$PY" bench/verify_cost.py --model "$MODEL" --threads "$THREADS" --repeat 30

echo "== memory at n_ctx 8192 =="
"$PY" bench/memory.py --model "$MODEL" --n-ctx 8192 --threads "$THREADS"

echo "== peers: Tandem prompt lookup / suffix vs llama.cpp n-gram modes (k 8) =="
for set in code agent; do
    "$PY" bench/vs_ngram.py --model "$MODEL" --prompts "builtin:$set" --k 8 --threads "$THREADS" \
        --n-predict 128 --repeat 3
done

echo "== suffix index memory at 1,000 replies =="
"$PY" bench/suffix_memory.py --replies 1000

echo "== python -m app bench --suffix --prompts builtin:agent =="
"$PY" -m app bench --model "$MODEL" --suffix --prompts builtin:agent --threads "$THREADS" \
    --json -q > "bench/out/app-bench-suffix-agent-$stamp.json"
echo "written: bench/out/app-bench-suffix-agent-$stamp.json"

# never slower than off: auto with a draft as costly as the target (the target itself)
for set in agent chat; do
    echo "== python -m app bench --auto --draft <the target> --prompts builtin:$set =="
    "$PY" -m app bench --model "$MODEL" --draft "$MODEL" --auto --draft-max 8 --prompts "builtin:$set" \
        --repeat 3 --threads "$THREADS" --json -q > "bench/out/app-bench-auto-costly-$set-$stamp.json"
    echo "written: bench/out/app-bench-auto-costly-$set-$stamp.json"
done

for set in code chat; do
    echo "== python -m app bench --prompt-lookup --prompts builtin:$set =="
    "$PY" -m app bench --model "$MODEL" --prompt-lookup --prompts "builtin:$set" \
        --k 4 --repeat 3 --threads "$THREADS" --json -q > "bench/out/app-bench-$set-$stamp.json"
    "$PY" - "bench/out/app-bench-$set-$stamp.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
for c in d["configs"]:
    f = lambda v, s: "—" if v is None else s.format(v)
    print(f"{c['label']:>5}: {f(c['decode_tps_median'], '{:.1f}')} tok/s, measured "
          f"{f(c['measured_speedup'], '{:.2f}')}×, predicted {f(c['predicted_speedup'], '{:.2f}')}×, "
          f"α {f(c['acceptance_rate'], '{:.2f}')}, identical {c['identical_to_off']}/{c['compared_to_off']}")
print("written:", sys.argv[1])
PYEOF
done

echo "== local API vs in process (prompt lookup, k 4) =="
"$PY" bench/api_vs_inprocess.py --model "$MODEL" --prompt-lookup --k 4 --max-tokens 128 \
    --repeat 5 --threads "$THREADS"

echo "== local API under load (40 clients, 200 requests, twice) =="
"$PY" bench/api_load.py --model "$MODEL" --clients 40 --requests 200 --max-tokens 16

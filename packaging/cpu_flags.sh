#!/usr/bin/env bash
# Print the CMake flags for llama.cpp's CPU backend (one line).
#
#   bash packaging/cpu_flags.sh [host|portable]      (default: $TANDEM_CPU, else host)
#
# portable  x86-64 with AVX2, FMA and F16C (every x86-64 CPU since 2013-2015): what a
#           bundle that runs on other machines carries (packaging/build_linux.sh).
# host      portable plus the instruction sets this CPU reports in /proc/cpuinfo:
#           BMI2, AVX-VNNI, AVX-512 (F, CD, VL, DQ and BW together), AVX-512 VBMI, VNNI
#           and BF16. Never AMX, and never GGML_NATIVE: -march=native compiles AMX in, and
#           on machines whose CPU reports AMX but cannot use it the first decode crashes
#           (SIGSEGV in ggml_backend_amx_mul_mat). What AVX-512 buys on a verification
#           pass, measured on an AMD EPYC (Zen 4, 2 cores): docs/benchmarks.md.
#
# Other systems and architectures get -DGGML_NATIVE=OFF (the compiler's defaults).
# TANDEM_CPUINFO names a file to read instead of /proc/cpuinfo (the tests use it).
set -euo pipefail

mode="${1:-${TANDEM_CPU:-host}}"
case "$mode" in
  host|portable) ;;
  *) echo "cpu_flags.sh: the mode is host or portable (got '$mode')" >&2; exit 2 ;;
esac

if [ "$(uname -m)" != x86_64 ]; then
  echo "-DGGML_NATIVE=OFF"
  exit 0
fi
flags="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
cpuinfo="${TANDEM_CPUINFO:-/proc/cpuinfo}"
if [ "$mode" = portable ] || [ ! -r "$cpuinfo" ]; then
  echo "$flags"
  exit 0
fi

# the first "flags" line: every core of one machine reports the same set
have=" $(grep -m1 '^flags' "$cpuinfo" | cut -d: -f2) "
has() { for f in "$@"; do case "$have" in *" $f "*) ;; *) return 1 ;; esac; done; }

if ! has avx2 fma f16c; then  # an older CPU than the portable build assumes
  echo "-DGGML_NATIVE=OFF -DGGML_AVX=$(has avx && echo ON || echo OFF) -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF"
  exit 0
fi
has bmi2 && flags="$flags -DGGML_BMI2=ON"
has avx_vnni && flags="$flags -DGGML_AVX_VNNI=ON"
if has avx512f avx512cd avx512vl avx512dq avx512bw; then
  flags="$flags -DGGML_AVX512=ON"
  has avx512vbmi && flags="$flags -DGGML_AVX512_VBMI=ON"
  has avx512_vnni && flags="$flags -DGGML_AVX512_VNNI=ON"
  has avx512_bf16 && flags="$flags -DGGML_AVX512_BF16=ON"
fi
echo "$flags"

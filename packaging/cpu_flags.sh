#!/usr/bin/env bash
# Print the CMake flags for llama.cpp's CPU backend (one line).
#
#   bash packaging/cpu_flags.sh [host|portable]      (default: $TANDEM_CPU, else host)
#
# portable  x86-64 with SSE4.2, AVX, AVX2, BMI2, FMA and F16C (Intel Haswell, AMD Zen and
#           later desktop and server CPUs; not some low-end Pentium, Celeron and Atom
#           chips): what a bundle for other machines carries (packaging/build_linux.sh).
# host      the instruction sets this CPU reports in /proc/cpuinfo, each switched on or
#           off: SSE4.2, AVX, AVX2, BMI2, FMA, F16C, AVX-VNNI, AVX-512 (F, CD, VL, DQ and
#           BW together), AVX-512 VBMI, VNNI and BF16 (without /proc/cpuinfo: portable).
#           Never AMX, and never GGML_NATIVE: -march=native compiles AMX in, and
#           on machines whose CPU reports AMX but cannot use it the first decode crashes
#           (SIGSEGV in ggml_backend_amx_mul_mat). What AVX-512 buys on a verification
#           pass, measured on an AMD EPYC (Zen 4, 2 cores): docs/benchmarks.md. The
#           default: what install.sh builds for the machine it runs on.
#
# Other architectures get -DGGML_NATIVE=OFF (the compiler's defaults).
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
# every x86 option is given, ON or OFF: a CMake build folder keeps the options of its
# last configuration, so one left out would stay as it was (bench/build_llama_tools.sh)
cpuinfo="${TANDEM_CPUINFO:-/proc/cpuinfo}"
if [ "$mode" = portable ] || [ ! -r "$cpuinfo" ]; then
  have=" sse4_2 avx avx2 bmi2 fma f16c "
else
  # the first "flags" line: every core of one machine reports the same set
  have=" $(grep -m1 '^flags' "$cpuinfo" | cut -d: -f2 || true) "
fi
has() { for f in "$@"; do case "$have" in *" $f "*) ;; *) return 1 ;; esac; done; }
opt() { if has "${@:2}"; then printf ' -DGGML_%s=ON' "$1"; else printf ' -DGGML_%s=OFF' "$1"; fi; }

flags="-DGGML_NATIVE=OFF$(opt SSE42 sse4_2)$(opt AVX avx)$(opt AVX2 avx2)$(opt BMI2 bmi2)"
flags="$flags$(opt FMA fma)$(opt F16C f16c)$(opt AVX_VNNI avx_vnni)"
if has avx512f avx512cd avx512vl avx512dq avx512bw; then
  flags="$flags -DGGML_AVX512=ON$(opt AVX512_VBMI avx512vbmi)$(opt AVX512_VNNI avx512_vnni)$(opt AVX512_BF16 avx512_bf16)"
else
  flags="$flags -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF"
fi
echo "$flags"

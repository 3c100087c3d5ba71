"""``packaging/cpu_flags.sh``: the CMake flags llama.cpp's CPU backend is compiled with,
from the flags a CPU reports in /proc/cpuinfo (read from a file here), and the bundle's
refusal of a build compiled for one CPU."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "packaging" / "cpu_flags.sh"
PORTABLE = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 flags")

#: the flags lines of four CPUs (abridged to the sets that matter, in their order)
ZEN4 = ("fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c bmi1 avx2 bmi2 avx512f avx512dq "
        "avx512ifma avx512cd avx512bw avx512vl avx512_bf16 avx512vbmi avx512_vbmi2 "
        "avx512_vnni avx512_bitalg avx512_vpopcntdq")
SAPPHIRE_RAPIDS = ("fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c bmi1 avx2 bmi2 avx512f "
                   "avx512dq avx512cd avx512bw avx512vl avx_vnni avx512_bf16 avx512vbmi "
                   "avx512_vnni amx_bf16 avx512_fp16 amx_tile amx_int8")
HASWELL = "fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c bmi1 avx2 bmi2"
SANDY_BRIDGE = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx"


def flags(tmp_path: Path, cpu_flags: str, *args: str, **env: str) -> list[str]:
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nflags\t\t: {cpu_flags}\n\nprocessor\t: 1\nflags\t\t: {cpu_flags}\n")
    proc = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env={**os.environ, "TANDEM_CPUINFO": str(info), **env}, check=True)
    return proc.stdout.split()


def test_a_zen4_gets_avx512_with_vnni_and_bf16(tmp_path: Path) -> None:
    got = flags(tmp_path, ZEN4)
    assert got[:5] == PORTABLE.split()
    assert {"-DGGML_AVX512=ON", "-DGGML_AVX512_VBMI=ON", "-DGGML_AVX512_VNNI=ON",
            "-DGGML_AVX512_BF16=ON", "-DGGML_BMI2=ON"} <= set(got)
    assert "-DGGML_AVX_VNNI=ON" not in got  # Zen 4 has AVX-512 VNNI, not the VEX one


def test_amx_is_never_compiled_in_nor_native(tmp_path: Path) -> None:
    got = flags(tmp_path, SAPPHIRE_RAPIDS)
    assert "-DGGML_AVX512=ON" in got and "-DGGML_AVX_VNNI=ON" in got
    assert not [f for f in got if "AMX" in f]
    assert "-DGGML_NATIVE=OFF" in got


def test_an_avx2_cpu_and_the_portable_mode_get_the_portable_flags(tmp_path: Path) -> None:
    assert flags(tmp_path, HASWELL) == [*PORTABLE.split(), "-DGGML_BMI2=ON"]
    assert flags(tmp_path, ZEN4, "portable") == PORTABLE.split()
    assert flags(tmp_path, ZEN4, TANDEM_CPU="portable") == PORTABLE.split()


def test_a_cpu_without_avx2_is_not_given_avx2(tmp_path: Path) -> None:
    got = flags(tmp_path, SANDY_BRIDGE)
    assert "-DGGML_AVX2=OFF" in got and "-DGGML_AVX=ON" in got


def test_an_unknown_mode_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", str(SCRIPT), "fast"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "host or portable" in proc.stderr


def test_the_app_and_llama_cpp_tools_are_built_with_the_same_flags() -> None:
    for script in ("packaging/install.sh", "bench/build_llama_tools.sh"):
        text = (REPO / script).read_text(encoding="utf-8")
        assert "cpu_flags.sh" in text, script
        assert "-DGGML_AVX2=ON" not in text, f"{script} spells CPU flags of its own"


def test_the_bundle_refuses_a_build_for_this_cpu(tmp_path: Path) -> None:
    # a copy of the repository's packaging scripts with a .venv whose marker records a
    # build with AVX-512: the bundle would not start on a CPU without it
    (tmp_path / "packaging").mkdir()
    for name in ("build_linux.sh", "cpu_flags.sh"):
        shutil.copy(REPO / "packaging" / name, tmp_path / "packaging" / name)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").symlink_to(shutil.which("python3") or "/usr/bin/python3")
    (tmp_path / ".venv" / ".tandem-llama-backend").write_text(PORTABLE + " -DGGML_AVX512=ON\n")
    proc = subprocess.run(["bash", str(tmp_path / "packaging" / "build_linux.sh"), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "TANDEM_CPU=portable bash packaging/install.sh" in proc.stderr
    assert not (tmp_path / "out").exists()

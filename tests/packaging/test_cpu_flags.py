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
PORTABLE = ("-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON "
            "-DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF "
            "-DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF")

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
                          env={**{k: v for k, v in os.environ.items() if k != "TANDEM_CPU"},
                               "TANDEM_CPUINFO": str(info), **env}, check=True)
    return proc.stdout.split()


def test_a_zen4_gets_avx512_with_vnni_and_bf16(tmp_path: Path) -> None:
    got = flags(tmp_path, ZEN4, "host")
    assert {"-DGGML_AVX512=ON", "-DGGML_AVX512_VBMI=ON", "-DGGML_AVX512_VNNI=ON",
            "-DGGML_AVX512_BF16=ON", "-DGGML_AVX2=ON", "-DGGML_NATIVE=OFF"} <= set(got)
    assert "-DGGML_AVX_VNNI=OFF" in got  # Zen 4 has AVX-512 VNNI, not the VEX one


def test_amx_is_never_compiled_in_nor_native(tmp_path: Path) -> None:
    got = flags(tmp_path, SAPPHIRE_RAPIDS, "host")
    assert "-DGGML_AVX512=ON" in got and "-DGGML_AVX_VNNI=ON" in got
    assert not [f for f in got if "AMX" in f]
    assert "-DGGML_NATIVE=OFF" in got


def test_every_option_is_given_so_a_kept_build_folder_cannot_keep_an_old_one(
        tmp_path: Path) -> None:
    names = [f.split("=")[0] for f in flags(tmp_path, HASWELL, "host")]
    assert names == [f.split("=")[0] for f in flags(tmp_path, ZEN4, "host")]
    assert names == [f.split("=")[0] for f in PORTABLE.split()]


def test_an_avx2_cpu_and_the_portable_mode_get_the_portable_flags(tmp_path: Path) -> None:
    assert flags(tmp_path, HASWELL, "host") == PORTABLE.split()
    assert flags(tmp_path, ZEN4, "portable") == PORTABLE.split()
    assert flags(tmp_path, ZEN4, TANDEM_CPU="portable") == PORTABLE.split()


def test_the_default_is_this_cpus_build(tmp_path: Path) -> None:
    assert flags(tmp_path, ZEN4) == flags(tmp_path, ZEN4, "host") != PORTABLE.split()
    assert flags(tmp_path, HASWELL) == PORTABLE.split()


def test_a_cpu_without_avx2_bmi2_or_sse42_gets_none_of_them(tmp_path: Path) -> None:
    got = flags(tmp_path, SANDY_BRIDGE, "host")
    assert {"-DGGML_AVX2=OFF", "-DGGML_BMI2=OFF", "-DGGML_FMA=OFF", "-DGGML_AVX=ON",
            "-DGGML_SSE42=ON"} <= set(got)
    assert "-DGGML_SSE42=OFF" in flags(tmp_path, "fpu sse sse2 ssse3", "host")
    assert flags(tmp_path, "fpu sse sse2", "host") == flags(tmp_path, "", "host")  # all off


def test_an_unknown_mode_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", str(SCRIPT), "fast"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "host or portable" in proc.stderr


def test_no_build_script_spells_cpu_flags_of_its_own() -> None:
    for script in ("packaging/install.sh", "bench/build_llama_tools.sh", "bench/gpu_check.sh"):
        text = (REPO / script).read_text(encoding="utf-8")
        assert "cpu_flags.sh" in text, script
        assert "-DGGML_AVX2=ON" not in text, f"{script} spells CPU flags of its own"


class ToolsBuild:
    """``bench/build_llama_tools.sh`` from a copy of the scripts, on a CPU reporting
    ``cpuinfo``, with a stand-in ``cmake`` that logs its configure arguments (one per
    line), notes whether the build folder was configured before, and makes the targets."""

    def __init__(self, tmp_path: Path, cpuinfo: str) -> None:
        self.root, self.tools = tmp_path / "repo", tmp_path / "tools"
        for rel in ("bench/build_llama_tools.sh", "packaging/cpu_flags.sh"):
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / rel, self.root / rel)
        self.sdist = tmp_path / "sdist"
        (self.sdist / "vendor" / "llama.cpp").mkdir(parents=True)
        (self.sdist / "vendor" / "llama.cpp" / "CMakeLists.txt").write_text("")
        self.fake = tmp_path / "fakebin"
        self.fake.mkdir()
        self.log = tmp_path / "cmake.log"
        (self.fake / "cmake").write_text("""#!/usr/bin/env bash
if [ "$1" = --build ]; then
  build="$2"; shift 2
  while [ $# -gt 0 ] && [ "$1" != --target ]; do shift; done; shift
  mkdir -p "$build/bin"
  for t in "$@"; do printf '#!/bin/sh\\n' > "$build/bin/$t"; chmod +x "$build/bin/$t"; done
else
  printf '%s\\n' "$@" > "$CMAKE_LOG"
  args=("$@")
  for i in "${!args[@]}"; do [ "${args[$i]}" = -B ] && build="${args[$((i + 1))]}"; done
  mkdir -p "$build"
  if [ -e "$build/configured" ]; then echo reused >> "$CMAKE_LOG"; fi
  touch "$build/configured"
fi
""")
        (self.fake / "cmake").chmod(0o755)
        self.info = tmp_path / "cpuinfo"
        self.info.write_text(f"processor\t: 0\nflags\t\t: {cpuinfo}\n")

    def record(self, marker: str | None) -> None:
        """The .venv's record of its llama-cpp-python build (None: no record)."""
        path = self.root / ".venv" / ".tandem-llama-backend"
        path.unlink(missing_ok=True)
        if marker is not None:
            path.parent.mkdir(exist_ok=True)
            path.write_text(marker + "\n")

    def run(self, targets: str = "llama-server", **env: str) -> tuple[list[str], str]:
        """(the configure step's arguments, then "reused" if the folder was configured
        before; the flags recorded beside the tools)."""
        base = {k: v for k, v in os.environ.items() if k not in ("TANDEM_CPU", "CMAKE_ARGS")}
        subprocess.run(["bash", str(self.root / "bench" / "build_llama_tools.sh")], check=True,
                       capture_output=True, text=True, timeout=60,
                       env={**base, "PATH": f"{self.fake}:{base['PATH']}", "CMAKE_LOG": str(self.log),
                            "TANDEM_CPUINFO": str(self.info), "LLAMA_SDIST_DIR": str(self.sdist),
                            "LLAMA_TOOLS_TARGETS": targets, "LLAMA_TOOLS_DIR": str(self.tools), **env})
        recorded = (self.tools / "bin" / "BUILD_FLAGS").read_text().strip()
        return self.log.read_text().splitlines(), recorded


def test_llama_cpp_tools_are_built_with_the_flags_of_the_venv_build(tmp_path: Path) -> None:
    """The venv's record wins over this CPU and TANDEM_CPU (a bundle's portable build
    compared with tools built for the host would compare two builds); CMAKE_ARGS comes
    last and is not repeated when it is the record itself (install.sh exports it)."""
    cuda = "-DGGML_CUDA=on " + PORTABLE
    build = ToolsBuild(tmp_path / "a", ZEN4)
    build.record(cuda)
    args, recorded = build.run(TANDEM_CPU="host")
    assert recorded == cuda
    assert "-DGGML_CUDA=on" in args and "-DGGML_AVX512=OFF" in args
    assert "-DGGML_AVX512=ON" not in args
    build = ToolsBuild(tmp_path / "b", ZEN4)
    build.record(PORTABLE)
    args, recorded = build.run(CMAKE_ARGS=PORTABLE)
    assert args.count("-DGGML_AVX2=ON") == 1 and recorded == PORTABLE
    args, recorded = build.run(CMAKE_ARGS="-DGGML_CCACHE=OFF")
    assert args[-1] == "-DGGML_CCACHE=OFF" and "-DGGML_AVX2=ON" in args
    assert recorded == PORTABLE + " -DGGML_CCACHE=OFF"


def test_without_a_record_the_tools_get_this_cpus_flags(tmp_path: Path) -> None:
    args, recorded = ToolsBuild(tmp_path / "host", ZEN4).run()
    assert recorded.split() == flags(tmp_path, ZEN4, "host")
    assert "-DGGML_AVX512=ON" in args and "-DGGML_AVX512_BF16=ON" in args
    _, recorded = ToolsBuild(tmp_path / "portable", ZEN4).run(TANDEM_CPU="portable")
    assert recorded == PORTABLE


def test_other_flags_configure_afresh_and_drop_the_tools_built_with_the_old_ones(
        tmp_path: Path) -> None:
    """CMake keeps options a new configuration leaves out (a CUDA build's GGML_CUDA under
    a later CPU record), and BUILD_FLAGS describes every tool in bin/."""
    build = ToolsBuild(tmp_path, ZEN4)
    build.record("-DGGML_CUDA=on " + PORTABLE)
    build.run("llama-bench llama-server")
    args, _ = build.run("llama-server")
    assert args[-1] == "reused"  # the same flags: the folder is kept
    assert (build.tools / "bin" / "llama-bench").exists()
    build.record(PORTABLE)
    args, recorded = build.run("llama-server")
    assert args[-1] != "reused" and recorded == PORTABLE
    assert (build.tools / "bin" / "llama-server").exists()
    assert not (build.tools / "bin" / "llama-bench").exists()


def test_each_set_of_flags_gets_a_pip_cache_of_its_own(tmp_path: Path) -> None:
    script = REPO / "packaging" / "llama_pip_cache.sh"
    env = {k: v for k, v in os.environ.items() if k != "PIP_CACHE_DIR"}

    def cache(flags: str, **extra: str) -> str:
        return subprocess.run(["bash", str(script), flags], capture_output=True, text=True,
                              check=True, env={**env, **extra}).stdout.strip()

    a, b = cache(PORTABLE), cache("-DGGML_CUDA=on " + PORTABLE)
    assert a != b and a == cache(PORTABLE)
    assert Path(a).name.startswith("tandem-llama-")
    assert Path(cache(PORTABLE, PIP_CACHE_DIR=str(tmp_path))).parent == tmp_path
    assert Path(cache(PORTABLE, XDG_CACHE_HOME=str(tmp_path))).parent == tmp_path / "pip"
    assert "llama_pip_cache.sh" in (REPO / "packaging" / "install.sh").read_text()


def bundle_check(tmp_path: Path, marker: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    """build_linux.sh from a copy of the packaging scripts whose .venv records ``marker``
    (None: no record) and whose Python cannot import PyInstaller (so a build that passes
    the check stops right after it, at the install of PyInstaller, offline)."""
    root = tmp_path / "repo"
    (root / "packaging").mkdir(parents=True)
    for name in ("build_linux.sh", "cpu_flags.sh"):
        shutil.copy(REPO / "packaging" / name, root / "packaging" / name)
    (root / ".venv" / "bin").mkdir(parents=True)
    fake = root / ".venv" / "bin" / "python"
    fake.write_text("#!/bin/sh\necho fake python \"$@\" >&2\nexit 3\n")
    fake.chmod(0o755)
    if marker is not None:
        (root / ".venv" / ".tandem-llama-backend").write_text(marker + "\n")
    return subprocess.run(["bash", str(root / "packaging" / "build_linux.sh"), "--out",
                           str(tmp_path / "out"), *args], capture_output=True, text=True,
                          timeout=60)


def test_the_bundle_refuses_a_build_for_this_cpu(tmp_path: Path) -> None:
    host = PORTABLE.replace("-DGGML_AVX512=OFF", "-DGGML_AVX512=ON")
    proc = bundle_check(tmp_path, host)
    assert proc.returncode == 2
    assert "AVX512 switched on" in proc.stderr
    assert "TANDEM_CPU=portable bash packaging/install.sh" in proc.stderr
    assert not (tmp_path / "out").exists()
    proc = bundle_check(tmp_path / "no-record", None)
    assert proc.returncode == 2 and "does not record" in proc.stderr


def test_the_bundle_takes_the_portable_build_also_with_cuda_and_host_cpu_when_asked(
        tmp_path: Path) -> None:
    for i, (marker, args) in enumerate( ((PORTABLE, ()), ("-DGGML_CUDA=on " + PORTABLE, ()),
                         ("-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON "
                          "-DGGML_F16C=ON", ()),  # an older install's portable record
                         (PORTABLE.replace("AVX512=OFF", "AVX512=ON"), ("--host-cpu",)))):
        proc = bundle_check(tmp_path / str(i), marker, *args)
        assert "fake python" in proc.stderr, (marker, proc.stderr)  # past the check

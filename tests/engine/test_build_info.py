"""The llama.cpp build information: a contract test of the adapter over
llama-cpp-python's private ``_ggml`` module, and the log fields made from it."""

from __future__ import annotations

from app.engine import llama


def test_build_info_reads_the_loaded_llama_cpp() -> None:
    info = llama.build_info()
    import llama_cpp

    assert info.llama_cpp_python == llama_cpp.__version__
    assert info.ggml_version and info.ggml_version[0].isdigit()
    assert info.ggml_commit and info.ggml_commit != "unknown"  # the sdist records its commit
    assert "CPU" in info.backends  # every build registers the CPU backend
    assert info.backend in ("CPU", *llama.GPU_BACKENDS)
    assert info.gpu_offload == bool(llama_cpp.llama_supports_gpu_offload())


def test_backend_is_the_first_gpu_one() -> None:
    def info(*backends: str) -> llama.BuildInfo:
        return llama.BuildInfo("0", None, None, backends, gpu_offload=len(backends) > 1)

    assert info("CPU").backend == "CPU"
    assert info("CUDA", "CPU").backend == "CUDA"
    assert info("Metal", "BLAS", "CPU").backend == "Metal"
    assert info("Vulkan", "CPU").backend == "Vulkan"


def test_log_fields() -> None:
    from app.diagnostics import log_fields

    fields = log_fields()
    assert fields["Qt"].startswith("PySide6 6.")
    assert fields["llama.cpp"].startswith("ggml ") and "commit " in fields["llama.cpp"]
    assert fields["Backend"].split()[0] in ("CPU", *llama.GPU_BACKENDS)
    assert "config " in fields["Folders"] and "logs " in fields["Folders"]


def test_cpu_features_come_from_the_cpu_section_of_the_system_info() -> None:
    line = ("CUDA : ARCHS = 890 | USE_GRAPHS = 1 | CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 0 | "
            "AVX512_VNNI = 1 | REPACK = 1 | ")
    assert llama.cpu_features(line) == ("SSE3", "AVX2", "AVX512_VNNI", "REPACK")
    assert llama.cpu_features("Metal : EMBED_LIBRARY = 1 | ") == ()
    assert llama.cpu_features("CPU : AVX = 1 | BLAS : ACCELERATE = 1 | ") == ("AVX",)


def test_the_loaded_build_names_its_cpu_features_in_the_backend_line() -> None:
    from app.diagnostics import backend_line

    info = llama.build_info()
    import llama_cpp

    compiled = llama_cpp.llama_print_system_info().decode()
    assert info.cpu_features and all(f"{f} = 1" in compiled for f in info.cpu_features)
    assert "CPU features: " + " ".join(info.cpu_features) in backend_line(info)

"""Exact verification: a CPU configuration in which a verification batch is computed bit
for bit like one-token passes, so speculation's output equals plain decoding exactly.

Why outputs part otherwise (ggml-cpu in the vendored llama.cpp, docs/proof.md): the
matrix kernels change with the number of tokens in a pass — weight repacking (Q4_0,
Q4_K, Q5_K, Q6_K, IQ4_NL, Q8_0) has a gemm for ≥ 4 rows and a gemv for fewer; the tiled
K-quant kernel takes batches of ≥ 8; llamafile's tinyBLAS takes ≥ 2 (bit-identical to
the one-token ``vec_dot`` for the Q5_0 and Q8_0 weights measured, not for F16/F32); flash
attention over an F16/F32 KV cache splits the cache across threads for a single query
once it holds 512 cells; attention without flash attention goes through tinyBLAS. Each
sums in another order, and activations are re-quantized to 8 bits before the next
product, which turns last-bit differences into whole quantization steps.

Exact verification therefore loads with weight repacking off, flash attention on and a
Q8_0 KV cache, and needs weights whose kernels do not change with the batch size: Q4_1,
Q5_1, Q5_0 and Q8_0 always; Q4_K and Q6_K only with the tiled kernel off
(``GGML_CPU_TILED_MM=0`` in the environment before the process starts). Measured
bit-identical logits on Gemma 3 270M (bench/experiments/batch_invariance.py; x86-64 AVX2 portable
build). Token identity over builtin:code at k = 1..8, greedy and seeded at 0.8: 128 of
128 runs identical on a Q5_1 copy of Gemma 3 270M (``bench/proof_divergence.py
--exact``, docs/proof.md), so the app offers it (the "Exact verification" model option,
``--exact``, the race's option). Other types (F16, F32, BF16, unmeasured quantizations)
and GPU backends are not claimed.

This module says whether a GGUF's weights allow it (:func:`exact_blockers`), what to
load with (:data:`EXACT_CONTEXT`), and converts a model (:func:`requantize`, in a child
process, as ``python -m app.engine.exact SRC DST [Q5_1|Q4_1]``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TypedDict

from app.errors import ModelLoadError

#: Weight types measured batch-invariant on the CPU backend, repacking off (docs/proof.md).
EXACT_WEIGHT_TYPES: frozenset[str] = frozenset({"Q4_1", "Q5_1", "Q5_0", "Q8_0"})

#: Weight types measured batch-invariant when the tiled K-quant kernel is off as well.
EXACT_WEIGHT_TYPES_TILED_OFF: frozenset[str] = EXACT_WEIGHT_TYPES | {"Q4_K", "Q6_K"}

#: Context settings of exact verification: flash attention on (``LLAMA_FLASH_ATTN_TYPE_
#: ENABLED``), K and V cache in Q8_0 (``GGML_TYPE_Q8_0`` = 8). Weight repacking is off too.
class ContextSettings(TypedDict, total=False):
    """Keyword arguments of :class:`app.engine.llama.LlamaContext` that exact
    verification sets."""

    flash_attn: int
    type_k: int
    type_v: int


EXACT_CONTEXT: ContextSettings = {"flash_attn": 1, "type_k": 8, "type_v": 8}

#: ggml-cpu's switch for its tiled K-quant matrix kernel, read once per process
#: (ggml-cpu/tiled/tiled.cpp: on unless ``atoi`` of the value is 0)
TILED_MM_ENV = "GGML_CPU_TILED_MM"


def tiled_kernel_off_for_exact() -> bool:
    """Set ``GGML_CPU_TILED_MM=0`` for this process, unless the environment already has a
    value (the user's, kept). Returns whether it was set here.

    For a process that will load with exact verification, before llama.cpp loads:
    Q4_K/Q6_K weights (what most Q4_K_M files hold) are exact only with the kernel off,
    and ggml reads the switch once, at the process's first matrix product. Called by
    :mod:`app.entry` for the window when the saved settings ask for exact verification,
    and by :func:`app.cli.main` for a command line with ``--exact``.
    """
    if TILED_MM_ENV in os.environ:
        return False
    os.environ[TILED_MM_ENV] = "0"
    return True


#: Q8_0 blocks hold 32 values, so each attention head's size must be a multiple of it.
EXACT_KV_BLOCK = 32

#: llama_ftype of each conversion target (llama.h ``LLAMA_FTYPE_MOSTLY_*``).
_FTYPES = {"Q4_1": 3, "Q5_1": 9}

#: seconds a conversion may take (a 270M model takes a few; 8B about a minute per core)
REQUANTIZE_TIMEOUT_S = 3600.0


def weight_types(path: str | os.PathLike[str]) -> dict[str, int]:
    """Tensor type name → number of matrix tensors (2-D or more) in a GGUF (all parts).

    The token embedding is left out when the model has a separate ``output.weight``
    (then it is only looked up, never multiplied).

    Raises:
        ModelLoadError: the file cannot be read as a GGUF.
    """
    from gguf import GGUFReader

    from app.catalog.gguf_meta import model_parts

    parts = model_parts(Path(path))
    tensors: list[tuple[str, str, int]] = []
    try:
        for part in parts:
            reader = GGUFReader(part)
            tensors += [(t.name, t.tensor_type.name, len(t.shape)) for t in reader.tensors]
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"Could not read the tensors of {parts[0].name}: {exc}") from exc
    has_output = any(name == "output.weight" for name, _, _ in tensors)
    counts: dict[str, int] = {}
    for name, kind, ndim in tensors:
        if ndim < 2 or (has_output and name == "token_embd.weight"):
            continue
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def exact_blockers(path: str | os.PathLike[str], *, tiled_off: bool = False) -> list[str]:
    """The weight types of ``path`` that make verification batch-dependent (sorted);
    empty when exact verification is possible.

    Args:
        tiled_off: the tiled K-quant kernel is off in this process
            (:func:`app.engine.llama.tiled_kquant_matmul_disabled`).
    """
    ok = EXACT_WEIGHT_TYPES_TILED_OFF if tiled_off else EXACT_WEIGHT_TYPES
    return sorted(t for t in weight_types(path) if t not in ok)


def requantize(src: Path, dst: Path, kind: str = "Q5_1", *, threads: int | None = None) -> None:
    """Write a copy of ``src`` with every matrix in ``kind`` (Q5_1 or Q4_1), for exact
    verification. Runs llama.cpp's ``llama_model_quantize`` (``--allow-requantize
    --pure``) in a child process, since llama.cpp may abort on a bad file; ``dst`` is
    written as ``dst.partial`` and renamed when complete.

    Requantizing an already quantized model loses a little more quality than quantizing
    from F16; start from the best file you have.

    Raises:
        ValueError: ``kind`` is not Q5_1 or Q4_1.
        ModelLoadError: the conversion failed or crashed (the message says why).
    """
    if kind not in _FTYPES:
        raise ValueError(f"kind must be one of {sorted(_FTYPES)}, got {kind!r}")
    if not src.is_file():
        raise ModelLoadError(f"Model file not found: {src}")
    partial = dst.with_name(dst.name + ".partial")
    argv = [sys.executable, "-m", "app.engine.exact", str(src), str(partial), kind]
    if threads:
        argv.append(str(threads))
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=REQUANTIZE_TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        partial.unlink(missing_ok=True)
        raise ModelLoadError(f"Converting {src.name} took longer than {REQUANTIZE_TIMEOUT_S:.0f} s.") from exc
    if proc.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        why = (proc.stderr.strip().splitlines() or ["llama.cpp stopped the process"])[-1]
        raise ModelLoadError(f"Could not convert {src.name} to {kind}: {why}")
    partial.replace(dst)


def _main(argv: list[str]) -> int:
    import llama_cpp

    src, dst, kind = argv[0], argv[1], argv[2]
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = _FTYPES[kind]
    params.allow_requantize = True
    params.pure = True
    params.nthread = int(argv[3]) if len(argv) > 3 else 0
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params)
    if rc != 0:
        print(f"llama_model_quantize returned {rc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

"""Exact verification (app/engine/exact.py): which weights allow it, converting a model,
and that a session asked for it either provides it or says why not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.engine.exact import exact_blockers, requantize, weight_types
from app.engine.session import Session, SessionConfig
from app.errors import ModelLoadError
from tests.synthetic import write_tiny_llama

REPO = Path(__file__).resolve().parents[2]


def test_f32_weights_block_exact_verification(tiny_target: Path) -> None:
    counts = weight_types(tiny_target)
    assert set(counts) == {"F32"} and counts["F32"] > 0
    assert exact_blockers(tiny_target) == ["F32"]


def test_requantized_copy_allows_it_and_the_session_uses_it(tmp_path: Path) -> None:
    src = write_tiny_llama(tmp_path / "tiny-h32.gguf", n_head=2)  # Q8_0 KV needs heads of 32k
    dst = tmp_path / "tiny-q5_1.gguf"
    requantize(src, dst, "Q5_1")
    assert dst.is_file() and not (tmp_path / "tiny-q5_1.gguf.partial").exists()
    assert set(weight_types(dst)) == {"Q5_1"} and exact_blockers(dst) == []
    with Session.open(SessionConfig(target_path=dst, n_ctx=128, n_threads=2, n_gpu_layers=0,
                                    exact_verification=True)) as s:
        assert s.exact_verification is True
        assert not any("Exact verification" in n for n in s.notes)
    q4 = tmp_path / "tiny-q4_1.gguf"
    requantize(src, q4, "Q4_1")
    assert set(weight_types(q4)) == {"Q4_1"}
    with Session.open(SessionConfig(target_path=q4, n_ctx=128, n_threads=2, n_gpu_layers=0,
                                    exact_verification=True)) as s:
        assert s.exact_verification is True


def test_heads_too_small_for_a_q8_0_cache_get_a_note(tiny_target: Path, tmp_path: Path) -> None:
    dst = tmp_path / "tiny-h16-q5_1.gguf"
    requantize(tiny_target, dst, "Q5_1")  # 4 heads of 16
    with Session.open(SessionConfig(target_path=dst, n_ctx=128, n_threads=2, n_gpu_layers=0,
                                    exact_verification=True)) as s:
        assert s.exact_verification is False
        assert any("multiple of 32" in n for n in s.notes)


def test_a_model_that_cannot_be_exact_gets_a_note(tiny_target: Path) -> None:
    with Session.open(SessionConfig(target_path=tiny_target, n_ctx=128, n_threads=2, n_gpu_layers=0,
                                    exact_verification=True)) as s:
        assert s.exact_verification is False
        assert any("F32 weights" in n and "python -m app.engine.exact" in n for n in s.notes)
    with Session.open(SessionConfig(target_path=tiny_target, n_ctx=128, n_threads=2)) as s:
        assert s.exact_verification is False and not any("Exact" in n for n in s.notes)


def test_requantize_errors(tiny_target: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        requantize(tiny_target, tmp_path / "x.gguf", "Q4_K")
    with pytest.raises(ModelLoadError):
        requantize(tmp_path / "missing.gguf", tmp_path / "x.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ModelLoadError):
        requantize(junk, tmp_path / "y.gguf")
    assert not (tmp_path / "y.gguf").exists() and not (tmp_path / "y.gguf.partial").exists()


@pytest.mark.slow
def test_gemma_q4_k_m_needs_the_tiled_kernel_off(gemma_path: Path) -> None:
    assert set(weight_types(gemma_path)) == {"Q4_K", "Q5_0", "Q6_K", "Q8_0"}
    assert exact_blockers(gemma_path) == ["Q4_K", "Q6_K"]
    assert exact_blockers(gemma_path, tiled_off=True) == []


@pytest.mark.slow
def test_with_the_tiled_kernel_off_at_start_gemma_q4_k_m_is_exact(gemma_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from app.engine.session import Session, SessionConfig\n"
        "s = Session.open(SessionConfig(target_path=Path(sys.argv[1]), n_ctx=256, n_threads=2,"
        " n_gpu_layers=0, exact_verification=True))\n"
        "print(s.exact_verification, len(s.notes)); print(*s.notes); s.close()\n"
    )
    out = {}
    for env in ("0", None, "1"):
        e = {k: v for k, v in os.environ.items() if k != "GGML_CPU_TILED_MM"}
        if env is not None:
            e["GGML_CPU_TILED_MM"] = env
        proc = subprocess.run([sys.executable, "-c", code, str(gemma_path)], capture_output=True,
                              text=True, env=e, cwd=REPO, check=True, timeout=600)
        out[env] = proc.stdout.splitlines()
    assert out["0"][0].split() == ["True", "0"]
    # the note says what to do: a restart does it (app.entry sets the switch), unless the
    # user's own environment turns the kernel on
    assert out[None][0].split()[0] == "False"
    assert "Q4_K, Q6_K weights" in out[None][1] and "Restart Tandem with exact" in out[None][1]
    assert out["1"][0].split()[0] == "False"
    assert "GGML_CPU_TILED_MM is set to '1'" in out["1"][1]


def test_the_exact_flag_reaches_the_session(tiny_target: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``--exact`` on the command line: exact where the weights allow it (bench's JSON
    says so), and a note naming the blocking weights where they do not."""
    import json

    from app.cli import main

    assert main(["generate", "--model", str(tiny_target), "--prompt-lookup", "--exact",
                 "--max-tokens", "4", "--threads", "1", "hello hello"]) == 0
    assert "F32 weights" in capsys.readouterr().err
    src = write_tiny_llama(tmp_path / "tiny-h32.gguf", n_head=2)
    dst = tmp_path / "tiny-q5_1.gguf"
    requantize(src, dst, "Q5_1")
    assert main(["bench", "--model", str(dst), "--prompt-lookup", "--exact", "--prompts",
                 "builtin:chat", "--limit", "1", "--k", "2", "--repeat", "1", "--max-tokens",
                 "4", "--threads", "1", "--no-warmup", "-q", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["settings"]["exact_verification"] is True

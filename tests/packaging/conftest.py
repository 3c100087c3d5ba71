"""Fixtures for the packaging tests: a built sdist and wheel, a fresh virtual environment
with the wheel installed, the Linux bundle built with ``packaging/build_linux.sh``, and
a helper that runs a GUI process offscreen until its log shows an event.

The builds are session-scoped (each is made once per test run) and live in pytest's
temporary folder, never in the repository.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: generous bound for a process to reach an event (a loaded 2-core machine)
EVENT_TIMEOUT_S = 300.0


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment for a packaged Tandem: its own TANDEM_HOME, offscreen Qt, and no
    PYTHONPATH (so nothing is imported from the repository)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(TANDEM_HOME=str(home), QT_QPA_PLATFORM="offscreen", **extra)
    return env


def run_until_logged(cmd: Sequence[str], log_file: Path, wanted: Sequence[str],
                     env: Mapping[str, str], cwd: Path) -> tuple[int, str, str]:
    """Start ``cmd``, wait until every line of ``wanted`` appears in ``log_file`` (or the
    process ends), then send SIGTERM (the window closes as if the user closed it).

    Returns (exit status, stderr, log text). Fails the test if the events never came.
    """
    proc = subprocess.Popen(list(cmd), env=dict(env), cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    text = ""
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            text = log_file.read_text(encoding="utf-8") if log_file.is_file() else ""
            if all(w in text for w in wanted):
                break
            time.sleep(0.2)  # polling a file for an event, not timing anything
        else:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"{cmd[0]} never logged {wanted} (exit {proc.returncode}):\n{err}\n{text}")
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=EVENT_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err, log_file.read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def built_dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel, built with ``python -m build`` (the wheel from the sdist)."""
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(REPO)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [wheel] = out.glob("tandem_chat-*.whl")
    [sdist] = out.glob("tandem_chat-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


@pytest.fixture(scope="session")
def wheel_venv(built_dists: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment with only the built wheel and its dependencies (from the
    package index, through pip's cache), not the repository."""
    venv = tmp_path_factory.mktemp("wheel-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # llama-cpp-python first, with the flags and the pip cache install.sh used for .venv
    # (a build with other flags would take minutes; a native one crashes on some CPUs)
    proc = subprocess.run([*pip, "llama-cpp-python>=0.3.36,<0.4"], capture_output=True, text=True,
                          env={**env, **llama_build_env()}, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    proc = subprocess.run([*pip, str(built_dists["wheel"])], capture_output=True, text=True,
                          env=env, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return venv


def llama_build_env() -> dict[str, str]:
    """CMAKE_ARGS and PIP_CACHE_DIR as ``packaging/install.sh`` set them when it compiled
    the .venv's llama-cpp-python (its marker file; the portable flags if there is none)."""
    marker = REPO / ".venv" / ".tandem-llama-backend"
    flags = (marker.read_text(encoding="utf-8").strip() if marker.is_file() else
             subprocess.run(["bash", str(REPO / "packaging" / "cpu_flags.sh"), "portable"],
                            capture_output=True, text=True, check=True).stdout.strip())
    cache = subprocess.run(["bash", str(REPO / "packaging" / "llama_pip_cache.sh"), flags],
                           capture_output=True, text=True, check=True).stdout.strip()
    return {"CMAKE_ARGS": flags, "PIP_CACHE_DIR": cache}


@pytest.fixture(scope="session")
def linux_bundle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """``packaging/build_linux.sh`` run once: the bundle folder, the .deb, the tarball,
    and the JSON line it printed (sizes, floor, Depends)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the Linux bundle is built on Linux")
    out = tmp_path_factory.mktemp("linux-bundle")
    t0 = time.monotonic()
    # --host-cpu: the test packs the .venv that install.sh built for this CPU
    proc = subprocess.run(["bash", str(REPO / "packaging" / "build_linux.sh"), "--out", str(out), "--host-cpu"],
                          cwd=REPO, capture_output=True, text=True, timeout=3600)
    seconds = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"\nLinux bundle built in {seconds:.0f} s: {report}")
    return {"out": out, "bundle": Path(report["bundle"]), "deb": Path(report["deb"]),
            "tarball": Path(report["tarball"]), "report": report}

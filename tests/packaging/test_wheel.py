"""The built distributions: the sdist and wheel carry ``resources/`` as the package
``app.resources``, and the wheel installed in a fresh virtual environment gives a working
CLI (``models catalog``) and a window that opens offscreen."""

from __future__ import annotations

import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.packaging.conftest import REPO, clean_env, run_until_logged

# builds take minutes, more on a busy machine: beyond the suite's 600 s default
pytestmark = [pytest.mark.packaging, pytest.mark.timeout(3600)]

RESOURCE_FILES = sorted(p.relative_to(REPO / "resources").as_posix()
                        for p in (REPO / "resources").rglob("*")
                        if p.is_file() and "__pycache__" not in p.parts)


def test_sdist_and_wheel_carry_the_resources(built_dists: dict[str, Path]) -> None:
    with zipfile.ZipFile(built_dists["wheel"]) as wheel:
        names = set(wheel.namelist())
    assert {f"app/resources/{f}" for f in RESOURCE_FILES} <= names
    assert not any(n.startswith(("resources/", "tests/", "packaging/")) for n in names)
    licenses = {n.rsplit("/", 1)[-1] for n in names if ".dist-info/licenses/" in n}
    assert licenses == {"LICENSE", "THIRD_PARTY_NOTICES.md"}
    with tarfile.open(built_dists["sdist"]) as sdist:
        root = sdist.getnames()[0].split("/")[0]
        members = set(sdist.getnames())
    assert {f"{root}/resources/{f}" for f in RESOURCE_FILES} <= members
    assert {f"{root}/setup.py", f"{root}/LICENSE", f"{root}/THIRD_PARTY_NOTICES.md"} <= members


def test_fresh_venv_cli_finds_its_data_files(wheel_venv: Path, tmp_path: Path) -> None:
    env = clean_env(tmp_path / "home")
    py = wheel_venv / "bin" / "python"
    where = subprocess.run([str(py), "-c", "from app.store import paths; print(paths.resources_dir())"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, check=True).stdout.strip()
    assert Path(where).is_relative_to(wheel_venv) and not Path(where).is_relative_to(REPO)
    cli = wheel_venv / "bin" / "tandem-cli"
    out = subprocess.run([str(cli), "models", "catalog", "--json"], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    assert '"qwen2.5-7b-instruct"' in out.stdout  # read from app/resources/catalog/pairs.json
    log = (tmp_path / "home" / "logs" / "tandem-cli.log").read_text()
    assert "Tandem " in log and "llama.cpp: ggml" in log and "command: models catalog --json" in log
    version = subprocess.run([str(cli), "--version"], capture_output=True, text=True, env=env,
                             cwd=tmp_path, timeout=120)
    assert version.returncode == 0 and version.stdout.startswith("Tandem ")


def test_fresh_venv_window_opens_offscreen(wheel_venv: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    status, err, log = run_until_logged([str(wheel_venv / "bin" / "tandem")],
                                        home / "logs" / "tandem.log", ["window shown"],
                                        clean_env(home), tmp_path)
    assert status == 0, err
    assert "Traceback" not in err and "Traceback" not in log
    assert "platform offscreen" in log and "exit with status 0" in log


def test_tandem_help_does_not_open_the_window(wheel_venv: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    out = subprocess.run([str(wheel_venv / "bin" / "tandem"), "--help"], capture_output=True,
                         text=True, env=clean_env(home), cwd=tmp_path, timeout=120)
    assert out.returncode == 0 and "usage:" in out.stdout
    assert not (home / "logs" / "tandem.log").exists()

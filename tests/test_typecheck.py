"""mypy strict, as configured in pyproject.toml ([tool.mypy]: the files it lists), finds
no errors. Run through mypy's API, so the test command is also the type check (CI runs
only ``python -m pytest``). The import-linter contracts are checked by
tests/test_layers.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_mypy_strict_finds_no_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api = pytest.importorskip("mypy.api", reason="mypy is in the test extra")
    monkeypatch.chdir(REPO)  # the files listed in [tool.mypy] are relative to the root
    stdout, stderr, status = api.run([
        "--config-file", os.fspath(REPO / "pyproject.toml"),
        "--cache-dir", os.fspath(tmp_path / "mypy-cache"),
        "--no-error-summary", "--show-error-codes",
    ])
    errors = [line for line in stdout.splitlines() if ": error:" in line]
    assert status == 0 and not errors, "\n".join(errors) or stdout + stderr

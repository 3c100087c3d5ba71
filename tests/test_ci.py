"""CI runs every test: ``.ci/run`` is plain ``pytest`` (no ``-m``/``-k``), pyproject's
addopts deselect nothing, and the packaging tests (wheel in a fresh venv, the Linux
bundle built and smoke-tested) carry the registered ``packaging`` marker."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_ci_runs_the_packaging_tests() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    markers = {m.split(":", 1)[0].strip() for m in config["markers"]}
    assert "packaging" in markers and "--strict-markers" in config["addopts"]
    for opts in (shlex.split(config["addopts"]),):
        assert not {"-m", "-k", "--deselect", "--ignore"} & set(opts), opts
    pytest_lines = [ln for ln in (REPO / ".ci" / "run").read_text().splitlines()
                    if "pytest" in ln and not ln.lstrip().startswith("#")]
    assert pytest_lines, ".ci/run does not run pytest"
    for line in pytest_lines:
        assert not re.search(r"\s(-m|-k|--deselect|--ignore)\b", line.split("pytest", 1)[1]), line
    for name in ("test_wheel.py", "test_linux_bundle.py"):
        text = (REPO / "tests" / "packaging" / name).read_text()
        assert re.search(r"pytestmark = \[pytest\.mark\.packaging", text), name

"""The layer rules of docs/architecture.md: Qt only under app/ui; imports point down
(ui, cli → chat → remote → engine → catalog → store → options); every package in a contract.

Two independent checks:

* import-linter with the contracts from pyproject.toml (run through ``lint-imports``; the
  config is copied to a temporary file with ``include_external_packages = true``, which
  import-linter requires for the forbidden external modules PySide6 and shiboken6);
* an AST scan of every module, lazy imports inside functions included, so the rule holds
  even where import-linter is not installed.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]
APP = REPO / "app"

_QT = ("PySide6", "shiboken6", "app.ui", "app.entry")
_ABOVE_REMOTE = (*_QT, "app.cli", "app.api", "app.chat", "app.diagnostics")
_ABOVE_ENGINE = (*_ABOVE_REMOTE, "app.remote")
_ABOVE_CATALOG = (*_ABOVE_ENGINE, "app.engine")
_ABOVE_STORE = (*_ABOVE_CATALOG, "app.catalog", "app.launcher")
_ABOVE_VOCABULARY = (*_ABOVE_STORE, "app.store")

#: package → packages it must never import (directly or lazily)
FORBIDDEN = {
    "app.entry": ("app.__main__",),
    "app.cli": _QT,
    "app.api": (*_QT, "app.cli"),
    "app.chat": (*_QT, "app.cli", "app.api", "app.diagnostics"),
    "app.diagnostics": (*_QT, "app.cli", "app.api", "app.chat"),  # read before Qt is loaded
    "app.remote": _ABOVE_REMOTE,
    "app.engine": _ABOVE_ENGINE,
    "app.catalog": (*_ABOVE_CATALOG, "app.launcher"),
    "app.launcher": (*_ABOVE_CATALOG, "app.catalog"),
    "app.store": _ABOVE_STORE,
    "app.options": (*_ABOVE_VOCABULARY, "app.formatting", "app.errors", "app.system_libs"),
    "app.formatting": (*_ABOVE_VOCABULARY, "app.options", "app.errors", "app.system_libs"),
    "app.errors": (*_ABOVE_VOCABULARY, "app.options", "app.formatting", "app.system_libs"),
    # runs before Qt can load (the window's first check, install-launcher, install.sh)
    "app.system_libs": (*_ABOVE_VOCABULARY, "app.options", "app.formatting", "app.errors"),
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _module_name(path)
    if path.name != "__init__.py":
        package = package.rsplit(".", 1)[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.append((node.lineno, mod))
            found.extend((node.lineno, f"{mod}.{a.name}") for a in node.names)
    return found


def _violations() -> list[str]:
    bad: list[str] = []
    for path in sorted(APP.rglob("*.py")):
        name = _module_name(path)
        rules = [forb for pkg, forb in FORBIDDEN.items() if name == pkg or name.startswith(pkg + ".")]
        for forbidden in rules:
            for lineno, imported in _imports(path):
                for f in forbidden:
                    if imported == f or imported.startswith(f + "."):
                        bad.append(f"{path.relative_to(REPO)}:{lineno} imports {imported}")
    return sorted(set(bad))


def test_qt_only_under_app_ui_and_layers_point_down() -> None:
    assert _violations() == []


def test_the_scan_catches_a_lazy_qt_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "app" / "store"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "sneaky.py").write_text("def f():\n    from PySide6 import QtCore\n    from ..ui import x\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "APP", tmp_path / "app")
    found = _violations()
    assert any("sneaky.py:2 imports PySide6" in v for v in found), found
    assert any("sneaky.py:3 imports app.ui" in v for v in found), found


@pytest.mark.skipif(shutil.which("lint-imports") is None
                    and not (Path(sys.executable).parent / "lint-imports").exists(),
                    reason="import-linter is not installed")
def test_import_linter_contracts(tmp_path: Path) -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    lines = ["[tool.importlinter]", f'root_package = "{config["root_package"]}"',
             "include_external_packages = true", ""]
    for contract in config["contracts"]:
        lines.append("[[tool.importlinter.contracts]]")
        for key, value in contract.items():
            if isinstance(value, bool):
                lines.append(f"{key} = {'true' if value else 'false'}")
            elif isinstance(value, list):
                lines.append(f"{key} = [{', '.join(repr(v).replace(chr(39), chr(34)) for v in value)}]")
            else:
                lines.append(f'{key} = "{value}"')
        lines.append("")
    cfg = tmp_path / "importlinter.toml"
    cfg.write_text("\n".join(lines))
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    proc = subprocess.run([exe, "--no-logo", "--no-cache", str(cfg)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "BROKEN" not in proc.stdout


def _contract_modules() -> set[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    named: set[str] = set()
    for contract in config["contracts"]:
        for key in ("layers", "source_modules", "modules", "containers"):
            for entry in contract.get(key, []):
                named.update(part.strip() for part in entry.replace(":", "|").split("|"))
    return named


def test_every_package_of_app_is_in_a_contract() -> None:
    """Each top-level package and module of app/ is named in the layers contract, so a
    new room cannot be added without saying where it sits."""
    named = _contract_modules()
    top = {f"app.{p.stem if p.is_file() else p.name}" for p in APP.iterdir()
           if (p.is_dir() and (p / "__init__.py").exists())
           or (p.suffix == ".py" and p.name != "__init__.py")}
    assert top - named == set()
    assert FORBIDDEN.keys() | {"app.ui", "app.__main__"} >= top


def test_the_main_window_stays_layout_and_wiring() -> None:
    """The window's decisions live in app/chat; MainWindow itself (the class,
    not its helpers in app/ui) stays at most 450 lines."""
    tree = ast.parse((APP / "ui" / "main_window.py").read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MainWindow"]
    assert cls.end_lineno is not None
    assert cls.end_lineno - cls.lineno + 1 <= 450

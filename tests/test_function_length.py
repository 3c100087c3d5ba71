"""No function in app/ is longer than MAX_LINES, except the Qt layout builders.

A long function hides its steps; split it into named helpers (a small dataclass for the
state a loop carries). Layout builders (``_build`` methods under app/ui) are exempt: they
list widgets one after another and read best in one piece. Lines are counted from the
``def`` line to the last line of the body (decorators left out), docstring included.
The scan tests itself on a planted long function, so it cannot pass by finding nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
APP = REPO / "app"

MAX_LINES = 100
#: names of the methods exempt under app/ui (Qt layout builders)
LAYOUT_BUILDERS = frozenset({"_build"})


def long_functions(path: Path, *, exempt: frozenset[str] = frozenset(),
                   max_lines: int = MAX_LINES) -> list[tuple[str, int, int]]:
    """(name, first line, line count) of each function in ``path`` longer than
    ``max_lines``, nested functions and methods included, names in ``exempt`` skipped."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[tuple[str, int, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if node.name in exempt:
            continue
        assert node.end_lineno is not None
        n = node.end_lineno - node.lineno + 1
        if n > max_lines:
            out.append((node.name, node.lineno, n))
    return out


def _exempt_names(path: Path) -> frozenset[str]:
    return LAYOUT_BUILDERS if (APP / "ui") in path.parents else frozenset()


def test_no_function_in_app_is_too_long() -> None:
    found = [
        f"{path.relative_to(REPO)}:{line} {name} ({n} lines)"
        for path in sorted(APP.rglob("*.py"))
        for name, line, n in long_functions(path, exempt=_exempt_names(path))
    ]
    assert not found, f"functions over {MAX_LINES} lines (split them): {found}"


def test_the_scan_finds_a_planted_long_function(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))
    planted = tmp_path / "planted.py"
    planted.write_text(
        "def short() -> int:\n    return 1\n\n\n"
        f"def too_long() -> None:\n{body}\n\n"
        f"class Widget:\n    def _build(self) -> None:\n{body.replace('    ', '        ')}\n"
        f"    async def nested_owner(self) -> None:\n        def inner() -> None:\n"
        f"{body.replace('    ', '            ')}",
        encoding="utf-8",
    )
    names = {name for name, _, _ in long_functions(planted)}
    assert names == {"too_long", "_build", "nested_owner", "inner"}
    assert {name for name, _, _ in long_functions(planted, exempt=LAYOUT_BUILDERS)} == {
        "too_long", "nested_owner", "inner"}
    # exactly MAX_LINES lines is allowed: ``def`` plus MAX_LINES - 1 body lines
    edge = tmp_path / "edge.py"
    edge.write_text("def edge() -> None:\n" + "".join(
        f"    y{i} = {i}\n" for i in range(MAX_LINES - 1)), encoding="utf-8")
    assert long_functions(edge) == []
    edge.write_text(edge.read_text(encoding="utf-8") + "    z = 0\n", encoding="utf-8")
    assert long_functions(edge) == [("edge", 1, MAX_LINES + 1)]


def test_the_layout_exemption_is_only_for_ui() -> None:
    assert _exempt_names(APP / "ui" / "race" / "race_window.py") == LAYOUT_BUILDERS
    assert _exempt_names(APP / "engine" / "measure" / "bench.py") == frozenset()

"""``packaging/install.sh --test`` puts both test models where the tests and the README
look for them (``.cache/test-models/``), and the README's Known behaviour summary points
at the full page, whose every figure names its source."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import GEMMA, MODELS, REPO, SMOLLM

INSTALL = REPO / "packaging" / "install.sh"


def test_install_test_writes_both_test_models_where_the_tests_and_readme_look() -> None:
    script = INSTALL.read_text(encoding="utf-8")
    start = script.index('if [ "$want_test" = 1 ]; then')
    test_part = script[start:script.index("\nelse\n", start)]
    [folder] = re.findall(r"^\s*models=(\S+)$", test_part, re.M)
    assert REPO / folder == MODELS
    for name in (SMOLLM, GEMMA):
        assert f'"$models/{name}"' in test_part, name  # written there, under its own name
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    install_paragraph = readme[readme.index("`packaging/install.sh` creates `.venv`"):]
    install_paragraph = install_paragraph[:install_paragraph.index("\n\n")]
    assert f"`{folder}/`" in install_paragraph
    assert SMOLLM in install_paragraph and GEMMA in install_paragraph


def test_known_behaviour_lives_in_docs_with_a_summary_in_the_readme() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Known behaviour"):readme.index("## Development")]
    assert "(docs/behaviour.md)" in section
    assert len(section.splitlines()) < 30  # a summary, not the wall of figures
    page = (REPO / "docs" / "behaviour.md").read_text(encoding="utf-8")
    for figure in ("6 of 8", "1.97–2.22×", "77 tok/s", "0.3 %"):
        assert figure in page
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page):
        assert (REPO / "docs" / link).resolve().is_file(), link

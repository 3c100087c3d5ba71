"""The drafter registry: every list of drafters is made from the declarations.

Checks that the vocabulary, the registry, the command line, Auto's candidates and the docs
table agree, that declarations are validated, and that the session finds each drafter
through the registry.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from app.cli.options import add_model_args, drafter_mode
from app.engine.drafter_kinds import DrafterKind, Unavailable, kind_for, kinds, register
from app.engine.session import Session, SessionConfig
from app.options import (
    DRAFT_MODEL_INFO,
    DrafterInfo,
    DrafterNeeds,
    SpecMode,
    SpeculationConfig,
    auto_candidates,
    declare_drafter,
    drafter_infos,
    drafter_table_markdown,
)

REPO = Path(__file__).resolve().parents[2]


def test_every_drafter_mode_has_exactly_one_registered_kind() -> None:
    registered = [k.mode for k in kinds()]
    assert len(registered) == len(set(registered))
    assert set(registered) == {m for m in SpecMode if m not in (SpecMode.OFF, SpecMode.AUTO)}
    assert [i.mode for i in drafter_infos()] == [m.value for m in registered]
    assert kind_for(SpecMode.OFF) is None and kind_for("auto") is None
    assert list(SpecMode)[0] is SpecMode.OFF and list(SpecMode)[-1] is SpecMode.AUTO


def test_the_stored_words_of_the_built_in_modes_never_change() -> None:
    for word in ("off", "prompt-lookup", "draft-model", "suffix", "auto"):
        assert SpecMode(word).value == word
        assert json.dumps(SpeculationConfig(mode=word).model_dump(mode="json")["mode"]) == f'"{word}"'
    assert SpeculationConfig(mode="suffix").model_dump()["mode"] is SpecMode.SUFFIX
    with pytest.raises(ValueError, match="not a drafter mode"):
        SpecMode("no-such-drafter")


def test_declarations_are_checked() -> None:
    with pytest.raises(ValueError, match="already declared"):
        declare_drafter(DrafterInfo("off", "Off", "off", DrafterNeeds.NOTHING, 4))
    with pytest.raises(ValueError, match="already declared"):  # another drafter's word
        declare_drafter(DrafterInfo("suffix", "Other", "other", DrafterNeeds.NOTHING, 4))
    with pytest.raises(ValueError, match="default k"):
        declare_drafter(DrafterInfo("too-long", "Too long", "too long", DrafterNeeds.NOTHING, 999))
    assert "too-long" not in [m.value for m in SpecMode]
    # declaring the same thing again (a module imported twice) is harmless
    assert declare_drafter(DRAFT_MODEL_INFO) is SpecMode.DRAFT_MODEL
    assert isinstance(register(DRAFT_MODEL_INFO, lambda host, spec: Unavailable("x")), DrafterKind)


def test_command_line_switches_come_from_the_registry() -> None:
    p = argparse.ArgumentParser()
    add_model_args(p)
    for kind in kinds():
        flag = kind.info.cli_flag
        assert flag is not None
        argv = ["--model", "m.gguf", flag]
        if kind.info.needs is DrafterNeeds.DRAFT_MODEL:
            argv.append("d.gguf")
        assert drafter_mode(p.parse_args(argv)) is kind.mode
    assert drafter_mode(p.parse_args(["--model", "m.gguf"])) is SpecMode.OFF
    assert drafter_mode(p.parse_args(["--model", "m.gguf", "--auto"])) is SpecMode.AUTO


def test_auto_candidates_come_from_the_declarations() -> None:
    ranked = sorted((i.auto_rank, i.mode) for i in drafter_infos() if i.auto_rank is not None)
    assert auto_candidates() == tuple(SpecMode(m) for _, m in ranked)
    assert auto_candidates()[:3] == (SpecMode.SUFFIX, SpecMode.PROMPT_LOOKUP, SpecMode.DRAFT_MODEL)


def test_the_docs_table_is_the_registry_s() -> None:
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    table = text.split("<!-- drafters: begin -->\n")[1].split("<!-- drafters: end -->")[0]
    assert table == drafter_table_markdown()
    from app.cli.options import OPTION_NAMES  # the table's flags are the real ones

    for info in drafter_infos():
        for option in info.options:
            assert OPTION_NAMES[option] == "--" + option.replace("_", "-"), option


def test_the_session_finds_each_drafter_through_the_registry(tiny_target: Path) -> None:
    with Session.open(SessionConfig(target_path=tiny_target, n_ctx=128, n_threads=1)) as s:
        for kind in kinds():
            drafter, note = s._make_drafter(SpeculationConfig(mode=kind.mode))
            if kind.info.needs is DrafterNeeds.NOTHING:
                assert drafter is not None and drafter.kind is kind.mode and note is None
            else:  # nothing loaded for it: plain decoding and one sentence why
                assert drafter is None and note and "\n" not in note

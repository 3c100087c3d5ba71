"""A new drafter is one declaration plus its code: nothing else in the app changes.

This module defines a tiny drafter of its own — it proposes the last token again, k
times — registers it with :func:`app.engine.drafter_kinds.register` (the fixture takes
it out again), and checks that it appears wherever drafters are listed: the vocabulary,
the command line, the local API's accepted modes, the window's drafter menu, the race
window's lanes, the model picker's draft list, Auto's candidates and the docs table; and
that it drafts through :class:`~app.engine.session.Session` on the real Gemma 3 270M,
with output identical to plain decoding under exact verification.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from app.engine.drafter_kinds import (
    DrafterHost,
    DrafterKind,
    kind_for,
    kinds,
    register,
    unregister,
)
from app.engine.drafters import Drafter
from app.engine.suffix import SuffixIndex
from app.options import (
    DrafterInfo,
    DrafterNeeds,
    SamplingParams,
    SpecMode,
    SpeculationConfig,
    auto_candidates,
    drafter_table_markdown,
)

REPEAT_INFO = DrafterInfo(
    mode="repeat-last", label="Repeat last", words="repeat-last drafting",
    needs=DrafterNeeds.NOTHING, default_k=3, auto_rank=9, cli_flag="--repeat-last",
    summary="proposes the last token again, k times",
    picker_expect="depends on runs of one token",
    picker_status="always available: repeats the last token")


class RepeatLastDrafter:
    """Proposes the context's last token ``n_max`` times (no model, no state)."""

    forward_passes = 0
    draft_limit: int | None = None

    def __init__(self) -> None:
        self.kind = SpecMode(REPEAT_INFO.mode)

    def begin(self, prompt: Sequence[int], should_stop: Callable[[], bool] | None = None) -> None:
        pass

    def draft(self, context: Sequence[int], n_max: int) -> list[int]:
        return [context[-1]] * n_max if context else []

    def close(self) -> None:
        pass


def _create(host: DrafterHost, spec: SpeculationConfig) -> Drafter:
    return RepeatLastDrafter()


def _replay(spec: SpeculationConfig, index: SuffixIndex) -> Drafter:
    return RepeatLastDrafter()


@pytest.fixture
def repeat_last() -> Iterator[DrafterKind]:
    """The drafter registered for one test, then taken out of every list again."""
    kind = register(REPEAT_INFO, _create, replay=_replay)
    try:
        yield kind
    finally:
        unregister(kind.mode)
    assert REPEAT_INFO.mode not in [m.value for m in SpecMode]
    assert all(k.info is not REPEAT_INFO for k in kinds())


def test_it_joins_the_vocabulary_and_the_registry(repeat_last: DrafterKind) -> None:
    mode = SpecMode("repeat-last")
    assert repeat_last.mode is mode and kind_for("repeat-last") is repeat_last
    assert list(SpecMode)[-1] is SpecMode.AUTO and mode in list(SpecMode)
    assert mode.label == "Repeat last" and mode.info is REPEAT_INFO
    assert SpeculationConfig(mode="repeat-last").draft_max == 3  # its own default k
    assert mode in auto_candidates() and auto_candidates()[-1] is mode  # ranked last
    assert ("| `repeat-last` | Repeat last | nothing | `--repeat-last` | yes | 3 |"
            in drafter_table_markdown())
    with pytest.raises(ValueError, match="cannot be withdrawn"):
        unregister(SpecMode.SUFFIX)


def test_the_command_line_takes_its_switch(repeat_last: DrafterKind) -> None:
    from app.cli.main import build_parser
    from app.cli.options import add_model_args, drafter_mode

    p = argparse.ArgumentParser()
    add_model_args(p)
    assert drafter_mode(p.parse_args(["--model", "m.gguf", "--repeat-last"])) is repeat_last.mode
    args = build_parser().parse_args(["generate", "--model", "m.gguf", "--repeat-last", "hi"])
    assert drafter_mode(args) is repeat_last.mode
    auto_help = next(a.help for a in p._actions if "--auto" in a.option_strings)
    assert auto_help is not None and "repeat-last drafting" in auto_help


def test_the_local_api_accepts_its_mode(repeat_last: DrafterKind) -> None:
    from app.api.protocol import ApiError, parse_chat_request

    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                       "speculation": {"mode": "repeat-last"}}).encode()
    req = parse_chat_request(body, SamplingParams(), SpeculationConfig(),
                             max_tokens_default=64)
    assert req.speculation.mode is repeat_last.mode and req.speculation.draft_max == 3
    unregister(repeat_last.mode)  # gone: the same request is refused
    with pytest.raises(ApiError) as err:
        parse_chat_request(body, SamplingParams(), SpeculationConfig(), max_tokens_default=64)
    assert err.value.status == 400 and "repeat-last" in str(err.value)
    register(REPEAT_INFO, _create, replay=_replay)


def test_the_windows_list_it(qtbot, repeat_last: DrafterKind) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import QThreadPool

    from app.catalog.library import Library
    from app.ui.model_bar import ModelBarWidget
    from app.ui.picker.library_tab import LibraryTabWidget
    from app.ui.race.race_window import race_drafters

    bar = ModelBarWidget()
    qtbot.addWidget(bar)
    items = [SpecMode(bar.mode_combo.itemData(i)) for i in range(bar.mode_combo.count())]
    assert repeat_last.mode in items and items[-1] is SpecMode.AUTO
    bar.mode_combo.setCurrentIndex(items.index(repeat_last.mode))
    assert bar.mode() is repeat_last.mode and not bar.draft_button.isVisibleTo(bar)
    assert (repeat_last.mode, "Repeat last") in race_drafters(None)
    tab = LibraryTabWidget(Library(), QThreadPool())
    qtbot.addWidget(tab)
    tab.show_drafts(())
    rows = [r[0] for r in tab.draft_rows()]
    assert "Repeat last (no draft model)" in rows
    assert rows.index("Repeat last (no draft model)") < rows.index("Auto (chosen per conversation)")


@pytest.mark.slow
def test_it_drafts_through_the_session_and_changes_nothing(
        repeat_last: DrafterKind, gemma_q5_1: Path) -> None:
    from app.engine.auto import estimate_drafters
    from app.engine.chat import tokenize_plain
    from app.engine.session import Session, SessionConfig
    from tests.engine.util import run

    greedy = SamplingParams(temperature=0.0, max_tokens=16)
    cfg = SessionConfig(target_path=gemma_q5_1, n_ctx=512, n_threads=2, n_gpu_layers=0,
                        exact_verification=True)
    with Session.open(cfg) as s:
        assert s.exact_verification
        accepted = 0
        for text in ("Row of stars: * * * * * * * * *",
                     "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n"):
            prompt = tokenize_plain(s.target, text)
            plain = run(s, prompt, greedy, SpeculationConfig())
            spec = SpeculationConfig(mode="repeat-last", draft_max=3, adaptive=False)
            drafted = run(s, prompt, greedy, spec)
            assert drafted.ids == plain.ids and drafted.finished.text == plain.finished.text
            assert drafted.stats.mode is repeat_last.mode and drafted.stats.verified > 0
            assert drafted.finished.speculation.mode is repeat_last.mode
            accepted += drafted.stats.accepted
        assert accepted > 0  # the row of stars: its drafts were right
        # Auto prices it by replaying an earlier reply through it, as the built-in ones
        estimates = estimate_drafters(s, [(prompt, list(plain.ids))], (),
                                      SpeculationConfig(mode="auto"))
        assert repeat_last.mode in [e.mode for e in estimates]

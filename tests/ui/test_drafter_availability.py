"""Which drafters a target can use, decided once (:func:`app.options.drafter_unusable`)
and shown alike by the model picker and the chat window's drafter menu: MTP is greyed,
with its reason as the tooltip, for a model without multi-token-prediction layers, and
offered for one with them or with an MTP assistant loaded (the real tiny models,
loaded)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QStandardItemModel

from app.chat.events import ModelInfo
from app.chat.service import describe_session
from app.engine.session import Session, SessionConfig
from app.options import SpecMode, drafter_unusable
from app.ui.model_bar import ModelBarWidget

MTP = SpecMode("mtp")


class _Heads:
    def __init__(self, n: int) -> None:
        self.nextn_layers = n
        self.draft_is_assistant = False


def test_the_rule_names_what_a_target_lacks() -> None:
    info = MTP.info
    assert info is not None
    assert drafter_unusable(info, None) is None  # no target known: nothing to grey
    assert drafter_unusable(info, _Heads(1)) is None
    none = drafter_unusable(info, _Heads(0))
    assert none is not None and none.startswith("needs multi-token-prediction (nextn) layers")
    assert drafter_unusable(info, _Heads(3)) is None  # chained heads, one per position
    assert drafter_unusable(info, _Heads(0), assistant=True) is None  # Gemma 4's assistant
    for other in (SpecMode.PROMPT_LOOKUP, SpecMode.SUFFIX, SpecMode.DRAFT_MODEL):
        assert other.info is not None and drafter_unusable(other.info, _Heads(0)) is None


def _menu(bar: ModelBarWidget) -> dict[str, tuple[bool, str]]:
    """Each drafter of the menu: (enabled, tooltip)."""
    model = bar.mode_combo.model()
    assert isinstance(model, QStandardItemModel)
    out = {}
    for row in range(bar.mode_combo.count()):
        item = model.item(row)
        out[str(bar.mode_combo.itemData(row))] = (
            item.isEnabled(), str(item.data(Qt.ItemDataRole.ToolTipRole) or ""))
    return out


def test_the_drafter_menu_greys_mtp_for_a_model_without_heads(
        qtbot, tiny_target: Path, tiny_mtp: Path) -> None:  # type: ignore[no-untyped-def]
    bar = ModelBarWidget()
    qtbot.addWidget(bar)
    assert all(on for on, _ in _menu(bar).values())  # nothing loaded: all offered
    with Session.open(SessionConfig(target_path=tiny_target, n_ctx=128, n_threads=1)) as s:
        plain = describe_session(s, 0.1)
    assert plain.nextn_layers == 0
    bar.set_model(plain)
    menu = _menu(bar)
    on, tip = menu[MTP.value]
    assert not on and tip.startswith("MTP (built into the model): needs multi-token-prediction")
    assert all(on for mode, (on, _) in menu.items() if mode != MTP.value)
    # the model picker greys it with the same words
    assert MTP.info is not None and tip.endswith(drafter_unusable(MTP.info, plain) or "-")

    with Session.open(SessionConfig(target_path=tiny_mtp, n_ctx=128, n_threads=1)) as s:
        heads = describe_session(s, 0.1)
    assert heads.nextn_layers == 1
    bar.set_model(heads)
    assert _menu(bar)[MTP.value] == (True, "")
    bar.set_model(None)
    assert _menu(bar)[MTP.value] == (True, "")


def test_the_race_offers_mtp_only_for_a_model_with_heads() -> None:
    from app.ui.race.race_window import race_drafters

    assert MTP in {m for m, _ in race_drafters(None)}  # nothing known: listed
    assert MTP not in {m for m, _ in race_drafters(None, _Heads(0))}  # type: ignore[arg-type]
    assert MTP in {m for m, _ in race_drafters(None, _Heads(1))}  # type: ignore[arg-type]


@pytest.fixture
def with_assistant(tmp_path_factory: pytest.TempPathFactory) -> ModelInfo:
    """A Gemma 4 target (no nextn layers) with its MTP assistant loaded, as the window
    is told of it."""
    from tests.synthetic import write_tiny_gemma4, write_tiny_gemma4_assistant

    d = tmp_path_factory.mktemp("gemma4-pair")
    target = write_tiny_gemma4(d / "target.gguf")
    assistant = write_tiny_gemma4_assistant(d / "assistant.gguf")
    with Session.open(SessionConfig(target_path=target, draft_path=assistant, n_ctx=128,
                                    n_threads=1)) as s:
        info = describe_session(s, 0.1)
    assert info.nextn_layers == 0 and info.draft_is_assistant
    return info


def test_the_drafter_menu_offers_mtp_with_an_assistant_loaded(
        qtbot, with_assistant: ModelInfo) -> None:  # type: ignore[no-untyped-def]
    bar = ModelBarWidget()
    qtbot.addWidget(bar)
    bar.set_model(with_assistant)
    assert _menu(bar)[MTP.value] == (True, "")
    row = next(i for i in range(bar.mode_combo.count())
               if str(bar.mode_combo.itemData(i)) == MTP.value)
    # the menu names the assistant that drafts, not heads built into the model
    assert bar.mode_combo.itemText(row) == "MTP (assistant: assistant.gguf)"
    bar.mode_combo.setCurrentIndex(row)
    assert bar.mode() is MTP and bar.mode_combo.currentText() == "MTP (assistant: assistant.gguf)"
    assert bar.draft_button.toolTip().startswith("MTP assistant: assistant.gguf")
    bar.set_model(None)
    assert bar.mode_combo.itemText(row) == "MTP (built into the model)"


def test_the_race_drafts_with_an_assistant_through_mtp_only(with_assistant: ModelInfo) -> None:
    from app.ui.race.race_window import race_drafters

    lanes = race_drafters(with_assistant.draft_path, with_assistant)
    modes = [m for m, _ in lanes]
    assert MTP in modes and SpecMode.DRAFT_MODEL not in modes
    # the MTP lane names the assistant; no other lane does
    assert [label for _, label in lanes if "assistant.gguf" in label] == [
        "MTP (assistant: assistant.gguf)"]
    assert dict(race_drafters(None, _Heads(1)))[MTP] == "MTP (built into the model)"  # type: ignore[arg-type]

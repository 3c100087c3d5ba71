"""Which drafters a target can use, decided once (:func:`app.options.drafter_unusable`)
and shown alike by the model picker and the chat window's drafter menu: MTP is greyed,
with its reason as the tooltip, for a model without multi-token-prediction layers, and
offered for one with them (the real tiny models, loaded)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QStandardItemModel

from app.chat.service import describe_session
from app.engine.session import Session, SessionConfig
from app.options import SpecMode, drafter_unusable
from app.ui.model_bar import ModelBarWidget

MTP = SpecMode("mtp")


class _Heads:
    def __init__(self, n: int) -> None:
        self.nextn_layers = n


def test_the_rule_names_what_a_target_lacks() -> None:
    info = MTP.info
    assert info is not None
    assert drafter_unusable(info, None) is None  # no target known: nothing to grey
    assert drafter_unusable(info, _Heads(1)) is None
    none = drafter_unusable(info, _Heads(0))
    assert none is not None and none.startswith("needs multi-token-prediction (nextn) layers")
    assert drafter_unusable(info, _Heads(3)) is None  # chained heads, one per position
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

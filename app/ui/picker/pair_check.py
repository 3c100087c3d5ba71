"""The pairing check, rule by rule: the details view under the draft list and in the
Catalog tab.

Shows every rule of llama.cpp's draft compatibility check
(:func:`app.catalog.pairing.check_pair`) with passed/failed and its detail (for token
texts, the first id that differs and both texts), then the warnings (a draft too large to
speed anything up).
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QFrame, QScrollArea, QVBoxLayout, QWidget

from app.catalog.pairing import PairResult
from app.ui.picker.formatting import rule_label
from app.ui.labels import Label

PASS_COLOR = QColor("#2f855a")
FAIL_COLOR = QColor("#c53030")
WARN_COLOR = QColor("#975a16")
_MUTED = "#718096"


def rules_html(result: PairResult) -> str:
    """The rules as an HTML table, one row each: a coloured ✓/✗, the rule, its detail
    (wrapped by the label when narrow, so no horizontal scroll bar is ever needed)."""
    rows = []
    for check in result.checks:
        mark, color = ("✓ passed", PASS_COLOR) if check.ok else ("✗ failed", FAIL_COLOR)
        rows.append(
            f'<tr><td style="color:{color.name()}; font-weight:700; padding:2px 12px 2px 0;">'
            f'{mark}</td><td style="padding:2px 12px 2px 0;"><b>'
            f"{html.escape(rule_label(check.rule))}</b> "
            f'<span style="color:{_MUTED};">({html.escape(check.rule)})</span></td>'
            f'<td style="padding:2px 0;">{html.escape(check.detail)}</td></tr>'
        )
    return "<table cellspacing=0>" + "".join(rows) + "</table>"


class PairCheckWidget(QWidget):
    """A title, the verdict, every rule of one pairing check with its detail, and the
    warnings."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(4)
        self.title_label = Label()
        self.title_label.setObjectName("pickerSectionTitle")
        self.title_label.setWordWrap(True)
        col.addWidget(self.title_label)
        self.verdict_label = Label()
        self.verdict_label.setObjectName("pairVerdict")
        self.verdict_label.setWordWrap(True)
        col.addWidget(self.verdict_label)
        self.rules_label = Label(rich=True)  # its details escaped (rules_html)
        self.rules_label.setObjectName("pairRules")
        self.rules_label.setWordWrap(True)
        self.rules_label.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.rules_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.rules_label.setContentsMargins(8, 6, 8, 6)
        self.scroll_area = QScrollArea()
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.StyledPanel)
        self.scroll_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll_area.setWidget(self.rules_label)
        col.addWidget(self.scroll_area, 100)
        self.note_label = Label()
        self.note_label.setObjectName("pairNote")
        self.note_label.setWordWrap(True)
        self.note_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        col.addWidget(self.note_label)
        col.addStretch(1)  # keeps a message at the top while the rules are hidden
        self.result: PairResult | None = None
        self.show_message("Pairing check", "Choose a draft to see the check, rule by rule.")

    def show_result(self, title: str, result: PairResult, note: str = "") -> None:
        """Show every rule of ``result``; ``note`` goes under the warnings."""
        self.result = result
        self.title_label.setText(title)
        if result.compatible:
            verdict = "Compatible: llama.cpp will accept this draft for this target."
            color = WARN_COLOR if result.warnings else PASS_COLOR
        else:
            verdict = f"Incompatible: {result.reason()}"
            color = FAIL_COLOR
        self.verdict_label.setText(verdict)
        self.verdict_label.setStyleSheet(f"color: {color.name()}; font-weight: 600;")
        self.rules_label.setText(rules_html(result))
        self.scroll_area.show()
        lines = [f"⚠ {w}" for w in result.warnings]
        if note:
            lines.append(note)
        self.note_label.setText("\n".join(lines))
        self.note_label.setStyleSheet(f"color: {WARN_COLOR.name()};" if result.warnings else "")
        self.note_label.setVisible(bool(lines))

    def show_message(self, title: str, text: str) -> None:
        """No check to show (prompt lookup, nothing chosen, a check in progress)."""
        self.result = None
        self.title_label.setText(title)
        self.verdict_label.setText(text)
        self.verdict_label.setStyleSheet("")
        self.rules_label.clear()
        self.scroll_area.hide()
        self.note_label.hide()

    def rule_rows(self) -> list[tuple[str, bool, str]]:
        """``(rule, passed, detail)`` for each rule shown (for tests and accessibility)."""
        if self.result is None:
            return []
        return [(c.rule, c.ok, c.detail) for c in self.result.checks]

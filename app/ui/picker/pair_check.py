"""The pairing check, rule by rule: the details view under the draft list and in the
Catalog tab.

Shows every rule of llama.cpp's draft compatibility check
(:func:`app.catalog.pairing.check_pair`) with passed/failed and its detail (for token
texts, the first id that differs and both texts), then the warnings (a draft too large to
speed anything up).
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import QHeaderView, QLabel, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from app.catalog.pairing import PairResult
from app.ui.picker.formatting import rule_label

PASS_COLOR = QColor("#2f855a")
FAIL_COLOR = QColor("#c53030")
WARN_COLOR = QColor("#975a16")


class PairCheckWidget(QWidget):
    """A title, the rules of one pairing check as a table, and its warnings."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(4)
        self.title_label = QLabel()
        self.title_label.setObjectName("pickerSectionTitle")
        self.title_label.setWordWrap(True)
        col.addWidget(self.title_label)
        self.verdict_label = QLabel()
        self.verdict_label.setObjectName("pairVerdict")
        self.verdict_label.setWordWrap(True)
        col.addWidget(self.verdict_label)
        self.rules = QTreeWidget()
        self.rules.setObjectName("pairRules")
        self.rules.setColumnCount(3)
        self.rules.setHeaderLabels(["Rule", "Result", "Detail"])
        self.rules.setRootIsDecorated(False)
        self.rules.setWordWrap(True)
        self.rules.setSelectionMode(QTreeWidget.SelectionMode.NoSelection)
        self.rules.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        header = self.rules.header()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        header.setStretchLastSection(True)
        col.addWidget(self.rules, 1)
        self.note_label = QLabel()
        self.note_label.setObjectName("pairNote")
        self.note_label.setWordWrap(True)
        self.note_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        col.addWidget(self.note_label)
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
        self.rules.clear()
        for check in result.checks:
            item = QTreeWidgetItem([f"{rule_label(check.rule)}  ({check.rule})",
                                    "✓ passed" if check.ok else "✗ failed", check.detail])
            item.setForeground(1, QBrush(PASS_COLOR if check.ok else FAIL_COLOR))
            item.setToolTip(2, check.detail)
            item.setData(0, Qt.ItemDataRole.UserRole, check.rule)
            self.rules.addTopLevelItem(item)
        self.rules.show()
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
        self.rules.clear()
        self.rules.hide()
        self.note_label.hide()

    def rule_rows(self) -> list[tuple[str, bool, str]]:
        """``(rule, passed, detail)`` for each row shown (for tests and accessibility)."""
        if self.result is None:
            return []
        return [(c.rule, c.ok, c.detail) for c in self.result.checks]

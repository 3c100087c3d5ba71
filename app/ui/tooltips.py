"""Long tooltips wrap instead of running across the screen.

Qt shows a plain-text tooltip on one line however long it is (a settings tooltip of two
sentences was as wide as the window); a rich-text tooltip is word-wrapped. The filter
that :func:`install` puts on the application turns a long plain-text tooltip into rich
text, escaped, the moment before Qt shows it, so every widget's tooltip wraps without
each call site having to remember: a widget's own tooltip, a menu action's, and an item
view's item or header section (a list, a tree, a combo box's popup), whose tooltip lives
in the model.
"""

from __future__ import annotations

import html

from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QHelpEvent, Qt  # QtGui's Qt namespace has mightBeRichText
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QHeaderView,
    QMenu,
    QToolTip,
    QWidget,
)

#: plain-text tooltips longer than this many characters are wrapped
WRAP_AFTER = 70


def wrapped(text: str) -> str:
    """``text`` as a tooltip Qt word-wraps: long plain text becomes an escaped rich-text
    paragraph (line breaks kept); short text and rich text are returned as they are."""
    if len(text) <= WRAP_AFTER or Qt.mightBeRichText(text):
        return text
    return "<p>" + html.escape(text).replace("\n", "<br>") + "</p>"


class _WrapToolTips(QObject):
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if event.type() != QEvent.Type.ToolTip or not isinstance(watched, QWidget):
            return False
        view = watched.parent()
        if isinstance(view, QAbstractItemView) and watched is view.viewport():
            return _item_tip(view, watched, event)  # type: ignore[arg-type]
        if isinstance(watched, QMenu):
            if not watched.toolTipsVisible():  # the action's text, not a tooltip
                return False
            action = watched.actionAt(event.pos())  # type: ignore[attr-defined]
            if action is not None and (new := wrapped(action.toolTip())) != action.toolTip():
                action.setToolTip(new)
            return False
        tip = watched.toolTip()
        new = wrapped(tip)
        if new != tip:
            watched.setToolTip(new)
        return False  # Qt shows the (now wrapped) tooltip as usual


def _item_tip(view: QAbstractItemView, viewport: QWidget, event: QHelpEvent) -> bool:
    """Show a long item (or header section) tooltip wrapped (True: shown here); others go
    on to the view."""
    if isinstance(view, QHeaderView):
        section = view.logicalIndexAt(event.pos())
        model = view.model()
        tip = (model.headerData(section, view.orientation(), Qt.ItemDataRole.ToolTipRole)
               if section >= 0 and model is not None else None)
        if not isinstance(tip, str) or (new := wrapped(tip)) == tip:
            return False
        QToolTip.showText(event.globalPos(), new, viewport)
        return True
    index = view.indexAt(event.pos())
    tip = index.data(Qt.ItemDataRole.ToolTipRole) if index.isValid() else None
    if not isinstance(tip, str) or (new := wrapped(tip)) == tip:
        return False
    QToolTip.showText(event.globalPos(), new, viewport, view.visualRect(index))
    return True


_filter: _WrapToolTips | None = None


def install(app: QApplication) -> None:
    """Wrap long tooltips application-wide (once per process)."""
    global _filter
    if _filter is None:
        _filter = _WrapToolTips(app)
        app.installEventFilter(_filter)

"""Tooltips are plain text, and long ones wrap instead of running across the screen.

Qt shows a plain-text tooltip on one line however long it is (a settings tooltip of two
sentences was as wide as the window); a rich-text tooltip is word-wrapped. And Qt shows
any tooltip that looks like HTML as rich text, so a file name, a model's name or an error
from a template or a server in a tooltip would draw headings, images and links. The
filter that :func:`install` puts on the application shows every tooltip as escaped text
(:func:`wrapped`: long ones as a wrapping paragraph), so no call site has to remember:
a widget's own tooltip, a menu action's, and an item view's item or header section (a
list, a tree, a combo box's popup), whose tooltip lives in the model. A form's label
without a tooltip of its own shows its field's. Tandem writes no rich-text tooltips; the
tooltips themselves are left as they were set.
"""

from __future__ import annotations

import html

from PySide6.QtCore import QEvent, QObject, QRect
from PySide6.QtGui import QHelpEvent, Qt  # QtGui's Qt namespace has mightBeRichText
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QHeaderView,
    QLabel,
    QMenu,
    QToolTip,
    QWidget,
)

#: plain-text tooltips longer than this many characters are wrapped
WRAP_AFTER = 70


def wrapped(text: str) -> str:
    """``text`` as Qt must be given it to show it as plain text: short text that Qt would
    not take for HTML as it is; other text escaped, as a rich-text paragraph Qt
    word-wraps when longer than :data:`WRAP_AFTER` characters (line breaks kept), or as
    one unwrapped line."""
    if len(text) <= WRAP_AFTER and not Qt.mightBeRichText(text):
        return text
    escaped = html.escape(text).replace("\n", "<br>")
    if len(text) <= WRAP_AFTER:
        return "<p style='white-space:pre'>" + escaped + "</p>"
    return "<p>" + escaped + "</p>"


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
            tip = action.toolTip() if action is not None else ""
            if action is None or tip == action.text().replace("&", ""):
                return False  # Qt's own rule: an action's tooltip that is its text is not shown
            return _show(event, wrapped(tip), tip, watched)  # type: ignore[arg-type]
        tip = watched.toolTip()
        if not tip and isinstance(watched, QLabel) and (buddy := watched.buddy()) is not None \
                and buddy.toolTip():
            # a form's label ("Temperature") explains what its field's tooltip does
            tip = buddy.toolTip()
            QToolTip.showText(event.globalPos(), wrapped(tip), watched,  # type: ignore[attr-defined]
                              QRect(), watched.toolTipDuration())
            return True
        return _show(event, wrapped(tip), tip, watched)  # type: ignore[arg-type]


def _show(event: QHelpEvent, new: str, tip: str, widget: QWidget) -> bool:
    """Show ``new`` in place of the tooltip ``tip`` (True: shown here), or leave an
    unchanged tooltip to Qt (False)."""
    if not tip or new == tip:
        return False
    QToolTip.showText(event.globalPos(), new, widget, QRect(), widget.toolTipDuration())
    return True


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

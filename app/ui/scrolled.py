"""Pages that scroll instead of setting the window's minimum size: the side panel's tabs
(Speculation, Sampling, API) and the welcome page. A QTabWidget or QStackedWidget is as
tall as its tallest page, and the Sampling tab is taller than a 768 px screen leaves
room for."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QFrame,
    QScrollArea,
    QTabWidget,
    QWidget,
)


class _WheelScrollsPage(QObject):
    """A wheel over an input that does not have the focus scrolls the page instead of
    changing the value (the pointer passes over spin boxes while the page scrolls)."""

    def __init__(self, area: QScrollArea) -> None:
        super().__init__(area)
        self._area = area

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if (event.type() == QEvent.Type.Wheel and isinstance(watched, QWidget)
                and not watched.hasFocus()):
            QApplication.sendEvent(self._area.verticalScrollBar(), event)
            return True
        return False


def scrolled(page: QWidget, *, keep_width: bool = False) -> QScrollArea:
    """``page`` in a frameless scroll area that resizes it to the area; the wheel over one
    of its spin or combo boxes scrolls unless that box has the focus. ``keep_width``:
    never scroll sideways; the area is as wide as the page needs (with room for the
    vertical scroll bar), so only its height gives."""
    area = QScrollArea()
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setWidgetResizable(True)
    area.setWidget(page)
    guard = _WheelScrollsPage(area)
    for field in page.findChildren(QAbstractSpinBox) + page.findChildren(QComboBox):
        field.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # a click or Tab, not the wheel
        field.installEventFilter(guard)
    if keep_width:
        area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        bar = area.verticalScrollBar().sizeHint().width()
        area.setMinimumWidth(page.minimumSizeHint().width() + bar)
    return area


class ScrolledTabWidget(QTabWidget):
    """Tabs whose pages scroll vertically (:func:`scrolled` with ``keep_width``).
    :meth:`setCurrentWidget` and :meth:`indexOf` take the page itself as well as its
    scroll area; ``currentWidget()`` and ``widget(i)`` stay Qt's and return the scroll
    area (whose ``widget()`` is the page)."""

    def add_page(self, page: QWidget, title: str) -> int:
        return self.addTab(scrolled(page, keep_width=True), title)

    def indexOf(self, widget: QWidget) -> int:  # noqa: N802 (Qt's name)
        for i in range(self.count()):
            area = self.widget(i)
            if area is widget or (isinstance(area, QScrollArea) and area.widget() is widget):
                return i
        return -1

    def setCurrentWidget(self, widget: QWidget) -> None:  # noqa: N802 (Qt's name)
        index = self.indexOf(widget)
        if index >= 0:
            self.setCurrentIndex(index)

"""Pages that scroll instead of setting the window's minimum size: the side panel's tabs
(Speculation, Sampling, API) and the welcome page. A QTabWidget or QStackedWidget is as
tall as its tallest page; the Sampling tab alone made the window at least 817 px tall,
more than a 768 px screen shows."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QScrollArea, QTabWidget, QWidget


def scrolled(page: QWidget, *, keep_width: bool = False) -> QScrollArea:
    """``page`` in a frameless scroll area that resizes it to the area. ``keep_width``:
    never scroll sideways; the area is as wide as the page needs (with room for the
    vertical scroll bar), so only its height gives."""
    area = QScrollArea()
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setWidgetResizable(True)
    area.setWidget(page)
    if keep_width:
        area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        bar = area.verticalScrollBar().sizeHint().width()
        area.setMinimumWidth(page.minimumSizeHint().width() + bar)
    return area


class ScrolledTabs(QTabWidget):
    """Tabs whose pages scroll vertically (:func:`scrolled` with ``keep_width``).
    :meth:`setCurrentWidget` and :meth:`indexOf` take the page itself as well as its
    scroll area."""

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

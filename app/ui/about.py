"""Help → About: Tandem's and its libraries' versions, the backend, Tandem's folders, and
buttons to open the log folder and copy everything for a bug report.

The facts come from :func:`app.diagnostics.about_info` (Qt-free); this dialog adds the
running Qt's version and lays them out.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QUrl, qVersion
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.diagnostics import AboutInfo, about_info
from app.ui.labels import Label


class AboutDialog(QDialog):
    """The About window. ``info`` defaults to :func:`app.diagnostics.about_info`."""

    def __init__(self, info: AboutInfo | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("About Tandem")
        self.info = info if info is not None else about_info()
        versions = tuple((label, f"{value} (Qt {qVersion()})" if label == "PySide6" else value)
                         for label, value in self.info.versions)
        self.info = AboutInfo(versions, self.info.backend, self.info.paths, self.info.log_dir)
        col = QVBoxLayout(self)
        title = Label("Tandem")
        title.setObjectName("welcomeTitle")
        col.addWidget(title)
        blurb = Label("Local GGUF chat with speculative decoding you can see.")
        blurb.setWordWrap(True)
        col.addWidget(blurb)
        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        #: label → the value's QLabel, in the order shown (tests read them)
        self.values: dict[str, QLabel] = {}
        for label, value in (*self.info.versions, ("Backend", self.info.backend),
                             *self.info.paths):
            shown = Label(value)
            shown.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            shown.setWordWrap(True)
            form.addRow(f"{label}:", shown)
            self.values[label] = shown
        col.addLayout(form)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.open_logs_button = QPushButton("Open log folder")
        self.open_logs_button.setEnabled(self.info.log_dir is not None)
        self.open_logs_button.clicked.connect(self.open_log_folder)
        buttons.addButton(self.open_logs_button, QDialogButtonBox.ButtonRole.ActionRole)
        self.copy_button = QPushButton("Copy details")
        self.copy_button.setToolTip("Copy these lines, for a bug report")
        self.copy_button.clicked.connect(self.copy_details)
        buttons.addButton(self.copy_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        col.addWidget(buttons)
        self.setMinimumWidth(640)

    def open_log_folder(self) -> bool:
        """Show the log folder in the desktop's file manager; False when it could not."""
        if self.info.log_dir is None:
            return False
        return QDesktopServices.openUrl(QUrl.fromLocalFile(str(self.info.log_dir)))

    def copy_details(self) -> None:
        """Put every row on the clipboard as ``label: value`` lines."""
        QGuiApplication.clipboard().setText(self.info.as_text())

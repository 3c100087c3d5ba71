"""The chat window's other windows: the model picker (one instance, raised again) and the
race window (one at a time, on the loaded target and the open conversation).

:class:`SideWindows` opens and closes them for :class:`app.ui.main_window.MainWindow` and
passes what they report to its :class:`~app.chat.conversation.ChatController`: the models
chosen in the picker, the draft length applied from a race's k sweep, and whether a race
is running (the window does not send while it is).
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Slot
from PySide6.QtWidgets import QWidget

from app.chat.conversation import ChatController
from app.chat.events import ModelInfo, UserError
from app.store.settings import Settings
from app.ui.picker import DownloadQueue, ModelPickerWindow, ModelsChosen
from app.ui.race import RaceWindow, conversations_from_history
from app.ui.service_bridge import ServiceBridge


class SideWindows(QObject):
    """Owns the picker and race windows of one chat window.

    Args:
        parent: the chat window (their Qt parent).
        controller: the chat window's controller.
        bridge: the chat window's service bridge (the race runs on its service).
        settings: the chat window's settings.
        downloads: the download queue the picker shows and adds to.
    """

    def __init__(self, parent: QWidget, controller: ChatController, bridge: ServiceBridge,
                 settings: Settings, downloads: DownloadQueue) -> None:
        super().__init__(parent)
        self._window = parent
        self.controller = controller
        self.bridge = bridge
        self.settings = settings
        self.downloads = downloads
        self.picker: ModelPickerWindow | None = None
        self.race: RaceWindow | None = None
        self._reopen_race = False  # the race asked for a reload (exact verification)

    @Slot()
    def open_model_picker(self) -> None:
        """Show the model library / catalog / downloads window (one instance)."""
        if self.picker is None:
            self.picker = ModelPickerWindow(settings=self.settings, downloads=self.downloads,
                                            parent=self._window)
            self.picker.models_chosen.connect(self._on_picker_models_chosen)
        self.picker.show()
        self.picker.raise_()
        self.picker.activateWindow()

    @Slot(object)
    def _on_picker_models_chosen(self, chosen: ModelsChosen) -> None:
        self.controller.use_models(chosen.target_path, chosen.draft_path, chosen.speculation_mode)

    @Slot()
    def open_race(self) -> None:
        """Open the race window on the loaded target with this conversation's prompt
        (nothing happens while a model loads or a reply runs)."""
        c = self.controller
        if not c.can_race() or c.model_info is None:
            return
        self.close_race()
        self.race = RaceWindow(
            self.bridge, c.model_info, sampling=self.settings.sampling,
            speculation=self.settings.speculation, messages=c.prompt_messages(),
            conversations=conversations_from_history(c.store), parent=self._window)
        self.race.draft_length_applied.connect(c.set_draft_length)
        self.race.busy_changed.connect(self._on_race_busy_changed)
        self.race.exact_verification_requested.connect(self._on_race_exact_verification_requested)
        self.race.show()

    @Slot(bool)
    def _on_race_exact_verification_requested(self, on: bool) -> None:
        self._reopen_race = True
        self.controller.set_exact_verification(on)  # reloads: the race window closes

    def model_loaded(self, info: ModelInfo | None) -> None:
        """A target finished loading (None: unloaded): reopen the race the user was in
        when its exact-verification option reloaded the model."""
        if info is not None and self._reopen_race:
            self._reopen_race = False
            self.open_race()
            if self.race is not None and self.settings.model.exact_verification \
                    and not info.exact_verification:
                why = " ".join(n for n in info.notes if "xact verification" in n)
                self.race.show_error(UserError(
                    "Exact verification is not possible with this model",
                    why or "The model was loaded with llama.cpp's defaults.", level="warning",
                    origin="load"))

    @Slot(bool)
    def _on_race_busy_changed(self, busy: bool) -> None:
        self.controller.race_busy = busy

    def close_race(self) -> None:
        """Stop and close the race window, if one is open."""
        if self.race is not None:
            self.race.shutdown()
            self.race.close()
            self.race.deleteLater()
            self.race = None
            self.controller.race_busy = False

    def shutdown(self) -> None:
        """Close the race window and stop the picker's work (the window is closing)."""
        self.close_race()
        if self.picker is not None:
            self.picker.shutdown()

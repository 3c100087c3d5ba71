"""The chat window's other windows: the model picker (one instance, raised again) and the
race window (one at a time, on the loaded target and the open conversation).

:class:`SideWindows` opens and closes them for :class:`app.ui.main_window.MainWindow` and
passes what they report to its :class:`~app.chat.conversation.ChatController`: the models
chosen in the picker, the draft length applied from a race's k sweep, and whether a race
is running (the window does not send while it is).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Slot
from PySide6.QtWidgets import QWidget

from app.chat.conversation import ChatController
from app.chat.events import UserError
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
        self._race_controls: dict[str, object] = {}

    @Slot()
    def open_model_picker(self) -> None:
        """Show the model library / catalog / downloads window (one instance), with the
        target and drafter the chat window uses now selected (each time: a choice made
        there and not applied is not kept)."""
        if self.picker is None:
            self.picker = ModelPickerWindow(settings=self.settings, downloads=self.downloads,
                                            parent=self._window)
            self.picker.models_chosen.connect(self._on_picker_models_chosen)
        self.picker.show()
        s = self.settings
        self.picker.library_tab.show_in_use(s.model.target_path, s.speculation.mode,
                                            s.model.draft_path)
        self.picker.raise_()
        self.picker.activateWindow()

    def open_drafts_for(self, target: Path | None) -> None:
        """Open the Models window's library with ``target`` selected, so that its drafts
        list ranks the library's models as drafts for it (None: as the window was)."""
        self.open_model_picker()
        assert self.picker is not None
        self.picker.open_tab("Library")
        if target is not None:
            self.picker.library_tab.choose_target(target)

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
        # the box shows the setting (what is asked for); whether the loaded model honours
        # it is on the race's settings line, and said when it does not
        self.race.show_exact_requested(self.settings.model.exact_verification)
        self.race.show()

    @Slot(bool)
    def _on_race_exact_verification_requested(self, on: bool) -> None:
        race, c = self.race, self.controller
        if race is None:
            return
        if c.loading or c.reply is not None:
            race.show_exact_requested(not on)
            race.show_error(UserError(
                "Busy", "Exact verification reloads the model: wait for the load, or stop "
                "the reply in the chat window, then try again.", level="warning",
                origin="load"))
            return
        self._race_controls = race.controls_state()
        c.set_exact_verification(on)  # reloads: model_will_change closes this race window
        self._reopen_race = c.loading

    def load_ended(self) -> None:
        """A model job ended (loaded, failed or cancelled): reopen the race the user was in
        when its exact-verification box reloaded the model, once no job follows (a draft
        model loads after its target)."""
        if self._reopen_race:
            QTimer.singleShot(0, self._reopen_after_load)

    def _reopen_after_load(self) -> None:
        c = self.controller
        if not self._reopen_race or c.loading:
            return  # another job (the draft) runs: its end calls load_ended again
        self._reopen_race = False
        info = c.model_info
        if info is None:
            return  # the load failed or was cancelled: the chat window says why
        self.open_race()
        if self.race is None:
            return
        self.race.restore_controls(self._race_controls)
        if self.settings.model.exact_verification and not info.exact_verification:
            why = " ".join(info.exact_notes)
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

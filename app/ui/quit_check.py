"""Asking before a quit that would stop work in progress.

A quit the user asks for (the title bar's close button, File → Quit, the platform's Quit
keys) while a reply is written, the local API answers, a race or k sweep runs or a
download is under way asks first, naming what would stop and what becomes of it; a
window closed by the program (Ctrl-C or SIGTERM in the terminal, tests) does not, nor,
for now, a quit the platform sends the application rather than the window (macOS's Dock
menu, logging out). "Don't ask again" turns it off (``ui.confirm_quit``). Unsent text
too long to keep for the next start is named too. The same question, its list kept
true while it is open (:func:`ask_to_stop`), asks before "Serve API" is turned off
while API requests run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QCheckBox, QMessageBox, QWidget

from app.chat.events import JobKind
from app.store.settings import UiSettings
from app.ui.chat.input_box import UNSENT_KEPT_CHARS


def work_in_progress(jobs: Sequence[tuple[JobKind, str]], downloads: int, *,
                     reply_text: bool = True, unkept: int = 0) -> list[str]:
    """What quitting now would stop, one line each, in the order a user weighs them.

    Args:
        jobs: the chat service's running and waiting jobs as (kind, origin)
            (:meth:`app.chat.service.ChatService.jobs`).
        downloads: downloads running or waiting (:meth:`DownloadQueue.active_count`).
        reply_text: the window's reply has text already (False: it waits in the queue
            or reads its prompt, and stopping it keeps nothing of it).
        unkept: characters of unsent text too long to keep for the next start
            (:attr:`app.ui.chat.input_box.ComposerWidget.unkept`).
    """
    stops: list[str] = []
    if any(kind == "reply" and origin == "window" for kind, origin in jobs):
        stops.append("the reply being written (kept as far as it got, marked "
                     "interrupted; Continue goes on from it)" if reply_text else
                     "the reply asked for, not begun (your message stays; Regenerate "
                     "asks again)")
    api = sum(1 for kind, origin in jobs if origin == "api" and kind in ("reply", "completion"))
    if api:
        stops.append(f"{api} request{'s' if api != 1 else ''} to the local API (the "
                     "client gets an error saying the server is shutting down)")
    if any(kind in ("race", "sweep") for kind, _origin in jobs):
        stops.append("the race or k sweep running (its figures so far are not kept)")
    if any(kind == "lookup" for kind, _origin in jobs):
        stops.append("the prompt-lookup estimate over past conversations")
    if downloads:
        stops.append(f"{downloads} download{'s' if downloads != 1 else ''} (paused; "
                     "Tandem offers to resume at the next start)")
    if unkept:
        stops.append(f"{unkept:,} characters of unsent text (in this or another "
                     f"conversation's box): over the {UNSENT_KEPT_CHARS:,} kept for the next "
                     "start, so lost; copy it elsewhere first")
    return stops


def ask_to_quit(window: QWidget, ui: UiSettings, stops: Callable[[], Sequence[str]]) -> bool:
    """Whether to quit: True at once when ``stops()`` (what would stop now, as
    :func:`work_in_progress` words it) is empty or the user turned the question off; else
    the user's answer (Enter and Esc keep Tandem open; :func:`ask_to_stop`). "Don't ask
    again" with Quit sets ``ui.confirm_quit`` to False."""
    if not ui.confirm_quit or not stops():
        return True
    never = QCheckBox("Don't ask again")
    if not ask_to_stop(window, ("Quit Tandem?", "Quitting", "Quit"), stops, never):
        return False
    if never.isChecked():
        ui.confirm_quit = False
    return True


def ask_to_stop(parent: QWidget, words: tuple[str, str, str],
                stops: Callable[[], Sequence[str]], check: QCheckBox | None = None) -> bool:
    """Ask whether to go on though ``stops()`` would stop (``words``: the title, the
    doing and the button, as ("Quit Tandem?", "Quitting", "Quit")):
    the list is read again every half second while the question is open, so work that
    ends meanwhile leaves it. Cancel is the default (Enter and Esc answer no); ``check``,
    a check box shown under the question (the caller reads it after).

    Returns:
        True when the user chose the button.
    """
    title, doing, verb = words
    box = QMessageBox(QMessageBox.Icon.Question, title, "",
                      QMessageBox.StandardButton.Cancel, parent)

    def show_now() -> None:
        now = stops()
        text = (f"{doing} now stops:\n" + "\n".join(f"\u2022  {s}" for s in now) if now
                else f"The work that was running has ended: {doing[:1].lower()}{doing[1:]} "
                "now stops nothing.")
        if text != box.text():  # unchanged: no relayout, no re-announcement
            box.setText(text)

    show_now()
    again = QTimer(box)
    again.timeout.connect(show_now)
    again.start(500)
    button = box.addButton(verb, QMessageBox.ButtonRole.AcceptRole)
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)
    if check is not None:
        box.setCheckBox(check)
    box.exec()
    again.stop()
    chosen = box.clickedButton() is button
    box.deleteLater()  # later: the caller reads ``check`` first
    return chosen

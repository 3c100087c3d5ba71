"""The model picker: Library (models on disk and the drafts that fit a target), Catalog
(curated pairs, checked on the hub before download) and Downloads.

Open it with :class:`ModelPickerWindow`; it emits ``models_chosen`` with a
:class:`ModelsChosen` (opened on its own, after saving the choice in the settings). Downloads run in a
:class:`DownloadQueue` that the chat window keeps for the whole session.
"""

from app.ui.picker.downloads import DownloadQueue
from app.ui.picker.payloads import ModelsChosen
from app.ui.picker.picker_window import ModelPickerWindow

__all__ = ["DownloadQueue", "ModelPickerWindow", "ModelsChosen"]

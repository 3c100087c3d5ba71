"""Frozen payloads of the model picker's signals.

Whatever a picker worker sends to the GUI thread is one of these (or a frozen value from
:mod:`app.catalog`: :class:`~app.catalog.library.LibraryEntry`,
:class:`~app.catalog.hub.DownloadProgress`, …), so neither thread can change what the
other holds. :class:`ModelsChosen` is what the picker hands the chat window.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from app.catalog.hub import DownloadProgress, RemoteFile, RemoteGGUF, RemotePairCheck
from app.catalog.library import LibraryEntry
from app.catalog.pairing import DraftCandidate
from app.chat.events import UserError
from app.engine.drafter_kinds import DrafterPrediction
from app.options import SpecMode


@dataclass(frozen=True, slots=True)
class ModelsChosen:
    """The user's choice in the picker (saved in the settings only by a picker opened on
    its own; in the app the chat window applies and saves it).

    Attributes:
        target_path: the target model (part 1 of a split model).
        draft_path: the draft model, or None when the drafter is prompt lookup or off.
        speculation_mode: ``draft-model``, ``prompt-lookup`` or ``off``
            (:class:`app.options.SpecMode`).
    """

    target_path: Path
    draft_path: Path | None
    speculation_mode: SpecMode


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """How a background task ended: its value, or the error to show (never raised
    across threads). ``generation`` tells the receiver whether it still wants it."""

    generation: int
    value: object | None
    error: UserError | None = None


@dataclass(frozen=True, slots=True)
class ScanProgressed:
    """The library scan is about to read file ``done + 1`` of ``total``."""

    done: int
    total: int
    path: Path


@dataclass(frozen=True, slots=True)
class LibraryScanned:
    """The library scan's result. ``cancelled``: stopped early (entries are partial)."""

    entries: tuple[LibraryEntry, ...]
    cancelled: bool
    seconds: float


@dataclass(frozen=True, slots=True)
class DraftsRanked:
    """Every other library model checked as a draft for ``target``, in picker order
    (:func:`app.catalog.library.drafts_for`)."""

    target: LibraryEntry
    candidates: tuple[DraftCandidate[LibraryEntry], ...]
    #: what registered drafters predict for the target before it loads (an MTP head
    #: with the cost the load check measured)
    predictions: tuple[tuple[SpecMode, DrafterPrediction], ...] = ()


@dataclass(frozen=True, slots=True)
class PairChecked:
    """The remote check of a curated entry at the chosen quantizations: the pairing
    check of target and draft (``check``), or for an entry without a draft its target's
    header (``header``; ``draft_quant`` is then empty)."""

    pair_id: str
    target_quant: str
    draft_quant: str
    check: RemotePairCheck | None = None
    header: RemoteGGUF | None = None

    @property
    def ok(self) -> bool:
        """The pair is compatible, or the lone target is a readable GGUF."""
        if self.check is not None:
            return self.check.result.compatible
        return self.header is not None


@dataclass(frozen=True, slots=True)
class HubFilesChecked:
    """The check of files pasted in the Catalog tab's "From Hugging Face" field: the
    target's header alone (``header``, no draft given) or the pairing check of target
    and draft (``check``)."""

    target: RemoteFile
    draft: RemoteFile | None
    header: RemoteGGUF | None = None
    check: RemotePairCheck | None = None

    @property
    def ok(self) -> bool:
        """The target is a readable GGUF and, with a draft, the draft fits it."""
        if self.check is not None:
            return self.check.result.compatible
        return self.header is not None


@dataclass(frozen=True, slots=True)
class DownloadProgressed:
    """Progress of one download job (at most every 0.1 s, throttled by the catalog)."""

    job_id: int
    progress: DownloadProgress


StopKind = Literal["paused", "cancelled"]


@dataclass(frozen=True, slots=True)
class DownloadEnded:
    """A download worker returned: done (``path`` set), stopped by the user
    (``stopped``), or failed (``error``)."""

    job_id: int
    path: Path | None
    stopped: StopKind | None = None
    error: UserError | None = None

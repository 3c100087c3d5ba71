"""The token count under the input box: what the message would take before it is sent.

:class:`TokenPreview` measures the text a moment after typing stops (and again when the
conversation, the model or the sampling settings change), off the window's thread: the
count waits for the model between decoding rounds, and through a long prompt's prefill,
which must not freeze the window (:meth:`app.chat.service.ChatService.preview`); while
the model is in use the line says it waits. Only the latest measurement is shown. With
no local model (none, or a remote server's) the line is empty: nothing is measured, so
nothing is claimed.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable, Sequence

from PySide6.QtCore import QObject, QTimer, Signal

from app.chat.preview import DROP_SETTING, PromptPreview
from app.engine.chat import ChatMessage
from app.options import SamplingParams
from app.ui.explain import context_fit_words
from app.ui.labels import Label

log = logging.getLogger(__name__)

#: milliseconds after the last change before the text is measured
SETTLE_MS = 350
#: the line while the model is in use
WAITING = "Tokens are counted when the model is free."


def preview_words(p: PromptPreview) -> tuple[str, str]:
    """The line and its level ("" / "warning" / "error") for a measurement.

    Examples: ``312 tokens · 2,340 of the 4,096-token context with the conversation``;
    ``Too long to send: The last message alone is 5,214 tokens; …``."""
    own = f"{p.message_tokens:,} token{'s' if p.message_tokens != 1 else ''}"
    if p.refusal is not None:
        how = f" {DROP_SETTING}" if p.by_dropping else ""
        return f"Too long to send: {p.refusal}{how}", "error"
    if p.failure is not None:
        return f"The reply would fail: {p.failure}", "error"
    if p.fit is not None:
        return f"{own} · {context_fit_words(p.fit, ahead=True)}", "warning"
    left = p.n_ctx - p.prompt_tokens + 1  # the last token written is never read back
    if left <= p.room:
        return (f"{own} · {p.prompt_tokens:,} of the {p.n_ctx:,}-token context with the "
                f"conversation: the reply has room for {max(0, left):,} tokens"), "warning"
    return (f"{own} · {p.prompt_tokens:,} of the {p.n_ctx:,}-token context with the "
            "conversation"), ""


class TokenPreview(QObject):
    """Measures the input box's text and shows it in ``label``.

    Args:
        label: where the line goes (its ``level`` property is set for the style sheet).
        measure: the service's :meth:`~app.chat.service.ChatService.preview`; called on
            a worker thread.
        messages: what would be sent with a text
            (:meth:`~app.chat.conversation.ChatController.messages_with`); called here.
        sampling: the sampling settings a reply would use now.
        text: the input box's text.
        busy: the model is in use (a reply, a race, an API request, a load): the line
            says it waits, and looks again every :data:`SETTLE_MS`, rather than take the
            model between its decoding rounds, which would slow what runs and what the
            gauge measures of it.
        local: a model is loaded here (not a remote server's, whose tokenizer is not
            here): without one the line stays empty.
    """

    _measured = Signal(int, object)

    def __init__(self, label: Label,
                 measure: Callable[[Sequence[ChatMessage], SamplingParams], PromptPreview | None],
                 messages: Callable[[str], list[ChatMessage]],
                 sampling: Callable[[], SamplingParams], text: Callable[[], str],
                 busy: Callable[[], bool], local: Callable[[], bool] = lambda: True) -> None:
        super().__init__(label)
        self.label = label
        self._measure, self._messages, self._sampling, self._text, self._busy = (
            measure, messages, sampling, text, busy)
        self._local = local
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(SETTLE_MS)
        self._timer.timeout.connect(self._start)
        self._pool = concurrent.futures.ThreadPoolExecutor(1, "tandem-token-count")
        self._future: concurrent.futures.Future[PromptPreview | None] | None = None
        self._latest = 0
        self._closed = False
        self._measured.connect(self._show)
        #: the last measurement shown (None: none)
        self.shown: PromptPreview | None = None

    def refresh(self) -> None:
        """The text, conversation, model or settings changed: measure again soon (a
        measurement under way is for what was there before, and is not shown)."""
        self._latest += 1
        if self._closed:
            return
        if not self._text().strip():
            self._set("", "", None)
            return
        self._timer.start()

    def shutdown(self) -> None:
        """Stop measuring (the window closes). Call it once the session is closed: a
        measurement under way then ends at once; this does not wait for it."""
        self._closed = True
        self._timer.stop()
        self._latest += 1
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _start(self) -> None:
        if self._closed:
            return
        if not self._local():
            self._set("", "", None)
            return
        if self._busy():  # looked at again soon: measured once the model is free
            self._set(WAITING, "", None)
            self._timer.start()
            return
        messages = self._messages(self._text())
        if not messages:
            self._set("", "", None)
            return
        if self._future is not None:
            self._future.cancel()  # not begun yet: never runs
        n, sampling = self._latest, self._sampling()

        def work() -> PromptPreview | None:
            return self._measure(messages, sampling) if n == self._latest else None

        self._future = future = self._pool.submit(work)
        future.add_done_callback(lambda f: self._done(n, f))

    def _done(self, n: int, future: concurrent.futures.Future[PromptPreview | None]) -> None:
        """On the worker thread: hand the result to the window's thread."""
        if future.cancelled() or self._closed:
            return
        if (error := future.exception()) is not None:
            log.error("the token count failed", exc_info=error)
            return
        self._measured.emit(n, future.result())

    def _show(self, n: int, preview: PromptPreview | None) -> None:
        if n != self._latest or self._closed:
            return
        if preview is None:
            self._set("", "", None)
            return
        self._set(*preview_words(preview), preview)

    def _set(self, text: str, level: str, preview: PromptPreview | None) -> None:
        self.shown = preview
        self.label.setText(text)
        self.label.setToolTip(text)
        if self.label.property("level") != level:
            self.label.setProperty("level", level)
            self.label.style().unpolish(self.label)
            self.label.style().polish(self.label)

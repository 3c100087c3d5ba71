"""The one path by which a failure becomes something to show: :func:`user_error`.

Every job of the service, every background task of the window and the picker's workers
turn what they caught into a :class:`~app.chat.events.UserError` here, so the rule is
the same everywhere: a :class:`~app.errors.TandemError` is written for the user and is
shown as it is; anything else is a bug, shown as one short sentence while its traceback
goes to the log (Anki's habit: the failure path always ends in one function).
"""

from __future__ import annotations

import logging
import traceback

from app.chat.events import UserError
from app.errors import LoadCancelledError, TandemError

log = logging.getLogger(__name__)


def user_error(exc: BaseException, title: str, origin: str = "") -> UserError:
    """A :class:`UserError` for ``exc`` under ``title``.

    TandemError messages are kept as they are (a leading repetition of ``title``, as in
    "Could not load x.gguf: …" under that same title, is dropped); a cancelled load is a
    warning; any other exception is reported as unexpected, with its traceback in
    ``detail`` and in the log.
    """
    if isinstance(exc, LoadCancelledError):
        return UserError("Loading cancelled", str(exc), level="warning", origin=origin,
                         cause=type(exc))
    if isinstance(exc, TandemError):
        msg = str(exc)
        if msg.startswith(title):
            msg = msg[len(title):].lstrip(": ")
            msg = msg[:1].upper() + msg[1:]
        return UserError(title, msg, origin=origin, cause=type(exc))
    detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    log.error("%s\n%s", title, detail)
    return UserError(
        title,
        f"Unexpected error: {type(exc).__name__}: {exc}. The details are in the log file.",
        detail=detail,
        origin=origin,
        cause=type(exc),
    )

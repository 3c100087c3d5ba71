"""What sending a message would do to the context window, before it is sent.

:func:`preview_prompt` measures it with the loaded target's own tokenizer and chat
template, by the rule a reply uses (:func:`~app.engine.context_fit.fit_conversation`):
the message's own tokens, the prompt it would be sent in, and whether earlier messages
would be dropped or the message refused. It runs on the caller's thread and waits for the
session between two decoding rounds (the session's lock), so a window calls it off its
own thread (:class:`app.ui.chat.token_preview.TokenPreview`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.engine.chat import ChatMessage
from app.engine.context_fit import ContextFit, fit_conversation, reply_room
from app.engine.session import Session
from app.errors import ChatTemplateError, ContextOverflowError, WouldFitByDroppingError
from app.options import SamplingParams


#: the window's way to let Tandem drop earlier messages, said after a refusal that
#: dropping would have avoided (:class:`~app.errors.WouldFitByDroppingError`)
DROP_SETTING = "Sampling → Too long for the context chooses how."


@dataclass(frozen=True, slots=True)
class PromptPreview:
    """The measured outcome of sending a message (all counts in tokens).

    ``message_tokens``: the message's text alone; ``prompt_tokens``: the prompt the reply
    would start from (after any drop; 0 when refused); ``n_ctx``: the context window;
    ``room``: what a reply is given when messages must be dropped
    (:func:`~app.engine.context_fit.reply_room`); ``fit``: the earlier messages that would
    be dropped (None: none); ``refusal``: why the message would not be sent (the
    :class:`~app.errors.ContextOverflowError`'s words; None: it would be);
    ``failure``: the chat template failed on the conversation (its words), as the reply
    would; ``by_dropping``: it would fit with earlier messages dropped (the policy is
    ``stop``)."""

    message_tokens: int
    prompt_tokens: int
    n_ctx: int
    room: int
    fit: ContextFit | None = None
    refusal: str | None = None
    failure: str | None = None
    by_dropping: bool = False


def preview_prompt(session: Session, messages: Sequence[ChatMessage],
                   sampling: SamplingParams) -> PromptPreview:
    """Measure ``messages`` (the conversation as the model sees it, ending with the
    message to send) as a reply with ``sampling`` would take them.

    Raises:
        TandemError: the session was closed meanwhile.
    """
    text = messages[-1].content if messages else ""
    own = session.count_tokens(text)
    n_ctx, room = session.n_ctx, reply_room(session.n_ctx, sampling.max_tokens)
    try:
        tokens, fit = fit_conversation(messages, session.chat_prompt, n_ctx,
                                       sampling.max_tokens, sampling.context_overflow)
    except ContextOverflowError as exc:
        return PromptPreview(own, 0, n_ctx, room, refusal=str(exc),
                             by_dropping=isinstance(exc, WouldFitByDroppingError))
    except ChatTemplateError as exc:
        return PromptPreview(own, 0, n_ctx, room, failure=str(exc))
    return PromptPreview(own, len(tokens), n_ctx, room, fit)

"""The context overflow policies (app/engine/context_fit.py): what each drops, that the
system prompt and the message being answered are always kept, that roles still alternate,
and the errors when nothing can make the conversation fit; then the real engine on the
tiny synthetic model, whose chat yields what was dropped before the reply."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from app.engine.chat import ChatMessage
from app.engine.context_fit import (
    ContextFit,
    drop_order,
    dropped_indices,
    fit_conversation,
    reply_room,
)
from app.engine.events import ContextTrimmed
from app.engine.reply import ReplyRecord
from app.engine.session import Session, SessionConfig
from app.errors import ContextOverflowError
from app.options import ContextOverflow, SamplingParams

TRUNCATE, ROLLING, STOP = (ContextOverflow.TRUNCATE_MIDDLE, ContextOverflow.ROLLING_WINDOW,
                           ContextOverflow.STOP)


def _tokens(messages: Sequence[ChatMessage]) -> list[int]:
    """A template stand-in: two tokens of header per message, one per word."""
    out: list[int] = []
    for i, m in enumerate(messages):
        out += [i, i] + [len(w) for w in m.content.split()]
    return out


def _conversation(turns: int, words: int = 10) -> list[ChatMessage]:
    msgs = [ChatMessage("system", "be brief")]
    for t in range(turns):
        msgs.append(ChatMessage("user", f"question{t} " + "w " * (words - 1)))
        msgs.append(ChatMessage("assistant", f"answer{t} " + "w " * (words - 1)))
    msgs.append(ChatMessage("user", "last question"))
    return msgs


def _fit(messages: list[ChatMessage], n_ctx: int, policy: ContextOverflow,
         max_tokens: int = 16) -> tuple[list[ChatMessage], ContextFit | None]:
    seen: list[list[ChatMessage]] = []

    def tokenize(ms: Sequence[ChatMessage]) -> list[int]:
        seen.append(list(ms))
        return _tokens(ms)

    prompt, fit = fit_conversation(messages, tokenize, n_ctx, max_tokens, policy)
    chosen = next(ms for ms in reversed(seen) if _tokens(ms) == prompt)
    return chosen, fit


def test_a_conversation_that_fits_is_left_whole_under_every_policy() -> None:
    msgs = _conversation(2)
    for policy in ContextOverflow:
        prompt, fit = fit_conversation(msgs, _tokens, 4096, 512, policy)
        assert prompt == _tokens(msgs) and fit is None


def test_rolling_window_drops_the_oldest_exchanges_and_keeps_the_system_prompt() -> None:
    msgs = _conversation(6)  # system 4, 12 per message, the last 4: 152 tokens
    kept, fit = _fit(msgs, 100, ROLLING)  # 84 for the prompt: 3 exchanges (72) + 8
    assert fit is not None and fit.policy is ROLLING
    assert kept[0] == msgs[0] and kept[-1] == msgs[-1]
    firsts = [m.content.split()[0] for m in kept[1:-1]]
    assert firsts == ["question3", "answer3", "question4", "answer4", "question5", "answer5"]
    assert [m.role for m in kept[1:]] == ["user", "assistant"] * 3 + ["user"]
    assert fit.dropped_messages == 6 and fit.dropped_tokens == 6 * 12
    assert fit.prompt_tokens == len(_tokens(kept)) == 80
    assert fit.reply_room == reply_room(100, 16) == 16 and not fit.kept_first


def test_truncate_middle_keeps_the_first_exchange_and_the_latest_ones() -> None:
    msgs = _conversation(6)
    kept, fit = _fit(msgs, 100, TRUNCATE)
    assert fit is not None and fit.kept_first
    firsts = [m.content.split()[0] for m in kept[1:-1]]
    assert firsts == ["question0", "answer0", "question4", "answer4", "question5", "answer5"]
    assert kept[0] == msgs[0] and kept[-1] == msgs[-1]
    assert fit.dropped_messages == 6
    assert drop_order(4, TRUNCATE) == [1, 2, 3, 0] and drop_order(4, ROLLING) == [0, 1, 2, 3]


def test_truncate_middle_drops_the_first_exchange_too_when_nothing_else_is_left() -> None:
    msgs = _conversation(2)  # 4 + 2·24 + 4 = 56
    kept, fit = _fit(msgs, 24, TRUNCATE, max_tokens=4)
    assert fit is not None and not fit.kept_first
    assert kept == [msgs[0], msgs[-1]] and fit.dropped_messages == 4


def test_the_dropped_messages_are_found_again_from_the_roles_and_the_fit() -> None:
    """What the chat view marks "not in the model's context": the very messages each
    policy dropped, from the request's roles and the stored fit alone."""
    for turns, n_ctx, policy, max_tokens in ((6, 100, ROLLING, 16), (6, 100, TRUNCATE, 16),
                                             (2, 24, TRUNCATE, 4)):
        msgs = _conversation(turns)
        msgs.insert(3, ChatMessage("assistant", "a second reply to question0"))
        kept, fit = _fit(msgs, n_ctx, policy, max_tokens)
        assert fit is not None
        gone = dropped_indices([m.role for m in msgs], fit)
        assert [msgs[i] for i in range(len(msgs)) if i not in gone] == kept
        assert len(gone) == fit.dropped_messages
        without_system = dropped_indices([m.role for m in msgs[1:]], fit)
        assert without_system == [i - 1 for i in gone]


def test_the_room_for_the_reply_is_given_up_before_the_conversation_is_refused() -> None:
    msgs = _conversation(1)  # system 4, the exchange 24, the last message 4: 32
    kept, fit = _fit(msgs, 12, ROLLING, max_tokens=100)  # room: a quarter of 12
    assert kept == [msgs[0], msgs[-1]] and fit is not None and fit.reply_room == 3
    # system + last = 8 tokens leave 1 of 9, less than the 2 asked: run with what is left
    kept, fit = _fit(msgs, 9, ROLLING, max_tokens=100)
    assert kept == [msgs[0], msgs[-1]] and fit is not None and fit.reply_room == 1


def test_stop_refuses_what_does_not_fit_and_runs_what_fits_without_room() -> None:
    msgs = _conversation(6)
    with pytest.raises(ContextOverflowError, match="152 tokens long but the context window "
                                                   "holds 100.*drop earlier messages"):
        fit_conversation(msgs, _tokens, 100, 16, STOP)
    prompt, fit = fit_conversation(msgs, _tokens, 154, 16, STOP)  # fits, 2 tokens of room
    assert prompt == _tokens(msgs) and fit is None


def test_a_last_message_longer_than_the_window_is_a_clear_error() -> None:
    msgs = [ChatMessage("system", "s"), ChatMessage("user", "a"),
            ChatMessage("assistant", "b"), ChatMessage("user", "x " * 100)]
    for policy in (TRUNCATE, ROLLING, STOP):  # stop: no advice to drop what cannot help
        with pytest.raises(ContextOverflowError, match="system prompt and the last message "
                                                       "alone are 105 tokens"):
            fit_conversation(msgs, _tokens, 64, 16, policy)
    # without a system prompt the error does not name one
    with pytest.raises(ContextOverflowError) as err:
        fit_conversation(msgs[1:], _tokens, 64, 16, TRUNCATE)
    assert str(err.value).startswith("The last message alone is ")
    assert "system" not in str(err.value) and "Shorten it or" in str(err.value)
    single = [ChatMessage("user", "x " * 20)]  # nothing to drop, fits: kept whole
    assert fit_conversation(single, _tokens, 30, 16, TRUNCATE) == (_tokens(single), None)
    for policy in (STOP, TRUNCATE):  # nothing to drop, too long: no advice to drop
        with pytest.raises(ContextOverflowError) as err:
            fit_conversation(single, _tokens, 16, 16, policy)
        assert str(err.value) == ("The prompt is 22 tokens long but the context window "
                                  "holds 16. Shorten it or raise the context length.")


@pytest.mark.parametrize("policy", [TRUNCATE, ROLLING])
def test_the_cut_moves_in_steps_so_the_prompt_start_stays_for_several_turns(
        policy: ContextOverflow) -> None:
    """A conversation growing one exchange (24 tokens) a turn in a 400-token window:
    the cut moves by whole steps (a quarter of the window, 100 tokens: 4 exchanges), so
    between moves each prompt starts with the whole previous one but its last message —
    what the KV cache keeps — instead of every turn cutting one exchange more."""
    cuts, prompts = [], []
    for turns in range(14, 40):
        msgs = _conversation(turns)
        prompt, fit = fit_conversation(msgs, _tokens, 400, 64, policy)
        assert fit is not None and len(prompt) + 64 <= 400
        needed = len(_tokens(msgs)) + 64 - 400
        assert needed <= fit.dropped_tokens < needed + 24 + 100  # < an exchange and a step
        cuts.append(fit.dropped_messages)
        prompts.append(prompt)
    moves = sum(1 for a, b in zip(cuts, cuts[1:]) if a != b)
    assert moves <= len(cuts) // 4 + 1, cuts  # every fourth turn, not every turn
    kept_start = sum(1 for a, b, prev, nxt in zip(cuts, cuts[1:], prompts, prompts[1:])
                     if a == b and nxt[:len(prev) - 4] == prev[:-4])
    assert kept_start == len(cuts) - 1 - moves


def test_the_fit_reads_back_from_its_stored_form() -> None:
    fit = ContextFit(TRUNCATE, 4096, 3, 1240, 3000, 1024, True)
    assert ContextFit.from_dict(fit.to_dict()) == fit
    assert ContextFit.from_dict({"policy": "sideways"}) is None


@pytest.mark.slow
def test_the_engine_drops_messages_before_the_reply_and_says_so(tiny_target: Path) -> None:
    """Session.chat on a real (synthetic) model: a conversation three times the window
    gets a reply, after a ContextTrimmed whose prompt is what the engine decoded."""
    msgs = [ChatMessage("system", "You are terse.")]
    for t in range(12):
        msgs += [ChatMessage("user", f"question {t} " + "lorem ipsum " * 2),
                 ChatMessage("assistant", f"answer {t} " + "sit amet " * 2)]
    msgs.append(ChatMessage("user", "and now?"))
    sampling = SamplingParams(temperature=0.0, max_tokens=8)
    with Session.open(SessionConfig(target_path=tiny_target, n_ctx=256, n_threads=1)) as s:
        whole = len(s.chat_prompt(msgs))
        assert whole > 2 * 256
        events = list(s.chat(msgs, sampling, None))
        trimmed = events[0]
        assert isinstance(trimmed, ContextTrimmed) and isinstance(events[-1], ReplyRecord)
        fit = trimmed.fit
        assert fit.policy is TRUNCATE and fit.kept_first and fit.n_ctx == 256
        assert fit.prompt_tokens + fit.dropped_tokens == whole
        assert fit.prompt_tokens + reply_room(256, 8) <= 256
        assert events[-1].stats.prompt_tokens == fit.prompt_tokens
        assert events[-1].stats.n_ctx == 256  # the gauge's "Context used" of 256
        assert events[-1].reason in ("stop", "length")
        assert events[-1].context == fit and events[-1].request.messages == tuple(msgs)
        with pytest.raises(ContextOverflowError):
            s.chat(msgs, sampling.with_changes(context_overflow=STOP), None)


def test_stop_refuses_before_anything_is_decoded(tiny_target: Path) -> None:
    """Session.chat under ``stop`` with a conversation longer than the window: the
    refusal comes at the call, with no llama_decode and the KV cache as it was (the
    tokens of an earlier reply still cached, not one more)."""
    msgs = [ChatMessage("user", "question " + "lorem ipsum " * 200)]
    sampling = SamplingParams(temperature=0.0, max_tokens=4, context_overflow=STOP)
    with Session.open(SessionConfig(target_path=tiny_target, n_ctx=256, n_threads=1)) as s:
        events = list(s.chat([ChatMessage("user", "hello")], sampling, None))
        assert isinstance(events[-1], ReplyRecord)
        decodes, cached = s.ctx.decode_count, s.cached_tokens
        assert cached > 0 and len(s.chat_prompt(msgs)) > 256
        with pytest.raises(ContextOverflowError, match="context window holds 256"):
            s.chat(msgs, sampling, None)
        assert s.ctx.decode_count == decodes and s.cached_tokens == cached

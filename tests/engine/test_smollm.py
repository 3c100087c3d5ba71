"""SmolLM2-135M-Instruct (BPE, ChatML, BOS = ``<|im_start|>`` with add_bos false): the
prompt keeps its first turn header, a reply cut inside a character shows no U+FFFD, and
a reply cut at its token limit continues as one longer reply would have."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine.chat import ChatMessage, with_single_bos
from app.engine.reply import ReplyRecord
from app.engine.sampling import SamplingParams
from app.engine.session import Session, SessionConfig
from app.options import SpeculationConfig
from tests.engine.util import run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm(smollm_path: Path) -> Iterator[Session]:
    with Session.open(SessionConfig(target_path=smollm_path, n_ctx=512, n_threads=2)) as s:
        yield s


def test_chat_prompt_keeps_the_first_im_start(smollm: Session) -> None:
    """SmolLM2's BOS id is <|im_start|> and its vocabulary does not add BOS: llama.cpp
    strips nothing then, so neither may we."""
    m = smollm.target
    assert not m.add_bos and m.token_text(m.bos) == b"<|im_start|>"
    prompt = smollm.chat_prompt([ChatMessage("system", "Be brief."), ChatMessage("user", "Hi")])
    rendered = smollm.chat_format.render([ChatMessage("system", "Be brief."), ChatMessage("user", "Hi")])
    assert rendered.startswith("<|im_start|>system")
    assert prompt == m.tokenize(rendered, add_special=False, parse_special=True)
    assert prompt[0] == m.bos and prompt.count(m.bos) == 3  # system, user, assistant headers
    assert with_single_bos(m, [m.bos, m.bos, 5]) == [m.bos, m.bos, 5]  # add_bos false: untouched


def test_a_reply_cut_inside_a_character_ends_cleanly(smollm: Session) -> None:
    """max_tokens cuts inside multi-byte characters (byte-level BPE splits CJK and emoji
    across tokens): the cut character is dropped from the stream and the final text,
    never shown as U+FFFD, and every shorter reply is a prefix of the longest."""
    prompt = smollm.chat_prompt([ChatMessage("user", "Write 你好世界 and 😀🎉 five times, nothing else.")])
    longest = run(smollm, prompt, SamplingParams(temperature=0.0, max_tokens=16))
    full = longest.finished.text
    pieces = [smollm.target.token_to_piece(t) for t in longest.ids]

    def splits_a_character(n: int) -> bool:
        try:
            b"".join(pieces[:n]).decode("utf-8")
        except UnicodeDecodeError:
            return True
        return False

    cuts = [n for n in range(1, len(pieces)) if splits_a_character(n)]
    assert len(cuts) >= 2, "the prompt no longer makes replies that split characters"
    assert "\ufffd" not in full and longest.streamed == full
    for n in cuts[:4]:
        r = run(smollm, prompt, SamplingParams(temperature=0.0, max_tokens=n))
        assert "\ufffd" not in r.finished.text and "\ufffd" not in r.streamed, n
        assert r.streamed == r.finished.text and full.startswith(r.finished.text), n
        assert len(r.finished.text.encode()) < len(b"".join(pieces[:n])), n  # the cut bytes dropped


def _chat_run(session: Session, messages: list[ChatMessage], max_tokens: int,
              continuation: str = "", speculation: SpeculationConfig | None = None) -> str:
    records = [ev for ev in session.chat(messages, SamplingParams(temperature=0.0,
                                                                  max_tokens=max_tokens),
                                         speculation or SpeculationConfig(mode="off"),
                                         continuation=continuation)
               if isinstance(ev, ReplyRecord)]
    assert len(records) == 1
    return records[0].text


def test_a_reply_cut_at_its_token_limit_continues_as_if_it_had_not_been_cut(
        smollm: Session) -> None:
    """Continue: the prompt ends with the reply so far after the template's generation
    prompt, so greedy decoding writes what one longer reply would have (the reply's text
    tokenizes back to the tokens it was written as here), with speculation too; a
    control token's spelling in the reply stays text."""
    messages = [ChatMessage("user", "List the planets of the solar system, one per line.")]
    whole = _chat_run(smollm, messages, 48)
    first = _chat_run(smollm, messages, 20)
    assert whole.startswith(first) and len(first) < len(whole)
    prompt = smollm.chat_prompt(messages)
    assert smollm.chat_prompt(messages, first)[:len(prompt)] == prompt
    assert first + _chat_run(smollm, messages, 28, first) == whole
    lookup = SpeculationConfig(mode="prompt-lookup", draft_max=8)
    assert first + _chat_run(smollm, messages, 28, first, lookup) == whole
    spelled = smollm.chat_prompt(messages, "Sure <|im_end|>")
    im_end = smollm.target.tokenize("<|im_end|>", add_special=False, parse_special=True)
    assert len(im_end) == 1 and im_end[0] not in spelled[len(prompt):]

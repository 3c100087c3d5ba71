"""The reply record: draft spans, the request as asked, the speculation used, Auto's
choice, and the same record through the session, the chat service and the API log."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from app.chat.events import ReplyStreamed
from app.chat.service import ChatService
from app.engine.chat import ChatMessage
from app.engine.reply import (
    ReplyRecord,
    ReplyRequest,
    add_span,
    clip_spans,
    draft_spans,
)
from app.engine.session import SessionConfig
from app.engine.stats import SpecStats
from app.options import SamplingParams, SpecMode, SpeculationConfig

HELLO = (ChatMessage("user", "hello"),)


def test_draft_spans_merge_touching_ranges_and_skip_empty_text() -> None:
    pieces = [("ab", False), ("cd", True), ("", True), ("e", True), ("f", False), ("gh", True)]
    assert draft_spans(pieces) == ((2, 5), (6, 8))
    spans: list[tuple[int, int]] = [(0, 2)]
    add_span(spans, 2, 4)
    add_span(spans, 5, 5)  # empty: ignored
    add_span(spans, 6, 7)
    assert spans == [(0, 4), (6, 7)]
    assert clip_spans([(0, 4), (6, 9)], 7) == [(0, 4), (6, 7)]
    assert clip_spans([(0, 4), (6, 9)], 5) == [(0, 4)]


def test_the_record_says_what_was_asked_and_what_was_used() -> None:
    asked = SpeculationConfig(mode=SpecMode.AUTO)
    used = SpeculationConfig(mode=SpecMode.SUFFIX, draft_max=12)
    stats = SpecStats(mode=SpecMode.SUFFIX, draft_max=12, emitted=3, total_time=2.0)
    rec = ReplyRecord(ReplyRequest(SamplingParams(seed=5), used, 9), used, "stop", "abc",
                      (1, 2, 3), (0.1, 0.2, 0.3), stats, 5, spans=((1, 3),), started_at=100.0)
    rec = rec.asked(speculation=asked, messages=HELLO)
    assert rec.request.kind == "chat" and rec.request.speculation is asked
    assert (rec.mode, rec.draft_max) == (SpecMode.SUFFIX, 12)
    d = rec.to_dict()
    assert d["speculation_asked"]["mode"] == "auto" and d["speculation"]["mode"] == "suffix"
    assert d["speculation"]["draft_max"] == 12 and d["prompt_tokens"] == 9
    assert d["draft_spans"] == [[1, 3]] and d["finish_reason"] == "stop"
    with pytest.raises(TypeError):
        rec.asked(no_such_field=1)


@pytest.mark.slow
def test_the_service_returns_the_sessions_record_with_the_request_filled_in(
        tiny_target: Path) -> None:
    service = ChatService()
    try:
        service.load(SessionConfig(target_path=tiny_target, n_ctx=256, n_threads=2)).result(120)
        sampling = SamplingParams(temperature=0.0, max_tokens=24)
        auto = SpeculationConfig(mode=SpecMode.AUTO)
        before = time.time()
        job = service.reply(HELLO, sampling, auto, batch_s=0.0)
        deltas = [d for e in job.events(timeout=120) if isinstance(e, ReplyStreamed)
                  for d in e.deltas]
        rec = job.result()
        assert isinstance(rec, ReplyRecord)
        # the request as asked: the conversation, the caller's sampling, Auto itself
        assert rec.request.messages == HELLO and rec.request.kind == "chat"
        assert rec.request.sampling == sampling and rec.request.speculation == auto
        assert rec.request.prompt_tokens > 0
        # what was used: Auto's drafter and k, and why
        assert rec.auto is not None and rec.speculation.mode is rec.auto.mode
        assert rec.speculation.mode is not SpecMode.AUTO
        assert rec.stats.emitted == len(rec.token_ids) == len(rec.token_times)
        assert before <= rec.started_at <= time.time()
        # the draft spans are those of the streamed text
        assert "".join(d.text for d in deltas) == rec.text
        assert rec.spans == draft_spans((d.text, d.from_draft) for d in deltas)

        completion = service.complete("hello there", sampling,
                                      SpeculationConfig(mode=SpecMode.PROMPT_LOOKUP)).result(120)
        assert completion.request.kind == "completion"
        assert completion.request.prompt == "hello there" and completion.auto is None
        assert completion.speculation.mode is SpecMode.PROMPT_LOOKUP
    finally:
        service.shutdown()

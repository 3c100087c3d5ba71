"""The prefix cache (saved KV states put back on a return) and prefill progress.

A conversation that another prompt pushed out of the context comes back with its state
restored, so its prefill reads only the new tokens, and the reply is the one a session
that never left it (and a fresh one) writes; a Stop during the prefill is honoured
between chunks, and every chunk reports its progress.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from app.engine.chat import ChatMessage
from app.engine.events import PrefillProgress
from app.engine.reply import ReplyRecord
from app.engine.prefix_cache import MIN_SAVED_TOKENS, PrefixStateCache
from app.engine.session import Session, SessionConfig
from app.options import SamplingParams, SpeculationConfig
from tests.engine.util import Run, run
from tests.synthetic import BOS

GREEDY = SamplingParams(temperature=0.0, max_tokens=16)
#: a long conversation, and a request that shares only BOS with it
CONVERSATION = [BOS] + [300 + (i * 7) % 150 for i in range(300)]
OTHER = [BOS] + [460 - (i * 5) % 40 for i in range(120)]


def _open(path: Path, cache_bytes: int = 2**26, n_batch: int = 64,
          draft: Path | None = None) -> Session:
    return Session.open(SessionConfig(target_path=path, draft_path=draft, n_ctx=1024,
                                      n_batch=n_batch, n_threads=2,
                                      prefix_cache_bytes=cache_bytes))


def test_the_cache_keeps_the_newest_within_its_bound() -> None:
    cache = PrefixStateCache(max_bytes=10)
    assert cache.put([1, 2, 3], b"aaaa") and cache.put([5, 6], b"bbbb")
    assert cache.best([1, 2, 9]) == (cache.best([1, 2, 9])[0], 2)
    assert cache.put([7], b"cccc")  # over 10 bytes: the least recently used goes ([5, 6])
    assert len(cache) == 2 and cache.held_bytes == 8
    assert cache.best([5, 6])[0] is None
    assert not cache.put([8], b"x" * 11)  # larger than the bound: not kept
    assert cache.put([1, 2, 3, 4], b"dd")  # extends [1, 2, 3]: the shorter one is dropped
    entry, n = cache.best([1, 2, 3, 4, 5])
    assert entry is not None and entry.tokens == (1, 2, 3, 4) and n == 4
    assert len(cache) == 2
    cache.take(entry)
    assert cache.best([1, 2, 3, 4])[0] is None
    with pytest.raises(ValueError, match="max_bytes"):
        PrefixStateCache(-1)


def _follow_up(first: tuple[int, ...]) -> list[int]:
    return [*CONVERSATION, *first, 310, 311, 312]


def test_a_return_reads_only_the_new_tokens_and_writes_the_same_reply(tiny_target: Path) -> None:
    with _open(tiny_target) as stayed:  # the conversation never leaves the context
        first = run(stayed, CONVERSATION, GREEDY)
        follow = _follow_up(first.ids)
        kept = run(stayed, follow, GREEDY)
    with _open(tiny_target) as s:
        assert run(s, CONVERSATION, GREEDY).ids == first.ids
        run(s, OTHER, GREEDY)  # pushes the conversation out; its state is saved
        assert len(s.saved_states) == 1
        back = run(s, follow, GREEDY)
        # the cache held the conversation and all but the last reply token
        new = len(follow) - 1 - (len(CONVERSATION) + len(first.ids) - 1)
        assert back.stats.prefill_tokens == new <= 4
        assert back.prefill[-1].cached == len(follow) - 1 - new
        assert back.ids == kept.ids
        run(s, OTHER, GREEDY)  # and the other request's state came back too
        assert s.cached_tokens >= len(OTHER) - 1
    with _open(tiny_target, cache_bytes=0) as without:  # before: everything re-read
        run(without, CONVERSATION, GREEDY)
        run(without, OTHER, GREEDY)
        cold = run(without, follow, GREEDY)
    assert cold.stats.prefill_tokens == len(follow) - 2  # all but the shared BOS
    assert cold.ids == back.ids  # a fresh prefill writes the same (F32: batch-invariant)


def test_speculation_stays_exact_after_a_return(tiny_target: Path,
                                                tiny_draft_perturbed: Path) -> None:
    spec = SpeculationConfig(mode="draft-model", draft_max=4, adaptive=False)
    with _open(tiny_target, draft=tiny_draft_perturbed) as s:
        first = run(s, CONVERSATION, GREEDY, spec)
        run(s, OTHER, GREEDY, spec)
        draft = s.loaded_draft
        assert draft is not None and len(draft.saved_states) == 1  # the draft's state too
        follow = _follow_up(first.ids)
        back = run(s, follow, GREEDY, spec)
        assert back.stats.verified > back.stats.accepted  # rejections were rolled back
    with _open(tiny_target, cache_bytes=0) as plain:
        fresh = run(plain, follow, GREEDY, SpeculationConfig(mode="off"))
    assert back.ids == fresh.ids


def test_prefill_reports_each_chunk(tiny_target: Path) -> None:
    with _open(tiny_target, n_batch=64) as s:
        r = run(s, CONVERSATION, SamplingParams(temperature=0.0, max_tokens=2))
    total = len(CONVERSATION) - 1
    assert [p.done for p in r.prefill] == [0, 64, 128, 192, 256, total]
    assert all(p.total == total and p.cached == 0 for p in r.prefill)
    assert r.prefill[0].seconds_left is None
    assert all(p.seconds_left is not None and p.seconds_left >= 0 for p in r.prefill[1:])
    assert r.prefill[-1].seconds_left == 0.0
    assert r.stats.prefill_tokens == total


def test_stop_during_the_prefill_is_honoured_between_chunks(tiny_target: Path) -> None:
    cancel = threading.Event()
    seen: list[PrefillProgress] = []
    finished = None
    with _open(tiny_target, n_batch=64) as s:
        for ev in s.generate(CONVERSATION, GREEDY, None, cancel):
            if isinstance(ev, PrefillProgress):
                seen.append(ev)
                if ev.done >= 128:
                    cancel.set()
            elif isinstance(ev, ReplyRecord):
                finished = ev
        assert s.cached_tokens == 128  # the chunks read so far stay cached
        again = run(s, CONVERSATION, GREEDY)
    assert finished is not None and finished.reason == "cancelled"
    assert finished.token_ids == () and finished.stats.prefill_tokens == 128
    assert [p.done for p in seen] == [0, 64, 128]
    assert again.stats.prefill_tokens == len(CONVERSATION) - 1 - 128
    assert MIN_SAVED_TOKENS > 4  # a few tokens are re-read, not saved


def _chat_run(s: Session, messages: list[ChatMessage], max_tokens: int = 16) -> Run:
    prompt = s.chat_prompt(messages)
    sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens,
                              stop=s.chat_format.stop)
    return run(s, prompt, sampling)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["smollm", "gemma"])
def test_real_models_return_to_the_state_they_left(which: str, smollm_path: Path,
                                                   gemma_path: Path) -> None:
    """SmolLM2 (chat template) and Gemma 3 (sliding-window cache): after another prompt
    ran, the conversation's next reply reads only its new tokens and is, token for
    token, the reply of a session that never left it (the same KV bytes)."""
    path = smollm_path if which == "smollm" else gemma_path
    paste = "".join(f"def f{i}(x):\n    return x * {i}\n\n" for i in range(60))
    conv = [ChatMessage("user", "What do these functions do?\n\n" + paste)]
    other = [ChatMessage("user", "Write a haiku about the sea.")]
    cfg = SessionConfig(target_path=path, n_ctx=2048, n_threads=2)
    with Session.open(cfg) as stayed:
        first = _chat_run(stayed, conv)
        again = [*conv, ChatMessage("assistant", first.finished.text),
                 ChatMessage("user", "Say hello.")]
        kept = _chat_run(stayed, again)
    with Session.open(cfg) as s:
        assert _chat_run(s, conv).ids == first.ids
        _chat_run(s, other)
        back = _chat_run(s, again)
    assert back.ids == kept.ids
    assert back.stats.prefill_tokens == kept.stats.prefill_tokens  # only what is new
    assert back.stats.prefill_tokens < back.stats.prompt_tokens // 4


def test_a_cache_smaller_than_a_state_copies_none(tiny_target: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A state larger than the whole cache would be refused: it is not copied first (a
    copy of a large model's KV cache at every conversation switch, for nothing)."""
    from app.engine.llama import LlamaContext

    copies: list[int] = []
    real = LlamaContext.state_bytes

    def counted(self: LlamaContext, size: int | None = None) -> bytearray:
        copies.append(1)
        return real(self, size)

    monkeypatch.setattr(LlamaContext, "state_bytes", counted)
    with _open(tiny_target, cache_bytes=1024) as s:
        run(s, CONVERSATION, GREEDY)
        assert s.ctx.state_size() > 1024
        run(s, OTHER, GREEDY)  # pushes the conversation out: too large to keep
        assert len(s.saved_states) == 0 and copies == []
    with _open(tiny_target) as s:  # with room it is copied and kept
        run(s, CONVERSATION, GREEDY)
        run(s, OTHER, GREEDY)
        assert len(s.saved_states) == 1 and copies == [1]

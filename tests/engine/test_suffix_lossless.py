"""The suffix drafter end to end on a synthetic F32 model: the same tokens as plain
decoding at every k, greedily and seeded at temperature 0.8, with drafts from the context
and from an index of earlier replies."""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from pathlib import Path

import pytest

from app.engine.policy import DraftLengthPolicy, PassTimes
from app.engine.session import Session, SessionConfig
from app.options import SamplingParams, SpecMode, SpeculationConfig
from tests.engine.test_lossless_synthetic import MAX_TOKENS, SAMPLINGS, prompts
from tests.engine.util import check_invariants, run


@pytest.fixture(scope="module")
def session(tiny_target: Path) -> Iterator[Session]:
    s = Session.open(SessionConfig(target_path=tiny_target, n_ctx=256, n_threads=2))
    yield s
    s.close()


@pytest.mark.parametrize("sampling", SAMPLINGS[:2], ids=["greedy", "t0.8"])
@pytest.mark.parametrize("k", [1, 4, 8])
def test_suffix_same_tokens_as_plain(session: Session, sampling: SamplingParams, k: int) -> None:
    ps = prompts()[:8]
    plain = [run(session, p, sampling, SpeculationConfig(mode=SpecMode.OFF)) for p in ps]
    session.suffix_index.clear()
    # History as the app builds it: every earlier reply (and, for half the prompts, the
    # reply to the same prompt, as when a user asks again).
    session.suffix_index.load_replies(list(r.ids) for r in plain[::2])
    verified = accepted = 0
    spec = SpeculationConfig(mode=SpecMode.SUFFIX, draft_max=k, adaptive=False, suffix_spec_factor=2.0)
    for p, ref in zip(ps, plain, strict=True):
        got = run(session, p, sampling, spec)
        assert got.ids == ref.ids
        assert got.finished.text == ref.finished.text
        assert got.stats.mode is SpecMode.SUFFIX
        check_invariants(got, MAX_TOKENS)
        verified += got.stats.verified
        accepted += got.stats.accepted
        session.suffix_index.add_reply(got.ids)  # as the chat layer does when a reply ends
    assert verified > 0
    if sampling.temperature == 0.0:
        # greedy replies that are in the index are copied from it
        assert accepted / verified > 0.5
    session.suffix_index.clear()


def test_suffix_adaptive_default_is_lossless(session: Session) -> None:
    sampling = SAMPLINGS[0]
    session.suffix_index.clear()
    for p in prompts()[8:14]:
        plain = run(session, p, sampling, SpeculationConfig(mode=SpecMode.OFF))
        session.suffix_index.add_reply(plain.ids)
        got = run(session, p, sampling, SpeculationConfig(mode=SpecMode.SUFFIX, draft_max=6))
        assert got.ids == plain.ids
        check_invariants(got, MAX_TOKENS)
    session.suffix_index.clear()


@pytest.mark.parametrize("mode", [SpecMode.SUFFIX, SpecMode.PROMPT_LOOKUP])
def test_free_drafts_cut_by_the_policy_when_sampling_are_lossless(
        session: Session, mode: SpecMode, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sampling, the session drafts at full length and the policy cuts each draft by its
    tokens' measured acceptance (DraftLengthPolicy.trim): the same tokens as plain."""
    cuts: list[tuple[int, int]] = []  # (draft length, verified length)
    original = DraftLengthPolicy.trim

    def trim(self: DraftLengthPolicy, keys: Sequence[Hashable | None], draft_min: int = 0,
             **kw: bool) -> int:
        d = original(self, keys, draft_min, **kw)
        cuts.append((len(keys), d))
        return d

    monkeypatch.setattr(DraftLengthPolicy, "trim", trim)
    # White box: the policy starts afresh on a fixed table of pass times (10 ms + 1 ms a
    # token, never re-timed), so that its cuts depend on the counted acceptance alone and
    # not on how busy the machine is.
    table = PassTimes()
    for n in range(1, 10):
        for _ in range(PassTimes.trusted_after):
            table.observe(n, 0.010 + 0.001 * (n - 1))
    monkeypatch.setattr(PassTimes, "observe", lambda self, n, seconds: None)
    monkeypatch.setattr(session, "_pass_table", lambda: table)
    monkeypatch.setattr(DraftLengthPolicy, "margin", 0.0)
    session._policies.pop(mode, None)
    sampling = SAMPLINGS[1]
    session.suffix_index.clear()
    verified = 0
    for p in prompts()[:6]:
        plain = run(session, p, sampling, SpeculationConfig(mode=SpecMode.OFF))
        session.suffix_index.add_reply(plain.ids)
        got = run(session, p, sampling, SpeculationConfig(mode=mode, draft_max=8, ngram_min=1))
        assert got.ids == plain.ids
        check_invariants(got, MAX_TOKENS)
        verified += got.stats.verified
    assert verified > 0 and cuts, "the cut never ran"
    assert any(d < n for n, d in cuts), cuts  # some draft was verified only in part
    assert session._policies.pop(mode).keys_measured > 0  # (popped: it used the table)
    session.suffix_index.clear()

"""The race view where the two texts differ: both panes mark the first differing token
and scroll to it, the explanation gives the measured verdict in words, and a race on the
engine with a deliberately injected bug (a stale KV cache after a rejection) is called
suspect."""

from __future__ import annotations

from app.engine.rounds import Verifier
from tests.faults import FAULTS

import dataclasses

import pytest

from app.chat.recording import LaneRecording, RaceRecording
from app.engine.divergence import Divergence
from app.engine.measure.race import RaceLane, RaceResult
from app.engine.stats import SpecStats
from app.ui.race.lane_pane import DIFFERENCE_MARK, RaceLaneWidget
from app.ui.race.race_view import RaceViewWidget
from tests.engine.util import record

# a long common start, so that the difference is far below the top of a small pane
COMMON = "".join(f"line {i} of the common start\n" for i in range(60))


def _lane(label: str, pieces: list[str], stats: SpecStats) -> RaceLane:
    text = "".join(pieces)
    offsets, n = [], 0
    for p in pieces:
        n += len(p)
        offsets.append(n)
    ids = tuple(hash(p) % 1000 for p in pieces)
    times = tuple(0.5 + 0.01 * i for i in range(len(pieces)))
    return RaceLane(label, record(stats, text, ids, times), tuple(offsets))


def _recording() -> RaceRecording:
    off_s = SpecStats(mode="off", emitted=3, rounds=3, prefill_time=0.1, decode_time=1.0,
                      total_time=1.1)
    on_s = SpecStats(mode="prompt-lookup", draft_max=4, emitted=3, rounds=2, verified=2,
                     proposed=2, draft_rounds=1, accepted=1, prefill_time=0.1,
                     decode_time=0.5, total_time=0.6)
    off = _lane("off", [COMMON, " x", " tail"], off_s)
    on = _lane("on", [COMMON, " yé", " tail"], on_s)
    d = Divergence(verdict="near-tie", reason="within-threshold", index=1, off_token=off.token_ids[1],
                   on_token=on.token_ids[1], off_text=" x", on_text=" yé",
                   off_probs=(0.41, 0.39), on_probs=(0.40, 0.44), logit_shift=0.15)
    r = RaceResult(off, on, seed=3, temperature=0.0, identical=False, first_difference=1,
                   divergence=d)
    return RaceRecording(r, LaneRecording(off), LaneRecording(on), "m.gguf", "prompt lookup",
                         "p", 64)


def _marked(pane: RaceLaneWidget) -> str:
    doc = pane.text.document()
    out = []
    b = doc.begin()
    while b.isValid():
        it = b.begin()
        while not it.atEnd():
            fr = it.fragment()
            if fr.isValid() and fr.charFormat().background().color() == DIFFERENCE_MARK:
                out.append(fr.text())
            it += 1
        b = b.next()
    return "".join(out)


def test_both_panes_mark_and_scroll_to_the_first_difference(qtbot) -> None:  # type: ignore[no-untyped-def]
    view = RaceViewWidget()
    qtbot.addWidget(view)
    view.resize(900, 500)
    view.show()
    view.show_recording(_recording(), replay=False)
    assert _marked(view.off_pane) == " x"
    assert _marked(view.on_pane) == " yé"
    for pane in (view.off_pane, view.on_pane):
        bar = pane.text.verticalScrollBar()
        assert bar.maximum() > 0 and bar.value() > 0  # scrolled down to the mark
        assert pane.text.textCursor().position() == len(COMMON)
    words = view.explanation.text()
    assert not view.explanation.isHidden()
    assert "plain decoding chose ' x' (41%), speculation chose ' yé' (39% in the plain run" in words
    assert "a near-tie" in words
    # replaying clears the mark; the end of the replay marks again
    view.replay()
    assert _marked(view.on_pane) == ""
    view.skip_replay()
    assert _marked(view.on_pane) == " yé"


def test_a_sampled_near_tie_says_the_draw_was_the_tie() -> None:
    """A draw where plain decoding took a 71 % token and speculation a 17 % one is no tie
    of the chances: the words say the random number fell at their boundary."""
    from app.formatting import divergence_words

    d = dataclasses.replace(_recording().result.divergence, sampled=True,
                            off_probs=(0.71, 0.17), on_probs=(0.70, 0.17), logit_shift=0.02)
    words = divergence_words(d)
    assert "drew ' x' (71%), speculation drew ' yé' (17% in the plain run" in words
    assert "a near-tie of the draw — the random number fell at the boundary" in words
    greedy = divergence_words(dataclasses.replace(d, sampled=False))
    assert "a near-tie — the runs' preference" in greedy and "draw" not in greedy


def test_identical_races_mark_nothing(qtbot) -> None:  # type: ignore[no-untyped-def]
    rec = _recording()
    same = dataclasses.replace(rec.result, on=rec.result.off, identical=True,
                               first_difference=None, divergence=None)
    view = RaceViewWidget()
    qtbot.addWidget(view)
    view.show_recording(dataclasses.replace(rec, result=same, on=LaneRecording(rec.result.off)),
                        replay=False)
    assert _marked(view.off_pane) == "" and _marked(view.on_pane) == ""
    assert view.explanation.isHidden()


@pytest.mark.slow
def test_a_broken_engine_is_called_suspect_by_race_and_bench(gemma_path) -> None:  # type: ignore[no-untyped-def]
    from app.cli.report import bench_text
    from app.engine.measure.bench import run_bench
    from app.engine.measure.prompts import load_prompts, prepare_prompt
    from app.engine.measure.race import run_race
    from app.engine.session import Session, SessionConfig
    from app.options import SamplingParams, SpeculationConfig
    from app.ui.race.report import difference_text

    # f-strings at k = 4, greedy: with this fault its first difference was measured at
    # token 9, 14.6 logits off, on the portable and the AVX-512 build alike (docs/proof.md)
    sampling = SamplingParams(temperature=0.0, seed=1, max_tokens=32)
    spec = SpeculationConfig(mode="prompt-lookup", draft_max=4, adaptive=False)
    with Session.open(SessionConfig(target_path=gemma_path, n_ctx=1024, n_threads=2)) as s:
        s.verifier = FAULTS["keep-rejected-kv"]()  # the injected bug: rejected drafts stay cached
        prompt = prepare_prompt(s, next(p for p in load_prompts("builtin:code")
                                        if p.name == "f-strings"), "plain")
        r = run_race(s, prompt, sampling, spec)
        report = run_bench(s, [prompt], [spec], sampling, repeat=1, warmup=False)
    assert not r.identical and r.divergence is not None
    assert r.divergence.verdict == "suspect", r.divergence
    assert "suspect" in (difference_text(r) or "")
    on = report.summaries[1]
    assert (on.identical, on.near_tie, on.suspect) == (0, 0, 1)
    assert report.records[1].divergence is not None
    assert report.records[1].to_dict()["divergence"]["verdict"] == "suspect"
    assert "0 identical, 0 near-ties, 1 suspect" in bench_text(report)
    assert "near-tie / suspect: a difference measured as" in bench_text(report)  # legend

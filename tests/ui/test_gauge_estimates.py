"""Numbers that must not mislead: the gauge and the reply footer say when α rests
on few drafts or on none, and hold the predicted speedup until it means something."""

from __future__ import annotations

import dataclasses

import pytest

from app.engine.stats import MIN_VERIFIED_FOR_ESTIMATE, SpecStats, acceptance_interval
from app.ui.chat.footer import reply_footer
from app.ui.gauge.gauge_panel import SpeculationGaugeWidget, prediction_caveat


def _stats(drafted: int, accepted: int, **kw: object) -> SpecStats:
    base = dict(mode="prompt-lookup", draft_max=4, emitted=accepted + 10, rounds=10,
                draft_rounds=max(1, drafted // 4) if drafted else 0, verified=drafted,
                proposed=drafted, accepted=accepted, decode_time=1.0, draft_time=0.001,
                target_step_time=0.02, accepted_at=(accepted, 0, 0, 0),
                verified_at=(drafted, 0, 0, 0))
    base.update(kw)
    return SpecStats(**base)  # type: ignore[arg-type]


def test_finished_reply_without_drafts_does_not_say_yet(qtbot) -> None:
    g = SpeculationGaugeWidget()
    qtbot.addWidget(g)
    g.begin_reply("prompt-lookup", 4)
    g.set_stats(_stats(0, 0))
    g.refresh()
    assert g.value_text("alpha") == "— (nothing drafted yet)"  # still streaming
    g.end_reply(_stats(0, 0))
    assert "yet" not in g.value_text("alpha")
    assert g.value_text("alpha") == "— (nothing was drafted in this reply)"


def test_alpha_from_one_draft_shows_its_count_and_range_and_holds_the_prediction(qtbot) -> None:
    g = SpeculationGaugeWidget()
    qtbot.addWidget(g)
    g.begin_reply("prompt-lookup", 4)
    one = _stats(1, 1)
    assert one.predicted_speedup is not None  # the formula would extrapolate from it
    g.end_reply(one)
    lo, hi = acceptance_interval(1, 1)  # type: ignore[misc]
    assert g.value_text("alpha") == (
        f"100%  (1/1; few draft tokens, 95% range {lo * 100:.0f}–{hi * 100:.0f}%)")
    assert g.value_text("predicted") == f"— (needs {MIN_VERIFIED_FOR_ESTIMATE} draft tokens)"
    enough = _stats(MIN_VERIFIED_FOR_ESTIMATE + 10, MIN_VERIFIED_FOR_ESTIMATE)
    g.end_reply(enough)
    assert g.value_text("alpha") == f"{enough.acceptance_rate * 100:.0f}%  (30/40)"  # type: ignore[operator]
    assert g.value_text("predicted") == f"{enough.predicted_speedup:.2f}×"


def test_reply_footer_gives_the_count_of_a_few_drafts_alpha() -> None:
    few = reply_footer(_stats(2, 2).to_dict(), "stop")
    assert "α 100% (2/2 draft tokens)" in few
    many = reply_footer(_stats(40, 30).to_dict(), "stop")
    assert "α 75%" in many and "draft tokens)" not in many


def test_wilson_interval() -> None:
    assert acceptance_interval(0, 0) is None
    lo, hi = acceptance_interval(30, 30)  # type: ignore[misc]
    assert hi == 1.0 and 0.88 < lo < 0.89
    lo, hi = acceptance_interval(50, 100)  # type: ignore[misc]
    assert 0.40 < lo < 0.41 and 0.59 < hi < 0.60


def test_an_mtp_reply_drafted_by_a_loaded_assistant_is_titled_with_it(qtbot) -> None:
    """The gauge's title names the MTP assistant the session loaded, as the drafter menu
    and the race lanes do; without one it is the heads' label."""
    g = SpeculationGaugeWidget()
    qtbot.addWidget(g)
    g.begin_reply("mtp", 3)
    g.end_reply(_stats(8, 6, mode="mtp", draft_max=3, accepted_at=(3, 2, 1),
                       verified_at=(4, 3, 1)))
    g.refresh()
    assert g.mode_label.text().startswith("MTP (built into the model)")
    g.set_assistant("mtp-gemma-4-E2B-it-Q4_0.gguf")
    g.refresh()
    assert g.mode_label.text().startswith("MTP (assistant: mtp-gemma-4-E2B-it-Q4_0.gguf)")


def test_the_cpu_caveat_stands_beside_a_prediction_only(qtbot) -> None:
    """On a CPU the gauge says why the prediction overstates; beside a reply decoded with
    speculation off, whose prediction is "1× (off)", the caveat has nothing to qualify."""
    from app.options import SpecMode

    g = SpeculationGaugeWidget()
    qtbot.addWidget(g)
    g.set_cpu_only(True)
    g.show_stored(_stats(40, 30))
    g.refresh()
    assert not g.prediction_note.isHidden()
    g.show_stored(None)  # a conversation without a measured reply
    g.refresh()
    assert g.prediction_note.isHidden() and g.value_text("predicted") == "—"
    g.show_stored(_stats(40, 30))
    g.refresh()
    g.show_stored(SpecStats(mode=SpecMode.OFF, emitted=20, rounds=20, decode_time=0.5))
    g.refresh()
    assert g.value_text("predicted") == "1× (off)" and g.prediction_note.isHidden()
    g.set_cpu_only(False)
    g.show_stored(_stats(40, 30))
    g.refresh()
    assert g.prediction_note.isHidden()  # a GPU: the formula's assumption holds there


def test_the_cpu_caveat_gives_what_a_check_cost_in_this_reply(qtbot) -> None:
    """The textbook prediction takes a check of k + 1 tokens as one step; on a CPU the
    caveat says what the passes that carried drafts took in this reply: here 10 of them
    carried 40 draft tokens (5-token passes on average) in 0.6 s against a plain step of
    20 ms: 60 ms, three steps each. Plain rounds (their time is in target_time, not in
    draft_pass_time) do not move it."""
    stats = _stats(40, 30, rounds=40, draft_rounds=10, draft_passes=10, draft_pass_time=0.6,
                   target_time=0.6 + 30 * 0.025, plain_step_time=0.02)
    size, steps = stats.verification_cost  # type: ignore[misc]
    assert size == 5.0 and abs(steps - 3.0) < 1e-9
    g = SpeculationGaugeWidget()
    qtbot.addWidget(g)
    g.set_cpu_only(True)
    g.show_stored(stats)
    assert not g.prediction_note.isHidden()
    assert ("In this reply the target's checks of 5.0 tokens on average took 3.0 one-token "
            "steps each, so expect the measured speedup to be lower." in g.prediction_note.text())
    cheap = _stats(40, 30, draft_passes=10, draft_pass_time=0.22, plain_step_time=0.02)
    g.show_stored(cheap)  # 1.1 steps: the assumption nearly holds, and the note says so
    assert "took 1.1 one-token steps each, close to that assumption." in g.prediction_note.text()
    few = _stats(8, 6, draft_passes=2, draft_pass_time=0.1, plain_step_time=0.02)
    assert few.verification_cost is None  # two passes: no figure
    assert "On a CPU a batch costs more" in prediction_caveat(few)
    g.show_stored(few)  # 8 drafts: no prediction is shown ("needs 30"), so no caveat
    assert g.value_text("predicted") == "— (needs 30 draft tokens)" and g.prediction_note.isHidden()
    # a pass slower than decoding its tokens one at a time is load, not a cost
    assert _stats(40, 30, draft_passes=10, draft_pass_time=1.2,
                  plain_step_time=0.02).verification_cost is None
    assert _stats(40, 30).verification_cost is None  # stored before passes were counted


def test_a_stored_reply_keeps_its_advice_and_shows_no_other_replys_curve(qtbot) -> None:
    """Flipping to a stored version shows the advice it ended with (τ below 2 here) and
    clears the rate curve of the reply that streamed last; a plain step slower than
    1 tok/s reads with its digits, not as "0 tok/s"; a reply stopped before its first
    token has no rate."""
    from app.ui.gauge.gauge_panel import rate_words

    g = SpeculationGaugeWidget()
    qtbot.addWidget(g)
    low_tau = _stats(40, 4, rounds=30, draft_rounds=20, emitted=34)  # τ 1.13
    g.begin_reply("prompt-lookup", 4)
    for tps in (20.0, 22.0, 21.0):
        g.sparkline.add(tps)
    g.end_reply(low_tau)
    advice = "Mean acceptance length τ stays below 2"
    assert advice in g.note_label.text() and len(g.sparkline._values) == 3
    g.show_stored(_stats(40, 30))  # version 1: its own figures, no curve
    assert advice not in g.note_label.text() and len(g.sparkline._values) == 0
    g.show_stored(low_tau)  # back to version 2: the advice again
    assert advice in g.note_label.text()

    assert (rate_words(74.4), rate_words(7.44), rate_words(0.31)) == ("74", "7.4", "0.31")
    slow = _stats(40, 30, plain_step_time=1 / 0.31, plain_step_source="recent",
                  decode_time=1.0, emitted=40)
    g.show_stored(slow)
    assert "plain 0.31 tok/s" in g.value_text("measured")

    nothing = SpecStats(mode="suffix", draft_max=16, decode_time=0.4, total_time=2.0)
    assert nothing.decode_tps is None and nothing.end_to_end_tps is None
    g.show_stored(nothing)
    assert g.value_text("reply_tps") == "—" and g.value_text("e2e_tps") == "—"


def test_a_reply_with_more_threads_than_free_cores_says_why_it_was_slow(qtbot) -> None:
    """Two threads fixed on two cores beside a busy program decoded at 0.3–1.5 tok/s
    (1 thread: 22–29) with no word why: the note names the load and the setting."""
    from app.ui.gauge.gauge_panel import threads_note

    busy = _stats(40, 30, n_threads=2, other_cores=1.0)
    assert threads_note(busy, cores=2) == (
        "Other programs kept 1.0 of 2 cores busy: with 2 threads each step waits for the "
        "busy core. CPU threads: Auto (Sampling → Model) uses the free cores.")
    assert threads_note(busy, cores=8) == ""  # cores to spare
    assert threads_note(_stats(40, 30, n_threads=1, other_cores=1.0), cores=2) == ""
    assert threads_note(_stats(40, 30, n_threads=2, other_cores=0.1), cores=2) == ""
    assert threads_note(_stats(40, 30, n_threads=2), cores=2) == ""  # load not measured
    g = SpeculationGaugeWidget()
    qtbot.addWidget(g)
    g.end_reply(busy)  # with Auto the governor follows the load: no advice to choose it
    assert "Other programs" not in g.note_label.text()
    g.threads_auto = False  # fixed in Sampling → Model (on a 2-core machine here)
    g.end_reply(busy)
    assert ("Other programs" in g.note_label.text()) == (threads_note(busy) != "")


def test_the_big_figure_says_what_it_is_before_the_first_second_of_decoding(qtbot) -> None:
    """While the prompt is read there is no decode rate, and in the first second only the
    rate so far: the caption says which, not "whole reply" of a reply still running."""
    g = SpeculationGaugeWidget()
    qtbot.addWidget(g)
    g.begin_reply("prompt-lookup", 4)
    g.refresh()
    assert g.tps_caption.text() == "reading the prompt…" and g.tps_label.text() == "—"
    g.set_stats(_stats(4, 3))
    g.refresh()
    assert g.tps_caption.text() == "decode tok/s (so far)"
    g.end_reply(_stats(4, 3))
    assert g.tps_caption.text() == "decode tok/s (whole reply)"


def test_a_reply_whose_drafts_were_all_declined_says_why(qtbot) -> None:
    """On a CPU where a check of several tokens costs nearly as many one-token steps,
    the adaptive policy may check none of the drafter's tokens: the gauge says so
    instead of "nothing was drafted" (the starter prompts promise drafts)."""
    from app.options import SpecMode
    from app.ui.gauge.gauge_panel import declined_note

    s = SpecStats(mode=SpecMode.PROMPT_LOOKUP, draft_max=16, adaptive=True, emitted=55,
                  rounds=55, declined=38, decode_time=1.1)
    g = SpeculationGaugeWidget()
    qtbot.addWidget(g)
    g.show_stored(s)
    assert g.value_text("alpha") == "— (none of 38 drafts was worth checking on this machine)"
    assert declined_note(s).startswith("The drafter proposed 38 drafts, but on this machine")
    assert declined_note(SpecStats(mode=SpecMode.PROMPT_LOOKUP, emitted=5, rounds=5)) == ""


def test_a_draft_model_reply_that_drafted_nothing_says_why(qtbot) -> None:
    """A draft model as costly as the target: the adaptive length drafts nothing, and
    the gauge says so rather than leaving only "nothing was drafted"."""
    from app.options import SpecMode
    from app.ui.gauge.gauge_panel import undrafted_note

    s = SpecStats(mode=SpecMode.DRAFT_MODEL, draft_max=4, adaptive=True, emitted=60,
                  rounds=60, decode_time=1.2)
    g = SpeculationGaugeWidget()
    qtbot.addWidget(g)
    g.show_stored(s)
    assert undrafted_note(s).startswith("The adaptive draft length drafted nothing")
    assert undrafted_note(s) in g.note_label.text()
    fixed = dataclasses.replace(s, adaptive=False)  # then it drafts every round
    lookup = dataclasses.replace(s, mode=SpecMode.SUFFIX)  # declined_note's case
    drafted = dataclasses.replace(s, draft_rounds=3, verified=6, accepted=6)
    assert undrafted_note(fixed) == undrafted_note(lookup) == undrafted_note(drafted) == ""


def test_a_draft_models_catch_up_is_noted_where_it_cost_a_tenth_of_the_reply(qtbot) -> None:
    """The catch-up over rounds that drafted nothing is in the reply's rate but in no
    draft step (so not in c): the note says how much of the reply it took."""
    from app.options import SpecMode
    from app.ui.gauge.gauge_panel import catch_up_note

    s = SpecStats(mode=SpecMode.DRAFT_MODEL, draft_max=4, adaptive=True, emitted=126,
                  rounds=124, draft_rounds=2, verified=2, accepted=2, draft_steps=2,
                  draft_catch_up_time=0.36, decode_time=1.4)
    assert catch_up_note(s) == ("The draft model spent 0.36 s (26% of this reply's time) "
                                "catching up with text it had not read (the rounds that "
                                "drafted nothing), before it could draft again.")
    g = SpeculationGaugeWidget()
    qtbot.addWidget(g)
    g.show_stored(s)
    assert catch_up_note(s) in g.note_label.text()
    small = dataclasses.replace(s, draft_catch_up_time=0.1)  # 7 %: not noted
    assert catch_up_note(small) == ""
    head = dataclasses.replace(s, mode=SpecMode("mtp"))
    assert catch_up_note(head).startswith("The MTP head spent 0.36 s")


def test_the_draft_length_advice_counts_only_drafting_rounds() -> None:
    """α 85 % with most rounds undrafted (the adaptive policy declined them) gave "τ stays
    below 2: try another drafter or a smaller k": τ per drafting round is what says
    whether the drafter fits."""
    from app.engine.stats import SpecStats
    from app.options import SpecMode
    from app.ui.gauge.gauge_panel import reply_advice

    mostly_plain = SpecStats(mode=SpecMode.SUFFIX, draft_max=16, emitted=200, rounds=150,
                             draft_rounds=20, verified=40, accepted=34, decode_time=2.0)
    assert mostly_plain.mean_acceptance_length is not None
    assert mostly_plain.mean_acceptance_length < 2 and reply_advice(mostly_plain) is None
    poor = SpecStats(mode=SpecMode.SUFFIX, draft_max=16, emitted=120, rounds=100,
                     draft_rounds=60, verified=120, accepted=20, decode_time=2.0)
    assert reply_advice(poor) == "other-drafter-or-smaller-k"


def test_a_larger_k_is_advised_only_where_it_would_pay() -> None:
    """Drafts accepted whole (τ near k + 1) call for a larger k only when drafting is
    cheap: with a draft model nearly as dear as its target (c 1.19) no k pays more."""
    from app.options import SpecMode
    from app.ui.gauge.gauge_panel import reply_advice

    def whole(c: float) -> SpecStats:
        return SpecStats(mode=SpecMode.DRAFT_MODEL, draft_max=4, emitted=100, rounds=20,
                         draft_rounds=20, proposed=80, verified=80, accepted=79,
                         draft_steps=80, draft_time=80 * 0.02 * c, target_step_time=0.02,
                         decode_time=2.0)

    assert whole(0.05).draft_cost_ratio == pytest.approx(0.05)
    assert reply_advice(whole(0.05)) == "larger-k"
    assert reply_advice(whole(1.19)) is None


def test_c_divides_by_the_same_plain_step_as_the_measured_speedup() -> None:
    """A step timed at load on an empty cache (0.02 s) is faster than one at the reply's
    depth (0.03 s): c, the measured speedup and the verification cost all divide by the
    reply's own baseline once one exists, so c does not jump when the reply ends."""
    from app.options import SpecMode

    def reply(plain: float | None) -> SpecStats:
        return SpecStats(mode=SpecMode.DRAFT_MODEL, draft_max=4, emitted=100, rounds=30,
                         draft_rounds=30, proposed=120, verified=120, accepted=70,
                         draft_steps=120, draft_time=120 * 0.006, target_step_time=0.02,
                         draft_passes=30, draft_pass_time=30 * 0.045, decode_time=2.0,
                         plain_step_time=plain)

    assert reply(None).draft_cost_ratio == pytest.approx(0.3)  # no baseline: the load's
    deep = reply(0.03)
    assert deep.draft_cost_ratio == pytest.approx(0.2)
    assert deep.measured_speedup == pytest.approx(100 / 2.0 * 0.03)
    assert deep.verification_cost == pytest.approx((5.0, 1.5))
    # the lookup drafters' c (per proposed token) divides by the same step
    lookup = dataclasses.replace(deep, mode=SpecMode.SUFFIX, draft_steps=0)
    assert lookup.draft_cost_ratio == pytest.approx(0.006 / 0.03)


def test_a_lookup_drafters_c_is_its_lookup_time_per_round_over_the_mean_draft() -> None:
    """Every round looks up, drafting or not: early in a reply 40 lookups found 2 drafts
    of 3 tokens. Per proposed token alone c would read 40 lookups over 6 tokens (0.67,
    far from what a lookup costs); per round over the mean draft it reads 0.0167, as the
    formula needs (c·k̄ = one lookup in target steps)."""
    from app.options import SpecMode

    early = SpecStats(mode=SpecMode.PROMPT_LOOKUP, draft_max=16, emitted=44, rounds=40,
                      draft_rounds=2, proposed=6, verified=6, accepted=4,
                      draft_time=40 * 0.001, target_step_time=0.02, decode_time=1.0)
    assert early.draft_cost_ratio == pytest.approx(0.001 / 3 / 0.02)
    # the prediction charges every round its lookup: 40 lookups are 2 target steps, and
    # 38 plain rounds plus 2 drafting rounds of E(α, 3) tokens take 40 steps and them
    from app.engine.stats import expected_tokens_per_round

    e = expected_tokens_per_round(4 / 6, 3.0)
    assert early.predicted_speedup == pytest.approx((2 * e + 38) / (40 + 40 * 0.001 / 0.02))


def test_a_reply_cut_by_the_full_context_says_so_once() -> None:
    from app.engine.reply import context_full_note

    note = context_full_note(512)
    footer = reply_footer({"emitted": 289, "mode": "off"}, "length", note)
    assert "hit the token limit" not in footer and footer.endswith(note)
    assert "hit the token limit" in reply_footer({"emitted": 512, "mode": "off"}, "length")
    # a drafter's fallback said earlier in the reply stays, and the ending is still read
    both = f"Speculation was turned off for this reply.\n{note}"
    footer = reply_footer({"emitted": 289, "mode": "off"}, "length", both)
    assert "hit the token limit" not in footer and footer.endswith(both)


def test_a_stored_reply_shows_the_note_it_was_stored_with(qtbot) -> None:  # type: ignore[no-untyped-def]
    """A version shown again (or a conversation opened) keeps its note in the gauge, as
    when it ended: a continued reply's "the figures are those of the text added"."""
    from app.chat.conversation import CONTINUED_NOTE

    gauge = SpeculationGaugeWidget()
    qtbot.addWidget(gauge)
    gauge.show_stored_figures(_stats(20, 18).to_dict(), "m", "No figures", CONTINUED_NOTE)
    assert gauge.note_label.text().startswith(CONTINUED_NOTE)
    gauge.show_stored(_stats(20, 18), "m")
    assert CONTINUED_NOTE not in gauge.note_label.text()

"""Threads that fit the machine now, and the measured speedup's baseline under the same
conditions: the governor follows other processes' load (faked readings), the session
switches threads between rounds without changing the text, a speculative reply carries
its own plain-step baseline, and the race and bench leave disturbed runs out."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.cpu import CpuSample, ThreadGovernor, free_threads, other_cores
from app.engine.measure.bench import DISTURBED_CORES, RunRecord, summarize
from app.engine.measure.race import RacePair, RaceLane, RaceResult
from app.engine.rounds import PlainStep, PlainSteps
from app.engine.session import Session, SessionConfig
from app.engine.stats import SpecStats
from app.options import SamplingParams, SpecMode, SpeculationConfig
from tests.engine.util import record, run
from tests.synthetic import BOS


class FakeCpu:
    """CPU readings in which other processes keep ``other`` cores busy; the clock moves
    by ``step`` seconds each time it is read."""

    def __init__(self, step: float = 1.0) -> None:
        self.t = 0.0
        self.busy = 0.0
        self.other = 0.0
        self.step = step

    def now(self) -> float:
        self.t += self.step
        self.busy += self.other * self.step
        return self.t

    def sample(self) -> CpuSample:
        return CpuSample(self.busy, 0.0, self.t)


def test_free_threads_leave_the_cores_other_work_uses() -> None:
    assert free_threads(None, 4, cores=4) == 4  # unknown load: every core up to the cap
    assert free_threads(0.0, 2, cores=2) == 2
    assert free_threads(0.3, 2, cores=2) == 2  # a third of a core of background noise
    assert free_threads(0.67, 2, cores=2) == 1  # a busy process sharing with 2 threads
    assert free_threads(1.0, 2, cores=2) == 1
    assert free_threads(2.5, 2, cores=2) == 1  # never none
    assert free_threads(1.0, 4, cores=8) == 4  # the cap holds
    assert other_cores(CpuSample(10.0, 1.0, 0.0), CpuSample(12.0, 1.5, 1.0)) == 1.5
    assert other_cores(None, CpuSample(1.0, 0.0, 1.0)) is None


def test_the_governor_follows_load_after_two_readings_and_only_when_asked() -> None:
    cpu = FakeCpu()
    gov = ThreadGovernor(2, cpu.sample, cores=2, clock=cpu.now)
    assert gov.poll(2) is None  # quiet
    cpu.other = 1.0  # a busy process starts
    assert gov.poll(2) is None  # one reading is no lasting change
    assert gov.poll(2) == 1 and gov.other == pytest.approx(1.0)
    assert gov.poll(1) is None  # still busy: stay
    cpu.other = 0.0
    assert gov.poll(1) is None and gov.poll(1) == 2  # quiet again: back to both cores
    cpu.other = 1.0
    assert gov.poll(2) is None and gov.poll(2) == 1
    cpu.other = 0.0  # a short burst ends before it is taken
    cpu.other = 1.0
    fixed = ThreadGovernor(2, cpu.sample, cores=2, clock=cpu.now, adjust=False)
    assert fixed.poll(2) is None and fixed.poll(2) is None  # the user fixed the count
    assert fixed.other == pytest.approx(1.0)  # it still measures the load
    cpu.step = 0.1  # readings closer than the interval are not taken
    fast = ThreadGovernor(2, cpu.sample, cores=2, clock=cpu.now)
    first = fast._last
    assert fast.poll(2) is None and fast._last is first


def test_the_plain_baseline_is_this_replys_or_a_recent_one_at_the_same_threads_and_load() -> None:
    steps = PlainSteps()
    assert steps.baseline([], 100.0, 2, 0.0) is None and steps.comparable(100.0, 2, 0.0) == 0
    own = [0.010, 0.012, 0.011, 0.013]
    base = steps.baseline(own, 100.0, 2, 0.0)
    assert base is not None and base[2] == "reply" and base[0] == pytest.approx(0.0115)
    assert base[1] == (0.010, 0.013)  # a few passes: their fastest and slowest
    many = [0.010 + 0.001 * i for i in range(11)] + [0.5]  # one pass hit by other work
    base = steps.baseline(many, 100.0, 2, 0.0)
    assert base is not None and base[0] == pytest.approx(0.0155)
    assert base[1] == pytest.approx((0.0111, 0.0199))  # 10th and 90th: not the 0.5
    # other work preempts 3 passes in 10 (14 ms → 40 ms): plain decoding would have paid
    # that too, so the baseline is near the mean (22 ms), not the unhindered median
    # three passes timed at a reply's end: one preempted (3×) counts, as it would in a
    # plain reply; a pause of the process (10×) does not
    three = steps.baseline([0.010, 0.030, 0.010], 100.0, 2, 0.0)
    assert three is not None and three[0] == pytest.approx(0.050 / 3)
    paused = steps.baseline([0.010, 0.100, 0.010], 100.0, 2, 0.0)
    assert paused is not None and paused[0] == pytest.approx(0.010)
    preempted = [0.014] * 14 + [0.040] * 6
    base = steps.baseline(preempted, 100.0, 2, 0.0)
    assert base is not None and base[0] == pytest.approx((0.014 * 12 + 0.040 * 4) / 16)
    steps.add(PlainStep(0.020, 95.0, 2, 0.1))
    assert steps.baseline([0.010], 100.0, 2, 0.0) == (0.020, (0.020, 0.020), "recent")
    assert steps.baseline([], 100.0, 1, 0.0) is None  # another thread count
    assert steps.baseline([], 100.0, 2, 1.0) is None  # the load changed since
    assert steps.baseline([], 100.0 + PlainSteps.fresh + 6, 2, 0.0) is None  # too old
    assert steps.comparable(100.0, 2, 0.0) == 1 and steps.comparable(100.0, 2, 1.0) == 0


#: a prompt that prompt lookup drafts from, and prompt lookup at a fixed k of 4
_REPEATING = [BOS] + [300, 301, 302, 303, 304, 305] * 6
_LOOKUP = SpeculationConfig(mode="prompt-lookup", draft_max=4, adaptive=False)


def _one_thread(target: Path) -> Session:
    return Session.open(SessionConfig(target_path=target, n_ctx=256, n_threads=1))


def test_a_speculative_reply_carries_its_own_plain_baseline(tiny_target: Path) -> None:
    prompt, greedy, spec = _REPEATING, SamplingParams(temperature=0.0, max_tokens=24), _LOOKUP
    with _one_thread(tiny_target) as s:
        r = run(s, prompt, greedy, spec)
        st = r.stats
        # the rounds drafted; one-token passes were timed under the reply's conditions
        assert st.plain_step_time is not None and st.plain_step_source == "reply"
        assert st.n_threads == 1 and st.adaptive is False
        lo, hi = st.plain_step_range  # type: ignore[misc]
        assert lo <= st.plain_step_time <= hi
        if st.draft_rounds >= 3 and st.verified >= 10:
            assert st.measured_speedup == pytest.approx(st.decode_tps * st.plain_step_time)
        # the timing passes left the cache as the reply left it: the next reply agrees
        again = run(s, prompt, greedy, spec)
        assert again.ids == r.ids
        off = run(s, prompt, greedy, SpeculationConfig())
        assert off.ids == r.ids and off.stats.measured_speedup is None


def _log_passes(s: Session, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The session's target passes in order: each pass's token count, "baseline" for a
    pass taken as a plain-decoding baseline step, "end" where a reply's end timing
    begins."""
    events: list[object] = []
    table = s._pass_table()
    observe, step, at_end = table.observe, s._observe_plain_step, s._time_plain_steps
    monkeypatch.setattr(table, "observe", lambda n, dt: events.append(n) or observe(n, dt))
    monkeypatch.setattr(s, "_observe_plain_step", lambda *a: events.append("baseline") or step(*a))
    monkeypatch.setattr(s, "_time_plain_steps", lambda *a: events.append("end") or at_end(*a))
    return events


def test_the_plain_baseline_skips_one_token_passes_that_follow_a_batch(
        tiny_target: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-token pass right after a batch (the prefill, a verification) builds its
    graph anew, which plain decoding does once: it is no baseline step. Only passes
    after another one-token pass are."""
    prompt, greedy, spec = _REPEATING, SamplingParams(temperature=0.0, max_tokens=24), _LOOKUP
    with _one_thread(tiny_target) as s:
        events = _log_passes(s, monkeypatch)
        r = run(s, prompt, greedy, spec)
        del events[events.index("end"):]  # the rounds' passes (the end timing: below)
        passes = [e for e in events if e != "baseline"]
        assert r.stats.draft_rounds >= 1 and max(passes) > 1  # batches were verified
        assert "baseline" in events  # and baseline steps taken between them
        for i, e in enumerate(events):
            if e == "baseline":
                this, before = [p for p in events[:i] if p != "baseline"][-2:]
                assert this == before == 1, events
        off = SpeculationConfig()
        events.clear()
        plain = run(s, prompt, greedy, off)  # every pass but the first after the prefill
        assert events.count("baseline") == len(plain.ids) - 1 == events.count(1) - 1


def test_a_reply_without_enough_plain_steps_times_them_at_its_end(
        tiny_target: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fewer than ``min_own`` baseline steps in the reply and in the session's recent
    ones: that many are timed after the reply, after one untimed pass when the reply
    ended on a batch, and the cache is left as the reply left it."""
    from app.engine.rounds import PlainSteps

    monkeypatch.setattr(PlainSteps, "min_own", 40)  # more than any reply here has
    prompt, greedy, spec = _REPEATING, SamplingParams(temperature=0.0, max_tokens=64), _LOOKUP
    with _one_thread(tiny_target) as s:
        events = _log_passes(s, monkeypatch)
        r = run(s, prompt, greedy, spec)
        assert r.stats.draft_rounds >= 3 and r.stats.verified >= 10
        end = events.index("end")
        last = [e for e in events[:end] if e != "baseline"][-1]
        tail = events[end + 1:]
        warm = 0 if last == 1 else 1
        assert tail.count("baseline") == 40 and tail.count(1) == 40 + warm == len(tail) - 40
        assert r.stats.plain_step_source == "reply"
        assert run(s, prompt, greedy, spec).ids == r.ids  # the cache as the reply left it
        # passes that would take longer than the budget are not timed (a large model's
        # reply would end seconds late)
        monkeypatch.setattr(PlainSteps, "min_own", 400)
        monkeypatch.setattr(Session, "END_TIMING_BUDGET", 0.0)
        events.clear()
        run(s, prompt, greedy, spec)
        assert "baseline" not in events[events.index("end"):]


def test_a_reply_whose_threads_changed_is_measured_against_each_stretchs_baseline() -> None:
    """2 s at 2 threads (10 ms steps), then 2 s at 1 thread (20 ms): plain decoding would
    have made 200 + 100 tokens, so the reply's plain step is 4 s / 300 (13.3 ms), not
    the last stretch's 20 ms (which would overstate the speedup by half) nor the first's
    10 ms."""
    from app.engine.rounds import combined_baseline

    two, one = (0.010, (0.009, 0.012), "reply"), (0.020, (0.018, 0.025), "reply")
    step, (lo, hi), source = combined_baseline([(2.0, two), (2.0, one)])  # type: ignore[misc]
    assert step == pytest.approx(4.0 / 300) and source == "reply"
    assert lo == pytest.approx(4.0 / (2.0 / 0.009 + 2.0 / 0.018))
    assert hi == pytest.approx(4.0 / (2.0 / 0.012 + 2.0 / 0.025))
    assert combined_baseline([(2.0, None), (2.0, one)]) is None  # a stretch without one
    assert combined_baseline([(0.0, None), (2.0, one)]) == one  # no time at the old count
    assert combined_baseline([(1.0, (0.01, (0.01, 0.01), "recent")), (1.0, one)])[2] == \
        "recent"  # type: ignore[index]


def test_threads_change_between_rounds_without_changing_the_text(tiny_target: Path) -> None:
    prompt = [BOS] + [300, 301, 302, 303, 304, 305] * 6
    greedy = SamplingParams(temperature=0.0, max_tokens=32)
    spec = SpeculationConfig(mode="prompt-lookup", draft_max=4)
    with Session.open(SessionConfig(target_path=tiny_target, n_ctx=256)) as s:
        before = run(s, prompt, greedy, spec)
        cpu = FakeCpu(step=1.0)
        cpu.other = 5.0  # busy: the governor asks for 1 thread after two readings
        s._governor = ThreadGovernor(2, cpu.sample, cores=2, clock=cpu.now)
        busy = run(s, prompt, greedy, spec)
        assert s.ctx.n_threads == 1 and busy.stats.n_threads == 1
        assert busy.ids == before.ids
        # the 2-thread stretch before the switch kept its own baseline: the reply's is
        # the two stretches' together (or none), never the 1-thread passes' alone
        st = busy.stats
        if st.plain_step_time is not None:
            lo, hi = st.plain_step_range  # type: ignore[misc]
            assert lo <= st.plain_step_time <= hi
        cpu.other = 0.0
        quiet = run(s, prompt, greedy, spec)
        assert s.ctx.n_threads == 2 and quiet.ids == before.ids


def _lane(label: str, tps: float) -> RaceLane:
    st = SpecStats(mode=SpecMode.OFF if label == "off" else SpecMode.SUFFIX, emitted=10,
                   decode_time=10 / tps, proposed=5)
    return RaceLane(label, record(st, "x", (1,), (0.1,)), (1,))


def test_the_race_verdict_needs_every_undisturbed_pair_to_agree() -> None:
    def result(*pairs: RacePair) -> RaceResult:
        return RaceResult(_lane("off", 50), _lane("on", 70), 1, 0.0, True, None, pairs=pairs)

    quiet = 0.05
    agree = result(RacePair(50, 70, quiet, quiet), RacePair(52, 75, quiet, quiet),
                   RacePair(49, 74, quiet, quiet))
    assert agree.verdict == "faster" and agree.measured_speedup == pytest.approx(75 / 52)
    assert agree.speedup_range == (pytest.approx(70 / 50), pytest.approx(74 / 49))
    # the 0.36× then 1.46× of one busy desktop: a disturbed run is left out, and pairs
    # that disagree give no verdict
    flip = result(RacePair(50, 18, quiet, 1.2), RacePair(50, 73, quiet, quiet),
                  RacePair(50, 48, quiet, quiet))
    assert flip.disturbed_runs == 1 and flip.kept_speedups == (73 / 50, 48 / 50)
    assert flip.verdict == "unclear"
    slower = result(RacePair(50, 40, None, None), RacePair(50, 45, None, None),
                    RacePair(50, 44, None, None))
    assert slower.verdict == "slower"
    # two agreeing pairs are too few: they agree by chance half the time
    assert result(*slower.pairs[:2]).verdict == "unclear"
    busy = result(RacePair(50, 70, 0.9, quiet))
    assert busy.verdict is None and busy.measured_speedup is None
    assert result().measured_speedup == pytest.approx(70 / 50)  # no pairs: the lanes
    # a steady load (a busy process through the whole race) is the race's condition,
    # not a disturbance: every pair is kept
    steady = result(RacePair(30, 45, 1.0, 0.95), RacePair(31, 44, 1.02, 1.0),
                    RacePair(29, 46, 0.98, 1.0))
    assert steady.disturbed_runs == 0 and steady.verdict == "faster"
    assert steady.typical_load == pytest.approx(1.0)


def test_bench_summaries_can_leave_disturbed_runs_out() -> None:
    def rec(label: str, tps: float, other: float | None) -> RunRecord:
        st = SpecStats(mode=SpecMode.OFF if label == "off" else SpecMode.SUFFIX,
                       draft_max=0 if label == "off" else 4, emitted=10, decode_time=10 / tps)
        return RunRecord(label, "p", 0, 0, record(st), other_cores=other)

    runs = [rec("off", 50, 0.0), rec("k=4", 70, 0.0), rec("k=4", 2, 1.5), rec("k=8", 3, 1.2)]
    assert runs[2].disturbed and not runs[1].disturbed and DISTURBED_CORES < 1.2
    kept = {s.label: s for s in summarize(runs, ["off", "k=4", "k=8"], drop_disturbed=True)}
    assert kept["k=4"].decode_tps_median == pytest.approx(70) and kept["k=4"].disturbed == 1
    # every run of k=8 was disturbed: it keeps its rate, flagged
    assert kept["k=8"].decode_tps_median == pytest.approx(3) and kept["k=8"].disturbed == 1
    assert kept["k=4"].undisturbed == 1 and kept["k=8"].undisturbed == 0
    # the k sweep recommends none whose every run other work disturbed
    from app.engine.measure.sweep import k_sweep_from_records
    fast_but_busy = [rec("off", 50, 0.0), rec("k=4", 70, 0.0), rec("k=8", 90, 1.2)]
    assert k_sweep_from_records(fast_but_busy).recommended_k == 4
    every = {s.label: s for s in summarize(runs, ["off", "k=4", "k=8"])}
    assert every["k=4"].decode_tps_median == pytest.approx(36)  # both runs, as before

"""The chat service without Qt: one job at a time, a bounded queue, cancel per job,
events to iterate or subscribe to, every failure a value — on a fake engine and on a
real (synthetic) model."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.chat.events import (
    JobDone,
    JobFailed,
    JobStarted,
    JobWaiting,
    LoadProgressed,
    ModelInfo,
    ReplyStats,
    ReplyStreamed,
)
from app.chat.service import ChatService, JobError, QueueFullError
from app.engine.chat import ChatMessage
from app.engine.reply import ReplyRecord
from app.engine.session import SessionConfig
from app.errors import ModelLoadError, TandemError
from app.options import SamplingParams, SpecMode, SpeculationConfig
from tests.chat.fakes import Script, fake_service
from tests.synthetic import write_header_only

SAMPLING = SamplingParams(temperature=0.0, max_tokens=50)
LOOKUP = SpeculationConfig(mode=SpecMode.PROMPT_LOOKUP)
HELLO = (ChatMessage("user", "hello"),)


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
def service(script: Script, tmp_path: Path) -> Iterator[ChatService]:
    s = fake_service(script)
    s.load(SessionConfig(target_path=tmp_path / "fake.gguf")).wait(30)
    yield s
    s.shutdown()
    assert not s._thread.is_alive()


def test_a_reply_streams_batches_then_ends_with_its_value(service: ChatService,
                                                           script: Script) -> None:
    script.replies = ["one two three four five"]
    job = service.reply(HELLO, SAMPLING, LOOKUP, batch_s=0.0)
    events = list(job.events(timeout=30))
    assert isinstance(events[0], JobStarted) and events[0].kind == "reply"
    assert isinstance(events[-1], JobDone) and job.outcome is events[-1]
    streamed = [d for e in events if isinstance(e, ReplyStreamed) for d in e.deltas]
    assert "".join(d.text for d in streamed) == "one two three four five"
    assert [d.from_draft for d in streamed] == [False, True, False, True, False]
    assert any(isinstance(e, ReplyStats) for e in events)
    result = job.result()
    assert isinstance(result, ReplyRecord) and result.reason == "stop"
    assert {getattr(e, "job_id", None) for e in events} == {job.id}


def test_jobs_run_one_at_a_time_in_the_order_asked(service: ChatService, script: Script) -> None:
    script.gate = threading.Event()
    script.replies = ["first reply", "second reply", "third reply"]
    window = service.reply(HELLO, SAMPLING, LOOKUP, origin="window")
    assert script.at_gate.wait(30)  # the first reply holds the session at its gate
    api = service.complete("go on", SAMPLING, SpeculationConfig(), origin="api")
    race = service.submit("task", lambda ctx: "ran", origin="race")
    assert service.waiting == 2 and service.running is window
    assert not api.done and not race.done  # queued behind the running reply
    script.gate.set()
    assert window.result(30).text == "first reply"
    assert api.result(30).text == "second reply"
    assert race.result(30) == "ran"
    assert [call[0] for call in script.calls][:1] == [HELLO]


def test_a_waiting_job_knows_its_place_as_the_queue_moves(service: ChatService,
                                                         script: Script) -> None:
    script.gate = threading.Event()
    api = service.complete("go on", SAMPLING, SpeculationConfig(), origin="api")
    assert script.at_gate.wait(30)  # the API reply holds the session
    race = service.submit("task", lambda ctx: "ran", origin="race")
    window = service.reply(HELLO, SAMPLING, LOOKUP, origin="window")
    assert service.ahead_of(window) == (("completion", "api"), ("task", "race"))
    assert service.ahead_of(race) == (("completion", "api"),)
    assert service.ahead_of(api) == ()  # it runs
    script.gate.set()
    events = list(window.events(timeout=30))
    waiting = [e for e in events if isinstance(e, JobWaiting)]
    # when the API reply ended and the race began, the window's reply moved up one place
    assert [w.ahead for w in waiting] == [(("task", "race"),)]
    assert events.index(waiting[0]) < next(
        i for i, e in enumerate(events) if isinstance(e, JobStarted))
    assert service.ahead_of(window) == ()


def test_a_full_queue_refuses_new_jobs_and_queues_nothing(script: Script, tmp_path: Path) -> None:
    service = fake_service(script, queue_limit=1)
    try:
        service.load(SessionConfig(target_path=tmp_path / "fake.gguf")).wait(30)
        script.gate = threading.Event()
        running = service.reply(HELLO, SAMPLING, LOOKUP)
        assert script.at_gate.wait(30)
        waiting = service.reply(HELLO, SAMPLING, LOOKUP)
        with pytest.raises(QueueFullError) as info:
            service.reply(HELLO, SAMPLING, LOOKUP)
        assert info.value.waiting == 1 and isinstance(info.value, TandemError)
        assert service.waiting == 1
        script.gate.set()
        assert running.result(30).reason == "stop"
        assert waiting.result(30).reason == "stop"
    finally:
        service.shutdown()


def test_cancel_stops_the_running_reply_and_a_queued_one_before_it_starts(
        service: ChatService, script: Script) -> None:
    script.gate = threading.Event()
    script.replies = ["kept words after the gate", "never runs"]
    running = service.reply(HELLO, SAMPLING, LOOKUP)
    assert script.at_gate.wait(30)
    queued = service.reply(HELLO, SAMPLING, LOOKUP)
    queued.cancel()
    running.cancel()
    fin = running.result(30)
    assert fin.reason == "cancelled" and fin.text == "kept"  # the text so far is kept
    assert queued.result(30).reason == "cancelled"
    assert queued.result().text == ""


def test_a_waiting_reply_cancelled_ends_at_once_and_the_queue_moves_up(
        service: ChatService, script: Script) -> None:
    """Stop on a reply waiting behind another job: it ends now (no text, ``cancelled``),
    not when the running job ends; the job behind it is told it moved up."""
    script.gate = threading.Event()
    api = service.complete("go on", SAMPLING, SpeculationConfig(), origin="api")
    assert script.at_gate.wait(30)
    window = service.reply(HELLO, SAMPLING, LOOKUP, origin="window")
    later = service.reply(HELLO, SAMPLING, LOOKUP, origin="window")
    window.cancel()
    assert window.done and not script.gate.is_set()  # before the API reply let go
    fin = window.result(0)
    assert (fin.reason, fin.text, fin.request.messages) == ("cancelled", "", tuple(HELLO))
    assert service.ahead_of(later) == (("completion", "api"),)
    script.gate.set()
    assert api.result(30).reason == "stop"
    events = list(later.events(timeout=30))
    assert [e.ahead for e in events if isinstance(e, JobWaiting)] == [(("completion", "api"),)]
    assert later.result(0).reason == "stop"


def test_every_failure_is_a_value_on_the_job_never_an_exception(service: ChatService,
                                                                 script: Script) -> None:
    def broken(_ctx: object) -> None:
        raise ZeroDivisionError("a bug")

    bug = service.submit("task", broken, title="The task failed")
    outcome = bug.wait(30)
    assert isinstance(outcome, JobFailed) and outcome.error.title == "The task failed"
    assert "ZeroDivisionError" in outcome.error.message and outcome.error.detail
    with pytest.raises(JobError) as info:
        bug.result()
    assert info.value.error is outcome.error
    script.fail_after = TandemError("The context window is full.")
    failed = service.reply(HELLO, SAMPLING, LOOKUP).wait(30)
    assert isinstance(failed, JobFailed)
    assert failed.error.message == "The context window is full." and failed.error.detail is None
    # the service goes on
    script.fail_after = None
    assert service.reply(HELLO, SAMPLING, LOOKUP).result(30).reason == "stop"


def test_subscribers_get_every_event_and_a_failing_one_breaks_nothing(
        service: ChatService) -> None:
    seen: list[object] = []
    unsubscribe = service.subscribe(seen.append)
    service.subscribe(lambda _e: 1 / 0)
    job = service.reply(HELLO, SAMPLING, LOOKUP)
    assert job.result(30).reason == "stop"
    assert seen and seen[-1] is job.outcome
    unsubscribe()
    service.reply(HELLO, SAMPLING, LOOKUP).wait(30)
    assert seen[-1] is job.outcome  # nothing after unsubscribing


def test_load_reports_progress_and_a_failed_load_leaves_no_session(script: Script,
                                                                    tmp_path: Path) -> None:
    service = fake_service(script)
    write_header_only(tmp_path / "m.gguf")  # passes the checks made before an unload
    try:
        job = service.load(SessionConfig(target_path=tmp_path / "m.gguf"))
        events = list(job.events(timeout=30))
        assert any(isinstance(e, LoadProgressed) for e in events)
        assert isinstance(job.result(), ModelInfo)
        script.load_error = ModelLoadError("m.gguf is not a GGUF file.")
        failed = service.load(SessionConfig(target_path=tmp_path / "m.gguf")).wait(30)
        assert isinstance(failed, JobFailed) and "not a GGUF" in failed.error.message
        no_model = service.reply(HELLO, SAMPLING, LOOKUP).wait(30)
        assert isinstance(no_model, JobFailed) and "No model is loaded" in no_model.error.message
    finally:
        service.shutdown()


def test_a_cancelled_load_is_a_warning(script: Script, tmp_path: Path) -> None:
    service = fake_service(script)
    try:
        gate = threading.Event()
        blocker = service.submit("task", lambda ctx: gate.wait(30))
        load = service.load(SessionConfig(target_path=tmp_path / "m.gguf"))
        load.cancel()
        gate.set()
        blocker.wait(30)
        outcome = load.wait(30)
        assert isinstance(outcome, JobFailed) and outcome.error.level == "warning"
        assert outcome.error.title == "Loading cancelled"
    finally:
        service.shutdown()


def test_shutdown_ends_every_job_with_a_terminal_event_and_refuses_new_ones(
        service: ChatService, script: Script) -> None:
    script.gate = threading.Event()
    running = service.reply(HELLO, SAMPLING, LOOKUP)
    assert script.at_gate.wait(30)
    queued = service.complete("x", SAMPLING, SpeculationConfig())
    service.shutdown()
    assert running.done and queued.done
    assert running.result().reason == "cancelled"
    assert queued.result().reason == "cancelled"
    with pytest.raises(TandemError, match="shutting down"):
        service.reply(HELLO, SAMPLING, LOOKUP)


def test_a_real_model_goes_through_the_service(tiny_target: Path) -> None:
    service = ChatService()
    try:
        info = service.load(SessionConfig(target_path=tiny_target, n_ctx=256, n_threads=2)).result(120)
        assert info.target_path == tiny_target and info.n_gpu_layers == 0
        job = service.reply(HELLO, SamplingParams(temperature=0.0, max_tokens=8), LOOKUP)
        streamed = "".join(d.text for e in job.events(timeout=120)
                           if isinstance(e, ReplyStreamed) for d in e.deltas)
        fin = job.result()
        assert fin.reason in ("stop", "length") and streamed == fin.text
        assert fin.stats.mode is SpecMode.PROMPT_LOOKUP and fin.stats.emitted == len(fin.token_ids)
        plain = service.complete([1, 300, 301, 302], SamplingParams(temperature=0.0, max_tokens=4),
                                 SpeculationConfig()).result(120)
        assert plain.stats.mode is SpecMode.OFF and plain.stats.decode_tps
    finally:
        service.shutdown()

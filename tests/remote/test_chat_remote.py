"""A remote server through the chat service and the window's controller (no Qt): chat,
stop, regenerate, edit and history as with a local model; a server that is down or
drops a stream gets a clear message and the text already written is kept."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.chat.conversation import ChatController
from app.chat.events import JobDone, JobFailed, ReplyStreamed
from app.engine.reply import ReplyRecord
from app.chat.service import ChatService
from app.options import SamplingParams, SpeculationConfig
from app.remote import RemoteClient
from app.store.history import HistoryStore
from app.store.settings import Settings
from tests.chat.fakes import Pump, RecordingView
from tests.remote.broken_server import BrokenServer
from tests.remote.llama_server import LlamaServer, free_port
from tests.remote.test_llama_server import PROMPT


class Rig:
    """A controller on a real chat service (no local model), its store and view."""

    def __init__(self, tmp_path: Path) -> None:
        self.settings = Settings()
        self.settings.sampling = SamplingParams(temperature=0.0, max_tokens=40)
        self.store = HistoryStore.open(tmp_path / "history.sqlite3")
        self.service = ChatService(warm_up=None)
        self.view = RecordingView()
        self.pump = Pump(self.service)
        self.c = ChatController(self.settings, self.store, self.service, self.view)

    def connect(self, url: str, model: str | None = None) -> None:
        self.c.connect_server(RemoteClient(url), model)
        self.pump.until(self.c, lambda: not self.c.loading)

    def reply_done(self) -> None:
        self.pump.until(self.c, lambda: self.c.reply is None, timeout=120)

    def stored(self) -> list[tuple[str, str, str, str | None]]:
        cid = self.c.current_conversation
        assert cid is not None
        return [(m.role, m.content, m.status, m.finish_reason) for m in self.store.messages(cid)]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path)
    yield r
    r.c.close()


def test_chat_regenerate_edit_and_stop_on_llama_server(rig: Rig,
                                                    fresh_llama_server: LlamaServer) -> None:
    llama_server = fresh_llama_server  # its drafter drafts on PROMPT (see the fixture)
    rig.connect(llama_server.base_url)
    remote = rig.c.remote
    assert remote is not None and remote.info.engine.value == "llama-server", rig.view.errors
    assert rig.settings.remote.base_url == llama_server.base_url
    assert rig.settings.remote.model == remote.model
    assert rig.c.send_message(PROMPT)
    rig.reply_done()
    [(_, question, _, _), (role, text, status, reason)] = rig.stored()
    assert question == PROMPT and role == "assistant" and text and status == "done"
    assert reason in ("stop", "length")
    cid = rig.c.current_conversation
    assert cid is not None
    msg = rig.store.messages(cid)[-1]
    assert msg.stats is not None
    extra = msg.stats["extra"]["remote"]
    assert extra["engine"] == "llama-server" and extra["method"] == "ngram-simple"
    figures = extra["figures"]
    assert figures["draft_tokens"] == msg.stats["proposed"] > 0
    assert figures["accepted"] == msg.stats["accepted"]
    assert figures["scope"] == "request"
    assert msg.stats["emitted"] > 0 and extra["decode_tps"] > 0
    # regenerate: the reply is replaced, the question stays
    assert rig.c.regenerate()
    rig.reply_done()
    assert [m[0] for m in rig.stored()] == ["user", "assistant"]
    # edit: the question and everything after it are replaced
    user_id = rig.store.messages(cid)[0].id
    assert rig.c.begin_edit(user_id) == PROMPT
    assert rig.c.send_message("Say hello.")
    rig.reply_done()
    assert [m[1] for m in rig.stored()][0] == "Say hello."
    # stop while streaming: the text so far is kept as a cancelled reply
    rig.settings.sampling = SamplingParams(temperature=0.0, max_tokens=400)
    assert rig.c.send_message("Write a long story about a lighthouse keeper.")
    reply = rig.c.reply
    assert reply is not None
    rig.pump.until(rig.c, lambda: bool(reply.text), timeout=120)
    rig.c.stop_reply()
    rig.reply_done()
    last = rig.stored()[-1]
    assert last[0] == "assistant" and last[1] and last[3] == "cancelled"
    assert len(last[1]) >= len(reply.text) > 0


def test_measurement_jobs_need_a_local_model(rig: Rig, broken: BrokenServer) -> None:
    broken.mode = "ok"
    rig.connect(broken.base_url)
    assert rig.c.remote is not None and rig.c.remote.info.engine.value == "openai-compatible"
    assert not rig.c.can_race()
    assert "Racing needs a local model" in rig.view.errors[-1].title
    job = rig.service.complete("hi", SamplingParams(), SpeculationConfig())
    outcome = job.wait(30)
    assert not isinstance(outcome, JobDone)
    assert "need a model loaded in Tandem" in outcome.error.message


def test_continue_needs_a_server_that_can(rig: Rig, broken: BrokenServer) -> None:
    """An OpenAI-compatible server of unknown make would answer a reply's start as a
    finished message: Continue says it cannot (the history is left as it was), and the
    service refuses a continuation too."""
    from app.engine.chat import ChatMessage

    broken.mode = "ok"
    rig.connect(broken.base_url)
    rig.settings.sampling = SamplingParams(temperature=0.0, max_tokens=1)
    assert rig.c.send_message("hello")
    rig.reply_done()
    before = rig.stored()
    assert before[-1][3] == "length"
    assert not rig.c.continue_reply()
    assert rig.view.errors[-1].title == "Not with this server" and rig.stored() == before
    assert "This server (openai-compatible) cannot continue" in rig.view.errors[-1].message
    # the reply's request carried the window's sampling as the CLI sends it
    body = broken.last_body
    assert (body["max_tokens"], body["temperature"], body["top_k"], body["min_p"],
            body["repeat_penalty"]) == (1, 0.0, 40, 0.05, 1.0)
    assert "seed" not in body and "continue_final_message" not in body
    job = rig.service.reply([ChatMessage("user", "hello")], SamplingParams(),
                            SpeculationConfig(), continuation="Hel")
    outcome = job.wait(30)
    assert not isinstance(outcome, JobDone)
    assert "cannot continue a reply" in outcome.error.message


def test_continue_on_llama_server_goes_on_from_the_reply(
        rig: Rig, llama_server: LlamaServer) -> None:
    """llama-server continues a reply cut at its token limit (the reply's start sent as
    the last, assistant message with ``continue_final_message``): counting, cut after a
    few numbers, the continued reply goes on with the next ones (a new answer would
    count from 1 again). Not compared with one longer greedy reply: llama-server's
    prompt cache changes SmolLM2's greedy text on some builds (see conftest)."""
    rig.connect(llama_server.base_url)
    rig.settings.sampling = SamplingParams(temperature=0.0, max_tokens=12)
    assert rig.c.send_message("Count from 1 to 30, separated by commas.")
    rig.reply_done()
    cut = rig.stored()[-1]
    counted = [int(n) for n in re.findall(r"\d+", cut[1])]
    assert cut[3] == "length" and counted and counted == sorted(counted), cut
    rig.settings.sampling = SamplingParams(temperature=0.0, max_tokens=24)
    assert rig.c.continue_reply()
    rig.reply_done()
    continued = rig.stored()[-1][1]
    numbers = [int(n) for n in re.findall(r"\d+", continued)]
    assert continued.startswith(cut[1]) and max(numbers) > max(counted) + 1, continued
    assert numbers == sorted(numbers), continued  # no second count from 1
    assert [m[0] for m in rig.stored()] == ["user", "assistant"]


def test_a_message_longer_than_the_servers_context_goes_back_to_the_box(
        rig: Rig, llama_server: LlamaServer) -> None:
    """llama-server refuses a conversation past its context (400,
    ``exceed_context_size_error``) before any text: the message leaves the history and
    comes back to the input box, as a local model's refusal does, and the words name the
    server's context."""
    rig.connect(llama_server.base_url)
    assert rig.c.send_message("Say hello.")
    rig.reply_done()
    before = rig.stored()
    long_text = "word " * 2500  # about 2,500 tokens; the server's context is 2,048
    assert rig.c.send_message(long_text)
    rig.reply_done()
    assert rig.stored() == before
    given = [args for name, args in rig.view.calls if name == "message_given_back"]
    assert given and given[-1][2] == long_text, given
    error = rig.view.errors[-1]
    assert error.title == "Not sent", error
    assert "refused the conversation as too long for its context" in error.message, error.message
    assert "Your message is back in the box." in error.message


def test_a_dropped_stream_keeps_the_text_and_says_why(rig: Rig, broken: BrokenServer) -> None:
    broken.mode = "ok"
    rig.connect(broken.base_url)
    broken.mode = "drop-close"
    assert rig.c.send_message("hi")
    rig.reply_done()
    assert rig.stored()[-1] == ("assistant", "Hello, world", "done", "error")
    assert "ended the stream before the reply was complete" in rig.view.errors[-1].message
    # the server comes back: the conversation goes on
    broken.mode = "ok"
    assert rig.c.send_message("again")
    rig.reply_done()
    assert rig.stored()[-1] == ("assistant", "Hello, world", "done", "stop")


def test_a_server_that_is_down_is_said_clearly(rig: Rig) -> None:
    rig.connect(f"http://127.0.0.1:{free_port()}")
    assert rig.c.remote is None and rig.c.model_info is None
    assert "Cannot reach" in rig.view.errors[-1].message


def test_a_server_that_cannot_be_used_keeps_what_was_connected(rig: Rig,
                                                                broken: BrokenServer) -> None:
    """Connecting fails before anything is unloaded: the server in use stays in use, in
    the window and in the service."""
    broken.mode = "ok"
    rig.connect(broken.base_url)
    before = rig.c.remote
    assert before is not None
    rig.connect(f"http://127.0.0.1:{free_port()}")
    assert "Cannot reach" in rig.view.errors[-1].message
    assert rig.c.remote == before and rig.c.model_info is not None
    assert rig.c.send_message("hi")
    rig.reply_done()
    assert rig.stored()[-1][1:3] == ("Hello, world", "done")


def test_the_models_window_switches_back_from_a_server_whose_model_is_a_path(
        rig: Rig, broken: BrokenServer) -> None:
    """llama-server names its model by the GGUF path it was started with: choosing that
    same file in the Models window loads it here instead of doing nothing."""
    from app.options import SpecMode

    broken.mode = "ok"
    rig.connect(broken.base_url)
    assert rig.c.remote is not None and rig.c.model_info is not None
    same = Path(rig.c.model_info.target_path)  # "broken": the server's model id
    rig.c.use_models(same, None, SpecMode.PROMPT_LOOKUP)
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert "not found" in rig.view.errors[-1].message  # a load of that file was tried
    assert rig.c.remote is not None  # and, refused, it left the server in use


def test_disconnecting_goes_back_to_the_local_model_or_to_none(
        rig: Rig, broken: BrokenServer, smollm_path: Path, tmp_path: Path) -> None:
    """Server → Disconnect loads the local target of the settings again; with its file
    gone the server is closed, no model is loaded, and the window says why."""
    broken.mode = "ok"
    rig.settings.model.target_path = tmp_path / "gone.gguf"
    rig.connect(broken.base_url)
    assert rig.c.remote is not None
    rig.c.disconnect_server()
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert rig.c.remote is None and rig.c.model_info is None
    assert rig.view.errors[-1].title == "Model not found" and "gone.gguf" in rig.view.errors[-1].message
    failed = rig.service.submit("task", lambda ctx: ctx.engine).wait(30)
    assert isinstance(failed, JobFailed) and "No model is loaded" in failed.error.message

    rig.settings.model.target_path = smollm_path
    rig.connect(broken.base_url)
    assert rig.c.remote is not None
    rig.c.disconnect_server()
    rig.pump.until(rig.c, lambda: not rig.c.loading, timeout=120)
    assert rig.c.remote is None and rig.c.model_info is not None
    assert rig.c.model_info.target_path == smollm_path


def test_the_window_follows_the_drafter_a_reply_found(rig: Rig, broken: BrokenServer) -> None:
    """A reply that found the server speculating (it was restarted with a drafter) updates
    what the window holds about it, so the bar and the next reply's gauge name it."""
    broken.mode = "ok"
    rig.connect(broken.base_url)
    assert rig.c.remote is not None and rig.c.remote.info.speculation_method is None
    rig.c._follow_remote_drafter({"method": "ngram-simple", "draft_max": 16})
    assert rig.c.remote is not None
    assert (rig.c.remote.info.speculation_method, rig.c.remote.info.draft_max) == (
        "ngram-simple", 16)


def test_text_before_a_failure_reaches_the_consumer(broken: BrokenServer) -> None:
    """The service sends the text it holds before a failure leaves (not only at its
    30 ms batch ticks), so a consumer has all of it."""
    service = ChatService(warm_up=None)
    try:
        broken.mode = "ok"
        service.connect(RemoteClient(broken.base_url)).result(30)
        broken.mode = "garbage"
        from app.engine.chat import ChatMessage

        job = service.reply([ChatMessage("user", "hi")], SamplingParams(), SpeculationConfig(),
                            batch_s=3600.0)
        events = list(job.events(timeout=30))
        text = "".join(d.text for e in events if isinstance(e, ReplyStreamed) for d in e.deltas)
        assert text == "Hello, world"
        assert not isinstance(events[-1], JobDone)
        broken.mode = "ok"
        done = service.reply([ChatMessage("user", "hi")], SamplingParams(),
                             SpeculationConfig()).result(30)
        assert isinstance(done, ReplyRecord) and done.text == "Hello, world"
        assert done.note is not None and "nothing about speculation" in done.note
    finally:
        service.shutdown()


def test_a_server_past_max_tokens_is_cut_off_and_the_reply_says_so(rig: Rig,
                                                                     broken: BrokenServer) -> None:
    """The server writes without end: the reply stops at max tokens (40 chunks here),
    is saved as ended by length, and its record's note says the server kept writing."""
    broken.mode = "ok"
    rig.connect(broken.base_url)
    broken.mode = "endless"
    assert rig.c.send_message("hi")
    rig.reply_done()
    role, text, status, reason = rig.stored()[-1]
    assert (role, status, reason) == ("assistant", "done", "length")
    assert text == "Hello, world" + " word" * 38
    [record] = [e.value for e in rig.pump.seen
                if isinstance(e, JobDone) and isinstance(e.value, ReplyRecord)]
    assert record.note is not None and record.note.startswith(
        "The server kept writing past the 40 tokens asked for (max tokens)")
    broken.mode = "ok"


def test_continue_is_offered_by_the_servers_that_read_continue_final_message() -> None:
    from app.remote.client import Engine, ServerInfo

    def info(engine: Engine, version: str | None = None) -> ServerInfo:
        return ServerInfo(base_url="http://h", engine=engine, version=version, models=())

    assert info(Engine.LLAMA_SERVER, "b1-0c1e570").can_continue
    assert info(Engine.TANDEM).can_continue and info(Engine.VLLM).can_continue
    assert info(Engine.VLLM, "0.6.3").can_continue and info(Engine.VLLM, "0.11.0").can_continue
    assert not info(Engine.VLLM, "0.6.2").can_continue  # before the field
    assert not info(Engine.OLLAMA).can_continue and not info(Engine.OPENAI_COMPATIBLE).can_continue

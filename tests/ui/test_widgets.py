"""Fast UI tests (no model): Markdown rendering, input keys, gauge throttling, the window's
error reporting, settings and conversation management, and the QThread-leak guard."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt, QThread
from PySide6.QtWidgets import QApplication, QLabel, QToolTip

from app.engine.stats import SpecStats
from app.options import SamplingParams, SpecMode, SpeculationConfig
from app.store import paths
from app.store.history import HistoryStore
from app.store.settings import (
    SCHEMA_VERSION,
    LoadedSettings,
    Settings,
    load_settings,
    save_settings,
)
from app.ui.chat.chat_view import MessageView, MessageWidget
from app.ui.chat.footer import reply_footer
from app.ui.chat.input_box import ChatInputWidget
from app.ui.chat.markdown_render import render_markdown
from app.ui.gauge.gauge_panel import (
    MIN_LABEL_SIZE,
    REFRESH_MS,
    AcceptanceBarsWidget,
    SpeculationGaugeWidget,
    bar_labels,
)
from app.ui.gauge.rolling import RollingRate
from app.ui.model_bar import ModelBarWidget
from tests.ui.conftest import running_threads

REPO = Path(__file__).resolve().parents[2]


# -- Markdown -------------------------------------------------------------------------
def test_markdown_escapes_raw_html_and_renders_no_images() -> None:
    r = render_markdown('<script>alert(1)</script> <img src="file:///etc/passwd"> ![x](http://e/x.png)')
    assert "<script>" not in r.html and "&lt;script&gt;" in r.html
    assert "<img" not in r.html
    # a link's title would be the chat view's tooltip, which Qt draws as HTML: dropped
    titled = render_markdown('[x](https://e.com "<h1>BIG</h1><img src=/etc/x.png>")\n\n'
                             '[y][r]\n\n[r]: https://a.b "T2"')
    assert "title" not in titled.html and 'href="https://e.com"' in titled.html


def test_markdown_code_blocks_are_highlighted_with_copy_links() -> None:
    text = "Intro **bold**\n\n```python\ndef f():\n    return 1\n```\n\nand\n\n~~~\nplain <b>\n~~~\n"
    r = render_markdown(text)
    assert r.code_blocks == ("def f():\n    return 1", "plain <b>")
    assert 'href="copy:0"' in r.html and 'href="copy:1"' in r.html
    assert "<strong>bold</strong>" in r.html
    assert "color: #008000" in r.html  # pygments styled the keyword
    assert "plain &lt;b&gt;" in r.html


def test_unclosed_fence_while_streaming_is_a_code_block() -> None:
    r = render_markdown("Here:\n```bash\necho hi")
    assert r.code_blocks == ("echo hi",)
    assert "copy:0" in r.html


def test_reply_footer() -> None:
    stats = SpecStats(mode="prompt-lookup", draft_max=4, emitted=24, rounds=8, verified=16,
                      accepted=12, decode_time=1.0).to_dict()
    line = reply_footer(stats, "cancelled", "note here")
    assert "24 tokens" in line and "24.0 tok/s" in line and "prompt lookup k=4" in line
    assert "α 75%" in line and "τ 3.00" in line and "stopped" in line and "note here" in line
    plain = reply_footer(SpecStats(emitted=5, rounds=5, decode_time=0.5).to_dict(), "stop")
    assert "no speculation" in plain and "α" not in plain
    auto = {**stats, "mode": "suffix", "auto": {"mode": "suffix", "reason": "estimate"}}
    assert "Auto: suffix lookup k=4" in reply_footer(auto, "stop")


def test_the_thread_count_is_shown_at_load_and_under_each_reply() -> None:
    """The governor changes the thread count between rounds: the status bar says what the
    model loaded with and whether Auto follows the free cores, each reply's footer what
    it ended with."""
    from app.chat.events import ModelInfo
    from app.ui.panels import status_text

    one = SpecStats(emitted=5, rounds=5, decode_time=0.5, n_threads=1).to_dict()
    assert "· 1 CPU thread ·" in reply_footer(one, "stop")
    two = SpecStats(emitted=5, rounds=5, decode_time=0.5, n_threads=2).to_dict()
    assert "· 2 CPU threads ·" in reply_footer(two, "stop")
    unknown = SpecStats(emitted=5, rounds=5, decode_time=0.5).to_dict()  # remote, or older
    assert "thread" not in reply_footer(unknown, "stop")
    info = ModelInfo(Path("m.gguf"), "m", None, None, 4096, 18, 0, False, None, False, 1.0,
                     n_threads=2, threads_auto=True)
    assert "CPU only · 2 CPU threads at load (Auto)" in status_text(
        info, loading=False, generating=False)
    fixed = status_text(dataclasses.replace(info, n_threads=1, threads_auto=False),
                        loading=False, generating=False)
    assert fixed.endswith("· 1 CPU thread at load (fixed)")


# -- widgets --------------------------------------------------------------------------
def test_input_enter_sends_and_shift_enter_adds_a_line(qtbot) -> None:
    box = ChatInputWidget()
    qtbot.addWidget(box)
    sent: list[bool] = []
    box.submitted.connect(lambda: sent.append(True))
    qtbot.keyClick(box, Qt.Key.Key_Return)
    assert sent == []  # nothing to send
    qtbot.keyClicks(box, "line one")
    qtbot.keyClick(box, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(box, "line two")
    assert box.toPlainText() == "line one\nline two" and sent == []
    qtbot.keyClick(box, Qt.Key.Key_Return)
    assert sent == [True]


def test_code_block_copy_link_copies_the_code(qtbot) -> None:
    w = MessageWidget(MessageView(1, "assistant", "Try:\n```python\nprint('hi')\n```"), tint=True)
    qtbot.addWidget(w)
    assert w.code_blocks == ("print('hi')",)
    w.body.copy_clicked.emit(0)
    assert QApplication.clipboard().text() == "print('hi')"
    w._copy.click()
    assert QApplication.clipboard().text() == w.text


def test_rolling_rate() -> None:
    r = RollingRate(window=1.0)
    assert r.rate() is None
    for i in range(30):
        r.add(i * 0.1, i * 2)  # 20 tokens/s
    assert r.rate() == pytest.approx(20.0)
    r.add(3.0, 100)  # a burst at the end
    assert r.rate() > 20.0
    with pytest.raises(ValueError):
        RollingRate(0)


def test_the_rolling_rate_falls_while_nothing_arrives() -> None:
    """A server that stalls mid-reply: past one window of silence, the silence counts,
    so the live rate falls instead of holding its last value."""
    now = [0.0]
    r = RollingRate(window=1.0, clock=lambda: now[0])
    for i in range(11):
        now[0] = i * 0.1
        r.add(i * 0.1, i * 2)  # 20 tokens/s
    assert r.rate() == pytest.approx(20.0)
    now[0] = 1.5  # half a second of silence: within the window, unchanged
    assert r.rate() == pytest.approx(20.0)
    now[0] = 1.0 + 1.0 + 9.0  # ten seconds of silence: 20 tokens over 1 + 9 s
    assert r.rate() == pytest.approx(2.0) and r.silence() == pytest.approx(10.0)


def test_every_gauge_figure_says_what_it_means_before_how_it_is_computed(qtbot) -> None:
    from app.ui.gauge.gauge_panel import GAUGE_ROWS

    g = SpeculationGaugeWidget()
    qtbot.addWidget(g)
    assert g.tps_label.toolTip().startswith("Tokens per second")  # the big number too
    for key, _name, tip in GAUGE_ROWS:
        first = tip.split(": ")[0].split(". ")[0]
        # the first clause is words, not a formula (no ÷ or /, no α τ c definitions)
        assert "/" not in first and "÷" not in first and "E(" not in first, key
    tips = dict((k, t) for k, _n, t in GAUGE_ROWS)
    assert "α can be 100% while few tokens came from drafts" in tips["alpha"]
    assert "catch-up" in tips["cost"]


def test_the_gauge_says_how_full_the_context_was(qtbot) -> None:
    """Context used: the reply's prompt and its own tokens of the window it ran in; a
    dash where the window is not known (stored before it was recorded, a server's)."""
    from app.ui.gauge.gauge_panel import context_text

    s = SpecStats(prompt_tokens=1000, emitted=234, n_ctx=4096)
    assert context_text(s) == "1,234 / 4,096 tokens (30%)"
    full = SpecStats(prompt_tokens=500, emitted=13, n_ctx=512)  # its last token not kept
    assert context_text(full) == "512 / 512 tokens (100%)"
    assert context_text(SpecStats(prompt_tokens=1000, emitted=234)) == "—"
    assert SpecStats.from_dict(s.to_dict()).n_ctx == 4096  # kept with the reply
    g = SpeculationGaugeWidget()
    qtbot.addWidget(g)
    g.begin_reply(None, 0)
    g.end_reply(s)
    assert g.value_text("context") == "1,234 / 4,096 tokens (30%)"


def test_gauge_repaints_at_most_ten_times_a_second(qtbot) -> None:
    g = SpeculationGaugeWidget()
    qtbot.addWidget(g)
    g.begin_reply("prompt-lookup", 4)
    g.repaints = 0
    ticks: list[None] = []
    g._timer.timeout.connect(lambda: ticks.append(None))  # the repaint timer's periods
    t0 = time.monotonic()
    n = 0
    # 6 timer periods with 20 updates in each, however long the machine takes for them:
    # the panel repaints at most once per period, never once per update
    for _ in range(6):
        for _ in range(20):
            n += 1
            g.set_stats(SpecStats(mode="prompt-lookup", draft_max=4, emitted=n, rounds=n,
                                  verified=n, accepted=n // 2, decode_time=n / 40,
                                  accepted_at=(n // 2, 0, 0, 0), verified_at=(n, 0, 0, 0)))
            g.add_tokens(n / 40, n)
            QApplication.processEvents()
        with qtbot.waitSignal(g._timer.timeout, timeout=10_000):
            pass
    elapsed = time.monotonic() - t0
    assert n > 100
    assert 1 <= g.repaints <= len(ticks)
    assert g.repaints <= elapsed * 1000 / REFRESH_MS + 1
    assert g.value_text("alpha").startswith("5")  # ~50 %
    assert g.bars.rates[0] == pytest.approx(0.5, abs=0.02)


def test_gauge_measured_speedup_is_against_plain_steps_of_the_same_moment(qtbot) -> None:
    g = SpeculationGaugeWidget()
    qtbot.addWidget(g)
    # 60 tokens in 1.0 s of decoding: 60 tok/s; plain one-token passes of 20 ms (19–21 ms
    # their spread) timed in this reply: 50 tok/s, so 60 × 0.020 = 1.20× (1.14–1.26)
    spec = SpecStats(mode="prompt-lookup", draft_max=4, emitted=60, rounds=20,
                     draft_rounds=20, verified=40, accepted=40, decode_time=1.0)
    g.end_reply(spec)
    assert g.value_text("measured") == "— (no plain step was timed under these conditions)"
    timed = dataclasses.replace(spec, plain_step_time=0.020, plain_step_range=(0.019, 0.021),
                                plain_step_source="reply")
    g.end_reply(timed)
    assert g.value_text("measured") == "1.20×  (1.14–1.26; plain 50 tok/s, timed in this reply)"
    recent = dataclasses.replace(timed, plain_step_source="recent", plain_step_range=None)
    g.end_reply(recent)
    assert g.value_text("measured") == "1.20×  (plain 50 tok/s, timed just before, same load)"
    # one rejected draft and a baseline of another moment gave "11.04×": no figure now
    few = dataclasses.replace(timed, draft_rounds=1, verified=1, accepted=0)
    g.end_reply(few)
    assert g.value_text("measured") == ("— (too few drafts to measure: 1 drafting rounds, "
                                        "1 draft tokens)")
    g.end_reply(SpecStats(mode="off", emitted=60, rounds=60, decode_time=1.0))
    assert g.value_text("measured") == "1× (off)"


def test_gauge_shows_the_replys_own_drafter_and_k(qtbot) -> None:
    """A request of another client (the API) may choose its own speculation: the gauge
    shows what the reply's statistics say, not the window's settings."""
    g = SpeculationGaugeWidget()
    qtbot.addWidget(g)
    g.begin_reply(None, 0, source="API traffic · chat request")
    g.refresh()
    assert g.mode_label.text().startswith("Starting…")
    g.set_stats(SpecStats(mode="suffix", draft_max=12, adaptive=False,
                          accepted_at=(0,) * 12, verified_at=(0,) * 12))
    g.refresh()
    assert g.mode_label.text().startswith("Suffix lookup · k = 12")
    g.end_reply(SpecStats(mode="suffix", draft_max=12, adaptive=True,
                          accepted_at=(0,) * 12, verified_at=(0,) * 12))
    assert g.mode_label.text().startswith("Suffix lookup · k ≤ 12 (adaptive)")


# -- the window without a model -------------------------------------------------------
def _window(qtbot, loaded: LoadedSettings | None = None):  # type: ignore[no-untyped-def]
    from app.ui.main_window import MainWindow

    w = MainWindow(loaded, autoload=True)
    qtbot.addWidget(w)
    w.show()
    return w


def test_the_window_fits_a_small_screen(qtbot) -> None:
    """The side panel's tabs and the welcome page scroll instead of setting the window's
    minimum size, so the window fits a 1024 × 768 screen with room to spare."""
    w = _window(qtbot)
    try:
        assert w.stack.currentWidget() is w.welcome_page
        hint = w.minimumSizeHint()
        assert hint.width() <= 920 and hint.height() <= 400, hint
        w.side_tabs.setCurrentWidget(w.sampling_panel)
        assert w.side_tabs.currentIndex() == 1
        w.resize(1024, 600)
        qtbot.waitUntil(lambda: w.height() == 600, timeout=5000)
        area = w.side_tabs.currentWidget()
        assert area.verticalScrollBar().maximum() > 0  # the Sampling tab scrolls
        assert w.sampling_panel.width() <= area.viewport().width()  # never sideways
    finally:
        w.close()


def test_first_run_offers_the_demo_model_and_open_gguf(qtbot) -> None:
    w = _window(qtbot)
    try:
        assert w.stack.currentWidget() is w.welcome_page
        assert w.welcome.demo_button.isVisibleTo(w) and w.welcome.open_button.isVisibleTo(w)
        assert not w.send_button.isEnabled()
        assert w.message_bar.current is None
        # the three panes are laid out: conversations, chat, and the gauge/sampling tabs
        assert [w.splitter.widget(i) for i in (0, 2)] == [w.conversations, w.side_tabs]
        assert w.gauge.isVisibleTo(w) and min(w.splitter.sizes()) > 0
    finally:
        w.close()


def test_corrupt_settings_file_is_reported_in_the_window(qtbot) -> None:
    paths.settings_path().write_text('{"schema_version": 1, "sampling": {"top_p": 7}')
    w = _window(qtbot)
    try:
        err = w.message_bar.current
        assert err is not None and err.level == "warning" and err.title == "Settings reset"
        assert "not valid JSON" in err.message and "Default settings are in use" in err.message
        assert w.message_bar.isVisibleTo(w)
        assert w.settings == Settings()
    finally:
        w.close()
    assert load_settings().problem is None  # the defaults were saved on close


def test_a_file_that_is_not_gguf_gives_a_clear_message(qtbot, tmp_path: Path) -> None:
    bad = tmp_path / "notes.gguf"
    bad.write_text("hello, I am not a model")
    w = _window(qtbot)
    try:
        w.controller.load_model(bad)
        assert w.model_bar.progress.isVisibleTo(w) or w.message_bar.current is not None
        qtbot.waitUntil(lambda: w.message_bar.current is not None, timeout=30_000)
        err = w.message_bar.current
        assert err.title == "Could not load notes.gguf"
        assert "not a GGUF file" in err.message and "Traceback" not in err.message
        assert w.controller.model_info is None and not w.controller.loading
        assert not w.model_bar.progress.isVisibleTo(w)
        assert w.message_bar.text.text() == err.message
    finally:
        w.close()


def test_a_message_replaced_by_another_of_another_origin_waits_its_turn(qtbot) -> None:
    """The API that could not start, then a draft's warning: the error is not lost; it
    waits ("1 more") and comes back when the warning is dismissed or no longer applies."""
    from app.chat.events import UserError
    from app.ui.panels import MessageBarWidget

    bar = MessageBarWidget()
    qtbot.addWidget(bar)
    bar.show()
    api = UserError("Could not serve the API", "port taken", origin="api")
    draft = UserError("This draft may not speed replies up", "…", "warning", origin="draft")
    bar.show_error(api)
    assert not bar.more.isVisibleTo(bar)
    bar.show_error(draft)
    assert bar.current is draft and bar.more.text() == "1 more"
    bar.show_error(UserError("Draft", "newer", "warning", origin="draft"))  # replaces it
    assert bar.current.message == "newer" and bar.more.text() == "1 more"
    bar.clear()  # ✕
    assert bar.current is api and bar.isVisible() and not bar.more.isVisibleTo(bar)
    bar.show_error(draft)
    bar.clear_origin("draft")  # a draft loaded fine after all
    assert bar.current is api
    bar.show_error(draft)
    bar.clear_origin("api")  # the waiting one no longer applies either
    assert bar.current is draft and not bar.more.isVisibleTo(bar)
    bar.clear()
    assert bar.current is None and not bar.isVisible()


def test_missing_model_from_settings_is_reported(qtbot, tmp_path: Path) -> None:
    s = Settings()
    s.model.target_path = tmp_path / "gone.gguf"
    w = _window(qtbot, LoadedSettings(s))
    try:
        assert w.message_bar.current is not None
        assert w.message_bar.current.title == "Model not found"
        assert not w.controller.loading
    finally:
        w.close()


def test_conversations_rename_delete_search_and_system_prompt_persist(qtbot) -> None:
    store = HistoryStore.open()
    a = store.create_conversation()
    store.add_user_message(a.id, "about foxes")
    b = store.create_conversation()
    store.add_user_message(b.id, "about owls")
    store.close()
    w = _window(qtbot)
    try:
        assert w.conversations.ids() == [b.id, a.id]
        w.conversations.list.setCurrentRow(1)
        assert w.controller.current_conversation == a.id
        assert [m.text for m in w.chat.messages] == ["about foxes"]
        assert w.stack.currentWidget() is w.chat

        item = w.conversations.list.item(1)
        item.setText("Foxes")  # what an inline edit does
        qtbot.waitUntil(lambda: "Foxes" in w.conversations.titles())

        w.conversations.search.setText("owl")
        qtbot.waitUntil(lambda: w.conversations.ids() == [b.id])
        w.conversations.search.clear()
        qtbot.waitUntil(lambda: len(w.conversations.ids()) == 2)

        w.system_prompt.toggle.setChecked(True)
        w.system_prompt.editor.setPlainText("You are a fox expert.")
        w.system_prompt.flush()
        w.controller.delete_conversation(b.id)
        assert w.conversations.ids() == [a.id]
    finally:
        w.close()
    store = HistoryStore.open()
    try:
        assert store.conversation(a.id).title == "Foxes"
        assert store.conversation(a.id).system_prompt == "You are a fox expert."
        assert not store.has_conversation(b.id)
    finally:
        store.close()
    assert load_settings().settings.ui.last_conversation_id == a.id


def test_sampling_and_speculation_settings_persist(qtbot) -> None:
    w = _window(qtbot)
    try:
        w.sampling_panel.temperature.setValue(0.3)
        w.sampling_panel.max_tokens.setValue(77)
        w.sampling_panel.n_ctx.setValue(2048)
        w.sampling_panel.cpu_only.setChecked(True)
        w.model_bar.k_spin.setValue(6)
        w.model_bar.adaptive_box.setChecked(False)
        w.model_bar.mode_combo.setCurrentIndex(w.model_bar.mode_combo.findData("off"))
        # the finer settings the command line has, in the Sampling tab
        w.sampling_panel.draft_min.setValue(2)
        w.sampling_panel.draft_p_min.setValue(0.4)
        w.sampling_panel.ngram_max.setValue(6)
        w.gauge.tint_box.setChecked(False)
        qtbot.waitUntil(lambda: load_settings().settings.sampling.max_tokens == 77, timeout=3000)
    finally:
        w.close()
    s = load_settings().settings
    assert s.sampling.temperature == pytest.approx(0.3)
    assert s.model.n_ctx == 2048 and s.model.n_gpu_layers == 0
    assert s.speculation.mode == "off" and s.speculation.draft_max == 6
    assert s.speculation.adaptive is False
    assert (s.speculation.draft_min, s.speculation.draft_p_min, s.speculation.ngram_max) == (
        2, pytest.approx(0.4), 6)
    assert w.model_bar.speculation() == s.speculation  # both widgets hold the one config
    assert s.ui.tint_drafts is False and s.ui.window_geometry and s.ui.splitter_state


def test_the_ngram_sizes_move_together_in_the_sampling_tab(qtbot) -> None:
    """A maximum set below the minimum takes the minimum with it (and the reverse), so
    what the spin boxes show is what the next reply uses."""
    w = _window(qtbot)
    try:
        panel = w.sampling_panel
        panel.ngram_min.setValue(2)
        panel.ngram_max.setValue(4)
        panel.ngram_min.setValue(5)
        assert (panel.ngram_min.value(), panel.ngram_max.value()) == (5, 5)
        panel.ngram_max.setValue(3)
        assert (panel.ngram_min.value(), panel.ngram_max.value()) == (3, 3)
        spec = panel.speculation()
        assert (spec.ngram_min, spec.ngram_max) == (3, 3)
    finally:
        w.close()


def test_bar_labels_never_run_into_each_other_at_large_k(qtbot) -> None:
    # wide slots: values at the font's size, every position numbered
    assert bar_labels(40.0, 20.0, 10.0, 9.0) == (9.0, 1)
    # 16 bars in a narrow panel: values shrink to fit, numbers every other bar
    size, step = bar_labels(18.0, 20.0, 12.0, 9.0)
    assert size is not None and MIN_LABEL_SIZE <= size < 9.0 and 20.0 * size / 9.0 <= 18.0
    assert step == 1 and bar_labels(14.0, 20.0, 12.0, 9.0)[1] == 2
    # k = 64: too narrow for any value; the tooltip carries them
    assert bar_labels(4.0, 20.0, 12.0, 9.0) == (None, 4)
    bars = AcceptanceBarsWidget()
    qtbot.addWidget(bars)
    bars.resize(300, 74)
    bars.set_positions([9] * 16, [10] * 15 + [0])
    image = bars.grab().toImage()
    drawn = {image.pixelColor(x, 50).name() for x in range(300)}
    assert "#f0a63a" in drawn  # the bars, in the gauge's draft colour
    tip = bars.toolTip().splitlines()
    assert len(tip) == 15 and tip[0] == "position 1: 90% accepted (9 of 10)"


def test_k_at_the_drafters_default_follows_the_drafter_and_a_chosen_k_stays(qtbot) -> None:
    bar = ModelBarWidget()
    qtbot.addWidget(bar)
    seen: list[SpeculationConfig] = []
    bar.speculation_changed.connect(seen.append)
    bar.set_speculation(SpeculationConfig(mode="prompt-lookup"))
    assert bar.k_spin.value() == 16
    pick = bar.mode_combo.findData
    bar.mode_combo.setCurrentIndex(pick("draft-model"))
    assert bar.k_spin.value() == 4 and [s.draft_max for s in seen] == [4]  # one signal
    bar.mode_combo.setCurrentIndex(pick("suffix"))
    assert bar.k_spin.value() == 16 and seen[-1].mode == "suffix"
    bar.k_spin.setValue(9)
    bar.mode_combo.setCurrentIndex(pick("draft-model"))
    assert bar.k_spin.value() == 9 and seen[-1].draft_max == 9  # the user's k is kept


# -- the QThread guard ----------------------------------------------------------------
def test_thread_guard_sees_running_threads(no_dangling_qthreads) -> None:  # type: ignore[no-untyped-def]
    t = QThread()
    t.start()
    try:
        assert running_threads(no_dangling_qthreads) == [t]
    finally:
        t.quit()
        t.wait()
    assert running_threads(no_dangling_qthreads) == []


def test_thread_guard_fails_a_leaking_test(tmp_path: Path) -> None:
    leak = tmp_path / "test_leak.py"
    leak.write_text(
        "from PySide6.QtCore import QThread\n"
        "keep = []\n"
        "def test_leaks(qtbot):\n"
        "    t = QThread(); t.setObjectName('leaky'); t.start(); keep.append(t)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO), QT_QPA_PLATFORM="offscreen")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.ui.conftest",
         "--rootdir", str(tmp_path), str(leak)],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "left 1 QThread(s) running: leaky" in out


def test_settings_file_written_by_window_is_valid_json(qtbot) -> None:
    save_settings(Settings())
    w = _window(qtbot)
    w.close()
    data = json.loads(paths.settings_path().read_text())
    assert data["schema_version"] == SCHEMA_VERSION


def test_void_qt_calls_cannot_free_none() -> None:
    """Regression: PySide6 6.12.0 + Python 3.11 aborted after a few thousand void calls."""
    from PySide6.QtCore import QObject

    from app.ui.qt_compat import apply_qt_workarounds

    apply_qt_workarounds()
    o = QObject()
    for _ in range(200_000):  # more than None's natural reference count
        o.setObjectName("x")
    assert sys.getrefcount(None) > 0  # still alive, no "deallocating None" abort

    from PySide6.QtCore import Signal

    class Flagger(QObject):
        flag = Signal(bool)

    f = Flagger()
    f.flag.connect(lambda v: None)
    for i in range(100_000):  # more than True's natural reference count
        f.flag.emit(i % 2 == 0)
    assert sys.getrefcount(True) > 0 and sys.getrefcount(False) > 0


def test_the_gauge_keeps_its_width_when_a_reply_starts_and_ends(qtbot) -> None:
    """The header changes from "● live" to "· last reply"; seen on a new user's screen, the
    side panel widened by its text when a reply ended and narrowed when the next began,
    and the chat column reflowed each time."""
    g = SpeculationGaugeWidget()
    qtbot.addWidget(g)
    g.begin_reply(SpecMode.PROMPT_LOOKUP, 16, adaptive=True)
    g.refresh()
    live = g.minimumSizeHint().width()
    stats = SpecStats(mode=SpecMode.PROMPT_LOOKUP, draft_max=16, emitted=34, rounds=16,
                      verified=21, accepted=18, decode_time=1.0,
                      accepted_at=(11, 7) + (0,) * 14, verified_at=(14, 7) + (0,) * 14)
    g.end_reply(stats)
    assert "last\u00a0reply" in g.mode_label.text()
    assert g.minimumSizeHint().width() == live
    assert live <= 320  # the panel's default width in the window (MainWindow's splitter)


def test_sampling_panel_ranges_and_tooltips_are_the_fields(qtbot) -> None:
    from app.options import SamplingParams, field_schema
    from app.ui.sampling_panel import SPIN_MAX, SamplingSettingsWidget

    panel = SamplingSettingsWidget()
    qtbot.addWidget(panel)
    for name in ("temperature", "min_p", "top_k", "max_tokens"):
        f = field_schema(SamplingParams, name)
        spin = getattr(panel, name)
        assert (spin.minimum(), spin.maximum()) == (f.low, f.high), name
        assert spin.toolTip() == f.description
    for name in ("draft_min", "draft_p_min", "ngram_min", "ngram_max"):
        f = field_schema(SpeculationConfig, name)
        spin = getattr(panel, name)
        assert (spin.minimum(), spin.maximum()) == (f.low, f.high), name
        assert spin.toolTip() == f.description
    # an open lower bound (top_p > 0) starts one shown step above it
    assert panel.top_p.minimum() == pytest.approx(0.01) and panel.top_p.maximum() == 1.0
    assert panel.seed.minimum() == -1 and panel.seed.maximum() == SPIN_MAX  # a C int
    assert panel.suffix_spec_factor.minimum() == pytest.approx(0.01)
    assert panel.suffix_min_prob.toolTip() == field_schema(SpeculationConfig,
                                                           "suffix_min_prob").description
    # the Model box: the settings' fields (threads: 0 is Auto, the setting's None)
    from app.store.settings import ModelSettings
    for name, spin in (("n_ctx", panel.n_ctx), ("prompt_cache_mib", panel.prompt_cache)):
        f = field_schema(ModelSettings, name)
        assert (spin.minimum(), spin.maximum()) == (f.low, f.high), name
        assert spin.toolTip() == f.description and f.description
    assert panel.threads.minimum() == 0 and panel.threads.specialValueText().startswith("Auto")
    assert panel.threads.toolTip() == field_schema(ModelSettings, "n_threads").description


def test_the_details_the_drafter_does_not_read_are_greyed_out(qtbot) -> None:
    """Each drafter's declared options (DrafterInfo.options) stay editable; Auto may use
    any drafter, so all do; with speculation off none does."""
    from app.ui.sampling_panel import SamplingSettingsWidget

    panel = SamplingSettingsWidget()
    qtbot.addWidget(panel)
    names = ("draft_min", "draft_p_min", "ngram_min", "ngram_max", "suffix_spec_factor",
             "suffix_min_prob")

    def enabled(mode: SpecMode) -> set[str]:
        panel.set_speculation(SpeculationConfig(mode=mode))
        return {n for n in names if getattr(panel, n).isEnabled()}

    assert enabled(SpecMode.PROMPT_LOOKUP) == {"draft_min", "ngram_min", "ngram_max"}
    assert enabled(SpecMode.SUFFIX) == {"draft_min", "suffix_spec_factor", "suffix_min_prob"}
    assert enabled(SpecMode.DRAFT_MODEL) == {"draft_min", "draft_p_min"}
    assert enabled(SpecMode.AUTO) == set(names)
    assert enabled(SpecMode.OFF) == set()
    panel.set_speculation(SpeculationConfig(mode=SpecMode.SUFFIX))
    panel.suffix_min_prob.setValue(0.3)
    assert panel.speculation().suffix_min_prob == pytest.approx(0.3)


def test_without_a_gpu_backend_the_gpu_settings_are_greyed_out_and_say_why(qtbot) -> None:
    from app.ui.sampling_panel import SamplingSettingsWidget

    panel = SamplingSettingsWidget()
    qtbot.addWidget(panel)
    assert panel.gpu_layers.isEnabled() and panel.cpu_only.isEnabled()
    panel.gpu_layers.setValue(999)  # all layers
    emitted: list[object] = []
    panel.model_options_changed.connect(lambda *a: emitted.append(a))
    panel.set_gpu_supported(False)
    assert not panel.gpu_layers.isEnabled() and not panel.cpu_only.isEnabled()
    assert panel.cpu_only.isChecked()  # every layer runs on the CPU: the box says so
    assert "no GPU backend" in panel.gpu_layers.toolTip()
    assert emitted == []  # nothing to reload: the settings themselves did not change
    panel.threads.setValue(1)  # another model setting does not re-enable them
    assert not panel.gpu_layers.isEnabled()
    assert emitted[-1][1] is None  # the saved setting (all layers) is kept, not 0
    panel.set_gpu_supported(True)
    assert panel.gpu_layers.isEnabled() and "999 = all" in panel.gpu_layers.toolTip()
    assert not panel.cpu_only.isChecked() and panel.gpu_layers_value() is None


def test_the_prompt_cache_setting_shows_the_saved_size_and_emits_a_change(qtbot) -> None:
    from app.store.settings import ModelSettings
    from app.ui.sampling_panel import SamplingSettingsWidget

    panel = SamplingSettingsWidget()
    qtbot.addWidget(panel)
    panel.set_values(SamplingParams(), ModelSettings(prompt_cache_mib=512), SpeculationConfig())
    assert panel.prompt_cache.value() == 512 and panel.prompt_cache.text() == "512 MiB"
    emitted: list[tuple[object, ...]] = []
    panel.model_options_changed.connect(lambda *a: emitted.append(a))
    panel.prompt_cache.setValue(0)
    assert panel.prompt_cache.text() == "Off"
    assert emitted and emitted[-1][4] == 0
    panel.set_pending_reload(True)
    assert "prompt cache" in panel.pending_label.text()


def test_more_threads_than_logical_cpus_are_said_to_be_slower(qtbot) -> None:
    from app.engine.cpu import usable_cores
    from app.store.settings import ModelSettings
    from app.ui.sampling_panel import SamplingSettingsWidget

    panel = SamplingSettingsWidget()
    qtbot.addWidget(panel)
    cpus = usable_cores()
    panel.set_values(SamplingParams(), ModelSettings(n_threads=cpus), SpeculationConfig())
    panel.set_pending_reload(False)
    assert panel.pending_label.text() == ""
    panel.threads.setValue(cpus + 1)
    panel.set_pending_reload(False)  # said alone (the threads apply at the next load)
    assert panel.pending_label.text().startswith(f"{cpus + 1} threads on {cpus} logical")
    panel.set_pending_reload(True)
    text = panel.pending_label.text()
    assert text.startswith("Reload the model") and f"{cpus + 1} threads on {cpus} logical" in text


def test_long_plain_tooltips_are_wrapped_when_shown(qtbot) -> None:
    from PySide6.QtCore import QEvent, QPoint
    from PySide6.QtGui import QHelpEvent

    from app.ui import tooltips

    app = QApplication.instance()
    assert isinstance(app, QApplication)
    tooltips.install(app)  # as create_application does
    long = "CPU threads for decoding. Auto: as many as the cores other programs leave free & n < 4"
    assert tooltips.wrapped(long) == "<p>" + long.replace("&", "&amp;").replace(
        "<", "&lt;").replace(">", "&gt;") + "</p>"
    assert tooltips.wrapped("short") == "short"
    label = QLabel("x")
    qtbot.addWidget(label)
    label.setToolTip(long)
    QApplication.sendEvent(label, QHelpEvent(QEvent.Type.ToolTip, QPoint(1, 1), QPoint(1, 1)))
    assert QToolTip.text() == tooltips.wrapped(long)
    assert label.toolTip() == long  # the widget keeps its own text
    QToolTip.hideText()
    # a form's label without a tooltip shows its field's (hovering "Temperature")
    from PySide6.QtWidgets import QFormLayout, QSpinBox, QWidget

    form_widget = QWidget()
    qtbot.addWidget(form_widget)
    form = QFormLayout(form_widget)
    field = QSpinBox()
    field.setToolTip("randomness")
    form.addRow("Temperature", field)
    row_label = form.labelForField(field)
    QApplication.sendEvent(row_label, QHelpEvent(QEvent.Type.ToolTip, QPoint(1, 1),
                                                 QPoint(1, 1)))
    assert QToolTip.text() == "randomness" and row_label.toolTip() == ""
    QToolTip.hideText()


def test_tooltips_that_look_like_html_are_shown_as_text(qtbot) -> None:
    """A file name, a model's name or a server's error in a tooltip is untrusted: Qt
    would draw "<img src=…>" as an image read from a local file. Every tooltip is shown
    escaped (Tandem writes none in HTML), short or long."""
    from PySide6.QtCore import QEvent, QPoint
    from PySide6.QtGui import QHelpEvent, QTextDocument

    from app.ui import tooltips

    app = QApplication.instance()
    assert isinstance(app, QApplication)
    tooltips.install(app)
    for hostile in ("<h1>BIG</h1>.gguf", "<img src='/etc/x.png'> " + "y" * 80):
        label = QLabel("x")
        qtbot.addWidget(label)
        label.setToolTip(hostile)
        QApplication.sendEvent(label, QHelpEvent(QEvent.Type.ToolTip, QPoint(1, 1),
                                                 QPoint(1, 1)))
        shown = QToolTip.text()
        doc = QTextDocument()
        doc.setHtml(shown)
        assert doc.toPlainText() == hostile  # what Qt draws is the text, tags and all
        QToolTip.hideText()


def test_long_item_and_menu_tooltips_are_wrapped_when_shown(qtbot) -> None:
    """An item's tooltip lives in its view's model and a menu action's in the action:
    both wrap too (a drafter's "why not" in the Drafter box, a GGUF's error in the
    library)."""
    from PySide6.QtCore import QEvent, QPoint
    from PySide6.QtGui import QAction, QHelpEvent
    from PySide6.QtWidgets import QListWidget, QListWidgetItem, QMenu

    from app.ui import tooltips

    app = QApplication.instance()
    assert isinstance(app, QApplication)
    tooltips.install(app)
    long = "Suffix lookup: not available because this model has no chat template & n < 4 " * 2
    view = QListWidget()
    qtbot.addWidget(view)
    view.resize(300, 200)
    view.show()
    item = QListWidgetItem("suffix")
    item.setToolTip(long)
    view.addItem(item)
    pos = view.visualItemRect(item).center()
    QApplication.sendEvent(view.viewport(), QHelpEvent(
        QEvent.Type.ToolTip, pos, view.viewport().mapToGlobal(pos)))
    assert QToolTip.text() == tooltips.wrapped(long)
    assert item.toolTip() == long  # the model keeps its own text
    QToolTip.hideText()
    from PySide6.QtWidgets import QTreeWidget

    tree = QTreeWidget()  # a header section's tooltip (the picker's draft list)
    qtbot.addWidget(tree)
    tree.setHeaderLabels(["name", "speedup"])
    tree.headerItem().setToolTip(1, long)
    tree.resize(400, 200)
    tree.show()
    header = tree.header()
    at = QPoint(header.sectionViewportPosition(1) + 5, header.height() // 2)
    QApplication.sendEvent(header.viewport(), QHelpEvent(
        QEvent.Type.ToolTip, at, header.viewport().mapToGlobal(at)))
    assert QToolTip.text() == tooltips.wrapped(long)
    QToolTip.hideText()
    menu = QMenu()
    action = QAction("Launch", menu)
    action.setToolTip(long)
    menu.addAction(action)
    menu.setToolTipsVisible(True)
    menu.show()
    at = menu.actionGeometry(action).center()
    QApplication.sendEvent(menu, QHelpEvent(QEvent.Type.ToolTip, at, menu.mapToGlobal(at)))
    assert QToolTip.text() == tooltips.wrapped(long)
    assert action.toolTip() == long
    menu.close()


def test_delete_on_the_conversation_list_asks_to_delete_the_current_one(qtbot) -> None:
    """The Delete key on the list does what the menu's Delete does (the window then asks
    before deleting)."""
    from PySide6.QtGui import QShortcut

    from app.store.history import Conversation
    from app.ui.chat.conversation_list import ConversationListWidget

    w = ConversationListWidget()
    qtbot.addWidget(w)
    w.set_conversations([Conversation(id=7, title="seven", system_prompt="", created_at=0.0,
                                      updated_at=0.0)], current=7)
    [delete_key] = w.list.findChildren(QShortcut)
    with qtbot.waitSignal(w.conversation_delete_clicked) as sig:
        delete_key.activated.emit()
    assert sig.args == [7]


def test_marking_the_conversation_being_written_is_no_rename(qtbot) -> None:
    """The list marks the conversation whose reply is written (italic, an icon): that
    changes the row, and must not reach the history as a rename of it to the title the
    row showed (that would put back a title the history changed meanwhile); an edit of
    the title is one."""
    from app.store.history import Conversation
    from app.ui.chat.conversation_list import ConversationListWidget

    w = ConversationListWidget()
    qtbot.addWidget(w)
    w.set_conversations([Conversation(id=7, title="seven", system_prompt="", created_at=0.0,
                                      updated_at=0.0)], current=7)
    renamed: list[tuple[int, str]] = []
    w.conversation_renamed.connect(lambda cid, title: renamed.append((cid, title)))
    w.set_writing(7)
    w.set_writing(None)
    assert renamed == []
    w.list.item(0).setText("lucky seven")
    assert renamed == [(7, "lucky seven")]


def test_a_search_shows_under_each_title_where_it_found_the_text(qtbot) -> None:
    """A row the search found in a message carries that line (drawn under the title, the
    row taller); renaming edits the title alone."""
    from app.store.history import Conversation
    from app.ui.chat.conversation_list import _SNIPPET_ROLE, ConversationListWidget

    convs = [Conversation(id=i, title=t, system_prompt="", created_at=0.0, updated_at=0.0)
             for i, t in ((1, "Trip"), (2, "lake notes"))]
    w = ConversationListWidget()
    qtbot.addWidget(w)
    w.show()
    w.set_conversations(convs, None)
    plain = w.list.visualItemRect(w.list.item(0)).height()
    w.set_conversations(convs, None, {1: "…to the lake house with the dog…"})
    found, titled = w.list.item(0), w.list.item(1)
    assert found.data(_SNIPPET_ROLE) == "…to the lake house with the dog…"
    assert titled.data(_SNIPPET_ROLE) is None and found.text() == "Trip"
    qtbot.waitUntil(lambda: w.list.visualItemRect(found).height() > plain)
    assert w.list.visualItemRect(titled).height() == plain


def test_down_or_enter_in_the_search_box_goes_to_what_it_found(qtbot) -> None:
    """Typed, then Down (or Enter) at once: the search is applied, the first conversation
    found opens and the list has the keys (Down again: the next)."""
    from PySide6.QtCore import Qt

    from app.store.history import Conversation
    from app.ui.chat.conversation_list import ConversationListWidget

    convs = [Conversation(id=i, title=t, system_prompt="", created_at=0.0, updated_at=0.0)
             for i, t in ((1, "lake house"), (2, "soup"), (3, "lake trip"))]
    w = ConversationListWidget()
    qtbot.addWidget(w)
    w.search_changed.connect(lambda text: w.set_conversations(
        [c for c in convs if text.strip() in c.title], current=2))
    w.set_conversations(convs, current=2)
    w.show()
    for key in (Qt.Key.Key_Down, Qt.Key.Key_Return):
        w.search.setFocus()
        w.search.clear()
        qtbot.keyClicks(w.search, "lake")
        with qtbot.waitSignal(w.conversation_activated, timeout=2000) as sig:
            qtbot.keyClick(w.search, key)  # before the search's 200 ms have passed
        assert sig.args == [1] and w.ids() == [1, 3]
        qtbot.waitUntil(w.list.hasFocus, timeout=2000)
    with qtbot.waitSignal(w.conversation_activated, timeout=2000) as sig:
        qtbot.keyClick(w.list, Qt.Key.Key_Down)
    assert sig.args == [3]


def test_the_wheel_scrolls_the_sampling_tab_instead_of_changing_its_values(qtbot) -> None:
    """In the scrolling Sampling tab the pointer passes over spin boxes: a wheel there
    scrolls the tab unless the box has the focus (then it changes the value, as ever)."""
    from PySide6.QtCore import QPoint, QPointF, Qt
    from PySide6.QtGui import QWheelEvent
    from PySide6.QtWidgets import QApplication

    w = _window(qtbot)
    try:
        w.side_tabs.setCurrentWidget(w.sampling_panel)
        w.resize(1024, 500)
        area = w.side_tabs.currentWidget()
        qtbot.waitUntil(lambda: area.verticalScrollBar().maximum() > 0, timeout=5000)
        spin = w.sampling_panel.temperature
        before = spin.value()

        def wheel() -> None:
            event = QWheelEvent(QPointF(5, 5), QPointF(spin.mapToGlobal(QPoint(5, 5))),
                                QPoint(0, 0), QPoint(0, -120), Qt.MouseButton.NoButton,
                                Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase,
                                False)
            QApplication.sendEvent(spin, event)

        wheel()
        assert spin.value() == before and area.verticalScrollBar().value() > 0
        spin.setFocus()
        qtbot.waitUntil(spin.hasFocus, timeout=5000)
        wheel()
        assert spin.value() != before
    finally:
        w.close()


def test_a_data_folder_that_cannot_be_made_is_said_not_a_silent_exit(tmp_path: Path) -> None:
    """TANDEM_HOME is a file: the window's start says why it cannot start (a dialog, and
    a line on stderr) and exits with 2, as it does for other folder errors."""
    home = tmp_path / "not-a-folder"
    home.write_text("a file")
    script = ("import sys\n"
              "from PySide6.QtWidgets import QMessageBox\n"
              "QMessageBox.exec = lambda self: 0\n"
              "from app.ui import launch\n"
              "sys.exit(launch.main())\n")
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", TANDEM_HOME=str(home),
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    # (the log, which cannot go to its folder either, goes to stderr with the details)
    assert "\nTandem cannot start: it could not prepare its folders" in done.stderr


def test_the_model_bar_at_its_narrowest_keeps_its_short_words_whole(qtbot) -> None:
    """At its minimum width (a 1024-pixel window) the bar shortens the model's file name,
    not "Choose draft…" nor where the layers run."""
    from app.chat.events import ModelInfo

    bar = ModelBarWidget()
    qtbot.addWidget(bar)
    bar.show()
    for gpu_layers, where in ((0, "CPU only"), (30, "GPU · 30/30 layers")):
        bar.set_model(ModelInfo(
            target_path=Path("/m/SmolLM2-135M-Instruct.Q4_1.gguf"), target_name="SmolLM2",
            draft_path=None, draft_name=None, n_ctx=4096, n_layer=30, n_gpu_layers=gpu_layers,
            gpu_supported=gpu_layers > 0, cpu_reason="no GPU", uses_fallback_template=False,
            load_seconds=1.0, system_info=""))
        bar.resize(bar.minimumSizeHint().width(), bar.height())
        qtbot.waitUntil(lambda: bar.width() == bar.minimumSizeHint().width(), timeout=5000)
        QApplication.processEvents()
        assert bar.draft_button.text() == "Choose draft…"
        assert bar.layers_label.text() == where
        assert bar.target_label.text() != bar.target_label.full_text()  # the long one gives way
        # shortened in the middle, without ".gguf": the name's end (its quantization)
        # stays in sight
        assert bar.target_label.full_text() == "SmolLM2-135M-Instruct.Q4_1"
        assert bar.target_label.text().endswith("4_1")
        assert "SmolLM2-135M-Instruct.Q4_1.gguf" in bar.target_label.toolTip()


def test_the_bar_names_a_gguf_without_its_extension(qtbot) -> None:  # type: ignore[no-untyped-def]
    from app.options import SpecMode, SpeculationConfig
    from app.ui.model_bar import shown_name

    bar = ModelBarWidget()
    qtbot.addWidget(bar)
    bar.set_speculation(SpeculationConfig(mode=SpecMode.DRAFT_MODEL))
    bar.set_draft_name("small-Q8_0.gguf", "Small")
    assert bar.draft_button.full_text() == "Draft: small-Q8_0"
    assert bar.draft_button.toolTip().startswith("Draft: small-Q8_0.gguf\nSmall\n")
    assert shown_name("gemma-3-270m-q4_k_m.gguf") == "gemma-3-270m-q4_k_m"
    assert shown_name("Model.GGUF") == "Model"
    assert shown_name("weights.bin") == "weights.bin"
    assert shown_name(".gguf") == ".gguf"


def test_an_elided_button_keeps_its_prefix_whole(qtbot) -> None:  # type: ignore[no-untyped-def]
    from app.ui.elided import ElidedButtonWidget, elided

    button = ElidedButtonWidget()
    qtbot.addWidget(button)
    full = "MTP assistant: gemma-3-270m-it-qat-copy-q4_k_m"
    button.show()
    width = next(w for w in range(120, 400, 4)  # where plain eliding cuts into the prefix
                 if not elided(button, full, w - button.PADDING_PX).startswith("MTP assistant: ")
                 and button.fontMetrics().horizontalAdvance("MTP assistant: ab…yz")
                 <= w - button.PADDING_PX)
    button.keep_prefix("MTP assistant: ")
    button.set_full_text(full)
    button.resize(width, button.height())
    QApplication.processEvents()
    text = button.text()  # shortened after its prefix, not across it
    assert text.startswith("MTP assistant: ") and "…" in text and text.endswith("m"), text
    button.resize(60, button.height())  # too narrow for the prefix: elided as a whole
    QApplication.processEvents()
    assert "…" in button.text() and not button.text().startswith("MTP assistant: ")
    button.set_full_text("Choose draft…")  # a text without the prefix: elided as before
    button.resize(300, button.height())
    QApplication.processEvents()
    assert button.text() == "Choose draft…"


def test_the_composer_keeps_each_conversations_unsent_text(qtbot) -> None:
    """Text typed and not sent stays with its conversation across switches, edits and
    the deletion of the conversation it was typed in: nothing typed is lost."""
    from app.ui.chat.input_box import ComposerWidget

    c = ComposerWidget()
    qtbot.addWidget(c)
    box = c.input
    c.show_conversation(1)
    box.setPlainText("draft for one")
    c.show_conversation(2)
    assert box.toPlainText() == ""
    box.setPlainText("draft for two")
    c.show_conversation(1)
    assert box.toPlainText() == "draft for one"
    c.begin_edit("an earlier message", 7)  # Edit on a message: the box shows it …
    assert box.toPlainText() == "an earlier message"
    c.edit_ended()  # … Cancel edit (or its Send) brings the draft back
    assert box.toPlainText() == "draft for one"
    c.begin_edit("an earlier message", 7)
    box.setPlainText("an earlier message, rewritten")
    resumed: list[tuple[int, int, str]] = []
    c.edit_resumed.connect(lambda cid, mid, text: resumed.append((cid, mid, text)))
    c.show_conversation(2)  # a switch leaves the edit; the draft stays with 1
    assert box.toPlainText() == "draft for two" and resumed == []
    assert c.unsent_texts() == {"1": "draft for one", "2": "draft for two",
                                "1:edit:7": "an earlier message, rewritten"}
    c.show_conversation(1)  # the draft, and the edit to take up again
    assert box.toPlainText() == "draft for one"
    assert resumed == [(1, 7, "an earlier message, rewritten")]
    c.show_conversation(2)
    c.show_conversation(1)  # taken up once only
    assert len(resumed) == 1
    c.edit_not_resumed(1, 7, "an earlier message, rewritten")  # not now: kept in the box
    assert box.toPlainText() == "draft for one\n\nan earlier message, rewritten"
    c.edit_not_resumed(2, 8, "left in two")  # two is not open: it waits for two
    assert c.unsent_texts()["2:edit:8"] == "left in two"
    box.setPlainText("draft for one")
    c.sent("a starter prompt")  # sent by a click, not from the box: the box stays
    assert box.toPlainText() == "draft for one"
    c.sent("draft for one")  # sent from the box: it empties
    assert box.toPlainText() == ""
    box.setPlainText("typed, then the conversation deleted")
    c.deleting(2, lambda _cid: False)  # a deletion that failed keeps everything
    assert c.unsent_texts()["2:edit:8"] == "left in two"

    def delete(_cid: int) -> bool:  # as the controller does: the new chat opens
        c.show_conversation(None)
        return True

    c.deleting(1, delete)  # the new chat the deletion opens gets the box's text
    assert box.toPlainText() == "typed, then the conversation deleted"
    c.show_conversation(2)
    c.show_conversation(None)
    assert box.toPlainText() == "typed, then the conversation deleted"


def test_send_waits_for_an_edit_to_change_the_text_and_a_deleted_edit_moves_on(qtbot) -> None:
    """An edit whose text is still the message's own has nothing to send (it would be an
    identical version); a conversation deleted while one of its messages is edited
    hands both the text before the edit and the rewrite to the chat opened next."""
    from app.ui.chat.input_box import ComposerWidget

    c = ComposerWidget()
    qtbot.addWidget(c)
    c.show_conversation(1)
    c.set_state(streaming=False, can_send=True, can_regenerate=True, editing=False,
                model_loaded=True)
    c.input.setPlainText("typed before the edit")
    assert c.send_button.isEnabled()
    c.begin_edit("the question", 7)
    assert not c.send_button.isEnabled() and "Change the message" in c.send_button.toolTip()
    sent: list[bool] = []
    c.send_clicked.connect(lambda: sent.append(True))
    c.input.submitted.emit()  # Enter: nothing to send, said in the edit's banner
    assert sent == [] and c.edit_banner_label.text().startswith("Nothing changed yet")
    c.input.setPlainText("the question, sharper")
    assert c.send_button.isEnabled() and c.send_button.toolTip() == "Send (Enter)"
    assert c.edit_banner_label.text().startswith("Editing the marked message")
    c.input.submitted.emit()
    assert sent == [True]
    c.input.setPlainText("the question \n")  # a space or a line break after it: no change
    assert not c.send_button.isEnabled()
    c.input.setPlainText("    the question")  # indented (a code block, in Markdown): a change
    assert c.send_button.isEnabled()
    c.input.setPlainText("the question")
    c.edit_ended()
    assert c.send_button.isEnabled() and c.input.toPlainText() == "typed before the edit"
    c.begin_edit("the question", 7, "a rewrite left earlier")  # taken up again
    assert c.send_button.isEnabled() and c.input.toPlainText() == "a rewrite left earlier"

    def delete(_cid: int) -> bool:  # as the controller does: the new chat opens
        c.show_conversation(None)
        return True

    c.deleting(1, delete)
    assert c.input.toPlainText() == "typed before the edit\na rewrite left earlier"
    assert c.unsent_texts() == {"new": "typed before the edit\na rewrite left earlier"}


def _chat_view(qtbot, views: list[MessageView], height: int = 400):  # type: ignore[no-untyped-def]
    """A shown chat view, 600 px wide, holding ``views``."""
    from app.ui.chat.chat_view import ChatViewWidget

    chat = ChatViewWidget()
    qtbot.addWidget(chat)
    chat.resize(600, height)
    chat.show()
    chat.set_messages(views)
    return chat


def test_a_long_conversation_opens_on_its_last_messages(qtbot) -> None:
    """Every message is a rendered text browser: a conversation opens on its last
    SHOWN_AT_ONCE, and the button above shows earlier ones a batch at a time, the view
    staying where it was; editing a message not shown removes it and all after it."""
    from app.ui.chat.chat_view import SHOWN_AT_ONCE

    n = 2 * SHOWN_AT_ONCE + 7
    views = [MessageView(i, "user" if i % 2 else "assistant", f"message {i}\n\nline two")
             for i in range(1, n + 1)]
    chat = _chat_view(qtbot, views)
    assert len(chat.messages) == SHOWN_AT_ONCE and chat.earlier_count == n - SHOWN_AT_ONCE
    assert chat.messages[0].message_id == n - SHOWN_AT_ONCE + 1
    assert chat.earlier_button.isVisible()
    assert chat.earlier_button.text() == (f"Show {SHOWN_AT_ONCE} earlier messages "
                                          f"({n - SHOWN_AT_ONCE} not shown)")
    bar = chat.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.value() == bar.maximum() > 0)
    bar.setValue(0)  # the user scrolled to the top, where the button is
    top = chat.messages[0]
    chat.earlier_button.click()
    assert len(chat.messages) == 2 * SHOWN_AT_ONCE and chat.messages[SHOWN_AT_ONCE] is top
    assert chat.earlier_button.text() == "Show 7 earlier messages"
    # the message that was at the top is still in view, with the new ones above it
    qtbot.waitUntil(lambda: bar.value() > 0)
    y = top.mapTo(chat.widget(), top.rect().topLeft()).y()
    assert bar.value() <= y < bar.value() + chat.viewport().height()
    chat.show_earlier()
    assert [w.message_id for w in chat.messages] == list(range(1, n + 1))
    assert not chat.earlier_button.isVisible()
    # a reply growing at the bottom (streaming) does not move the messages just opened
    chat.set_messages(views)
    qtbot.waitUntil(lambda: bar.value() == bar.maximum() > 0)
    bar.setValue(0)
    top = chat.messages[0]
    chat.earlier_button.click()
    qtbot.waitUntil(lambda: bar.value() > 0)
    shown_at = top.y() - bar.value()
    chat.messages[-1].set_content("grown\n\n" * 200)
    qtbot.wait(50)
    assert top.y() - bar.value() == shown_at
    chat.set_messages(views)
    chat.remove_from(3)  # not shown: it and every message after it go; 1 and 2 are shown
    assert [w.message_id for w in chat.messages] == [1, 2] and chat.earlier_count == 0
    assert not chat.earlier_button.isVisible()


def test_a_markdown_table_has_padded_cells_and_a_grid(qtbot) -> None:
    from PySide6.QtGui import QTextTable

    w = MessageWidget(MessageView(1, "assistant", "| Planet | Moons |\n|---|---:|\n| Neptune | 28 |"),
                      tint=True)
    qtbot.addWidget(w)
    doc = w.body.document()
    tables = [f for f in doc.rootFrame().childFrames() if isinstance(f, QTextTable)]
    assert len(tables) == 1
    fmt = tables[0].format()
    assert fmt.cellPadding() == 4 and fmt.border() == 1  # "Neptune" and "28" apart
    assert w.text == "| Planet | Moons |\n|---|---:|\n| Neptune | 28 |"


def test_a_hash_without_a_space_is_text_not_a_heading() -> None:
    # a commented-out line of code in a reply ("#print(x)") kept its text and "#"; a
    # heading needs a space after the hashes (CommonMark), which Python-Markdown skips
    html = render_markdown("#print(fibonacci(20))\nx = 1").html
    assert "<h1>" not in html and "#print(fibonacci(20))" in html
    assert "<h1>Title</h1>" in render_markdown("# Title").html
    assert "<h2>Sub</h2>" in render_markdown("## Sub ##").html


def test_another_version_replaces_the_messages_after_it_and_a_long_path_is_paged(qtbot) -> None:
    """‹ › shows another version: the messages after it are replaced (a few: in place,
    the others kept as they were; more than a page: shown as a conversation opens, its
    last SHOWN_AT_ONCE); the message being edited is marked and its ‹ › wait."""
    from app.ui.chat.chat_view import SHOWN_AT_ONCE, ChatViewWidget

    chat = ChatViewWidget()
    qtbot.addWidget(chat)
    chat.resize(600, 400)
    chat.show()
    chat.set_messages([MessageView(i, "user" if i % 2 else "assistant", f"m{i}")
                       for i in range(1, 7)])
    kept = chat.messages[:3]
    chat.replace_after(MessageView(3, "user", "m3, version 2", version=2, versions=2),
                       [MessageView(10, "assistant", "r10")])
    assert [w.text for w in chat.messages] == ["m1", "m2", "m3, version 2", "r10"]
    assert chat.messages[:3] == kept and kept[2].version == (2, 2)
    # every reply offers Regenerate; an earlier one says what becomes of the rest
    assert [w._regen.isHidden() for w in chat.messages] == [True, False, True, False]
    assert "stay with the current version" in chat.messages[1]._regen.toolTip()
    assert chat.messages[-1]._regen.toolTip() == "Generate this reply again"

    long_path = [MessageView(100 + i, "user" if i % 2 else "assistant", f"p{i}")
                 for i in range(2 * SHOWN_AT_ONCE)]
    chat.replace_after(MessageView(3, "user", "m3", version=1, versions=2), long_path)
    assert len(chat.messages) == SHOWN_AT_ONCE
    assert chat.earlier_count == 3 + SHOWN_AT_ONCE  # m1 … m3 and the path's first half
    chat.show_earlier()
    chat.show_earlier()
    assert [w.text for w in chat.messages][:4] == ["m1", "m2", "m3", "p0"]
    assert chat.messages[2].version == (1, 2)
    assert [w.message_id for w in chat.messages][3:] == [v.message_id for v in long_path]

    chat.set_busy(False, editing=3)
    marked = [w.message_id for w in chat.messages if w.property("editing")]
    assert marked == [3] and not chat.messages[2]._newer.isEnabled()
    chat.set_busy(False)
    assert not any(w.property("editing") for w in chat.messages)
    assert chat.messages[2]._newer.isEnabled()


def test_find_text_marks_the_match_and_brings_it_into_view(qtbot) -> None:
    """The conversation search's text is marked where the open conversation has it: a
    message not shown yet (behind "Show earlier") is shown, the view scrolls to it and
    keeps it in sight while the page settles; the mark survives a re-render; "" clears;
    a reply starting follows the bottom again."""
    from app.ui.chat.chat_view import SEARCH_BATCHES, SHOWN_AT_ONCE

    n = SHOWN_AT_ONCE + 20
    views = [MessageView(i, "user" if i % 2 else "assistant",
                         "the **Palindrome** checker" if i == 5 else f"message {i}\n\nline two")
             for i in range(1, n + 1)]
    chat = _chat_view(qtbot, views)
    bar = chat.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.value() == bar.maximum() > 0)
    assert chat.message(5) is None  # behind the button

    assert chat.find_text("  palindrome ")  # stripped, any case, in the rendered text
    hit = chat.message(5)
    assert hit is not None and hit.first_mark_y() is not None
    assert chat.earlier_count == 0  # the one batch that holds it was shown
    assert [w.message_id for w in chat.messages if w.first_mark_y() is not None] == [5]

    def match_in_view() -> bool:
        y = hit.mapTo(chat.widget(), hit.rect().topLeft()).y() + (hit.first_mark_y() or 0)
        return bar.value() <= y < bar.value() + chat.viewport().height()

    qtbot.waitUntil(match_in_view)
    qtbot.wait(50)  # the page settled around it
    assert match_in_view() and bar.value() < bar.maximum()
    hit.set_content("the **Palindrome** checker, again")  # re-rendered: still marked
    assert hit.first_mark_y() is not None

    assert not chat.find_text("nowhere in it")  # nothing found: no marks, no scrolling
    assert all(w.first_mark_y() is None for w in chat.messages)
    assert chat.find_text("line two") and chat.messages[-1].first_mark_y() is not None
    chat.begin_stream(chat.messages[-1].message_id, "a reply starts")
    qtbot.waitUntil(lambda: bar.value() == bar.maximum())
    assert not chat.find_text("")
    assert all(w.first_mark_y() is None for w in chat.messages)
    # text further up than SEARCH_BATCHES batches: not rendered for it, the button says so
    far = [MessageView(i, "user", "the needle" if i == 1 else f"m{i}")
           for i in range(1, (SEARCH_BATCHES + 2) * SHOWN_AT_ONCE)]
    chat.set_messages(far)
    assert not chat.find_text("needle") and chat.message(1) is None
    assert chat.earlier_button.text().endswith("; the search found it further up)")
    chat.find_text("")  # the search cleared: the button says no more about it
    assert chat.earlier_button.text().endswith(" not shown)")


def test_messages_the_last_reply_was_written_without_are_marked(qtbot) -> None:
    """The messages dropped to fit the context window say so ("not in the model's
    context") until a reply is written with the whole conversation again; a streamed
    reply's own fit counts when it ends."""
    from app.engine.context_fit import ContextFit
    from app.options import ContextOverflow
    from app.ui.chat.chat_view import DROPPED_WHY, UNANSWERED_WHY, ChatViewWidget

    def fit(dropped: int, policy: ContextOverflow) -> ContextFit:
        return ContextFit(policy, 4096, dropped, 3000, 3900, 196,
                          kept_first=policy is ContextOverflow.TRUNCATE_MIDDLE)

    views = [MessageView(i, "user" if i % 2 else "assistant", f"m{i}",
                         footer="9 tokens" if i % 2 == 0 else "")
             for i in range(1, 9)]
    views[-1] = dataclasses.replace(views[-1], context=fit(2, ContextOverflow.ROLLING_WINDOW))
    chat = ChatViewWidget()
    qtbot.addWidget(chat)
    chat.set_messages(views)

    def marked() -> list[int]:
        return [w.message_id for w in chat.messages if w.property("outOfContext")]

    assert marked() == [1, 2]
    assert [w.message_id for w in chat.messages  # the words in the header too
            if w.findChild(QLabel, "outOfContextLabel").isVisibleTo(w)] == [1, 2]
    # the next reply, streamed, dropped the second exchange (truncate-middle keeps the first)
    chat.add_message(MessageView(9, "user", "m9"))
    chat.add_message(MessageView(10, "assistant", ""))
    assert marked() == [1, 2]  # still the last finished reply's
    chat.end_stream(10, "m10", (), "9 tokens", fit(4, ContextOverflow.TRUNCATE_MIDDLE))
    assert marked() == [3, 4, 5, 6]
    chat.add_message(MessageView(11, "user", "m11"))
    chat.add_message(MessageView(12, "assistant", ""))
    chat.end_stream(12, "m12", (), "9 tokens", None)  # a larger context: nothing dropped
    assert marked() == []
    # an empty reply is no message of the request: the count skips it
    empty = [MessageView(1, "user", "u1"), MessageView(2, "assistant", "", footer="0 tokens"),
             MessageView(3, "user", "u2"), MessageView(4, "user", "u3"),
             MessageView(5, "assistant", "a3", footer="9 tokens"),
             MessageView(6, "user", "u4"),
             MessageView(7, "assistant", "a4", footer="9 tokens",
                         context=fit(2, ContextOverflow.ROLLING_WINDOW))]
    chat.set_messages(empty)
    # u1 and u2 went unanswered (each followed by another question): no request holds
    # them; the last reply's request was u3, a3, u4, and dropped two of them
    assert marked() == [1, 3, 4, 5]
    why = {w.message_id: w.findChild(QLabel, "outOfContextLabel").toolTip()
           for w in chat.messages if w.property("outOfContext")}
    assert why[1] == why[3] == UNANSWERED_WHY and why[4] == why[5] == DROPPED_WHY


def test_a_long_pasted_message_shows_its_first_lines_and_a_button_for_the_rest(qtbot) -> None:
    """A user message of more than LONG_LINES lines (or LONG_CHARS characters) shows its
    first COLLAPSED_LINES lines; "Show all" shows it whole and "Show less" folds it
    again; Copy copies all of it; a search that finds text in it unfolds it; a reply is
    never folded."""
    from app.ui.chat.chat_view import COLLAPSED_LINES, LONG_LINES

    pasted = "\n".join(f"line {i} of the pasted log" for i in range(1, 301))
    chat = _chat_view(qtbot, [MessageView(1, "user", pasted), MessageView(2, "assistant", pasted),
                              MessageView(3, "user", "short\n" * (LONG_LINES - 1))], height=500)
    user, reply, short = chat.messages
    assert user.collapsed and not reply.collapsed and not short.collapsed
    assert not reply.more_button.isVisibleTo(reply)  # a reply is never folded
    reply.set_collapsed(True)
    assert not reply.collapsed
    assert user.more_button.isVisibleTo(user) and user.more_button.text() == (
        "Show all 300 lines")
    line = user.fontMetrics().lineSpacing()
    qtbot.waitUntil(lambda: user.body.full_height() > 10 * line * COLLAPSED_LINES)
    assert line * (COLLAPSED_LINES - 1) <= user.body.height() <= line * (COLLAPSED_LINES + 1)
    assert user.shown_text == pasted  # all of it is there (Copy and search read it)
    user.more_button.click()
    assert not user.collapsed and user.more_button.text() == "Show less"
    qtbot.waitUntil(lambda: user.body.height() == user.body.full_height())
    user.more_button.click()
    assert user.collapsed
    user.body.selectAll()  # a selection left over would hide the search's marks
    bar = user.body.verticalScrollBar()
    bar.setValue(bar.maximum())  # a drag or a wheel over the fold: the cut text stays cut
    assert bar.value() == 0
    assert chat.find_text("line 250 of")
    assert not user.collapsed  # unfolded where the search found its text
    assert not user.body.textCursor().hasSelection()


def test_continue_is_offered_on_the_last_reply_cut_short_and_not_with_a_server(qtbot) -> None:
    """Continue shows on the last reply when it was cut short; not on an earlier one, not
    on one that ended by itself, and not while replies run on a server."""
    from PySide6.QtWidgets import QToolButton

    def offers(chat, i: int) -> bool:  # type: ignore[no-untyped-def]
        w = chat.messages[i]
        return bool(w.findChild(QToolButton, "continueButton").isVisibleTo(w))

    cut = [MessageView(1, "user", "q"), MessageView(2, "assistant", "a", footer="1 token",
                                                      continuable=True)]
    chat = _chat_view(qtbot, [*cut, MessageView(3, "user", "q2"),
                              MessageView(4, "assistant", "b", footer="1 token",
                                          continuable=True)])
    assert [offers(chat, i) for i in range(4)] == [False, False, False, True]
    chat.set_continue_allowed(False)
    assert not offers(chat, 3)
    chat.set_continue_allowed(True)
    chat.set_messages([*cut[:1], MessageView(2, "assistant", "a", footer="1 token")])
    assert not offers(chat, 1)  # it ended by itself


def test_a_message_given_back_goes_to_its_own_conversations_box(qtbot) -> None:  # type: ignore[no-untyped-def]
    """A message refused after another conversation was opened waits in its own
    conversation's box (before what was typed there); the open one's box is left alone."""
    from app.ui.chat.input_box import ComposerWidget

    c = ComposerWidget()
    qtbot.addWidget(c)
    c.show_conversation(1)
    c.input.setPlainText("typed in one")
    c.show_conversation(2)
    c.input.setPlainText("typed in two")
    c.given_back(1, "the long message")
    assert c.input.toPlainText() == "typed in two"
    c.given_back(2, "another long one")
    assert c.input.toPlainText() == "another long one\n\ntyped in two"
    c.show_conversation(1)
    assert c.input.toPlainText() == "the long message\n\ntyped in one"
    c.show_conversation(None)
    c.given_back(None, "in a fresh chat")
    assert c.input.toPlainText() == "in a fresh chat"


def test_a_wrapped_code_line_hangs_past_its_own_indentation(qtbot) -> None:  # type: ignore[no-untyped-def]
    """Code lines get a hanging indent of their indentation plus HANG_COLUMNS columns, so
    a wrapped part never starts left of its line; prose, and a paragraph that only starts
    with inline code, keep theirs; the text is unchanged."""
    from PySide6.QtGui import QTextDocument

    from app.ui.chat.code_wrap import HANG_COLUMNS, hang_code_lines, space_width
    from app.ui.chat.markdown_render import render_markdown

    source = ("Intro.\n\n```python\ndef f(x):\n    return x * 2\n\tpass\n```\n\n"
              "`f` doubles, as this paragraph says at some length.\n\n`pip install x`\n\n"
              "- `item`\n\n# `Heading`\n\n| a |\n|---|\n| `x` |\n\n    indented code\n")
    doc = QTextDocument()
    doc.setHtml(render_markdown(source).html)
    before = doc.toPlainText()
    # the fenced block's three lines; no inline code, no table cell of prose
    assert hang_code_lines(doc) == 3
    assert doc.toPlainText() == before
    lines = {}
    block = doc.begin()
    while block.isValid():
        lines[block.text()] = block
        block = block.next()
    space = space_width(lines["def f(x):"])
    for text, lead in (("def f(x):", 0), ("    return x * 2", 4), ("\tpass", 4)):
        fmt = lines[text].blockFormat()
        assert fmt.textIndent() == pytest.approx(-space * (lead + HANG_COLUMNS))
        assert fmt.leftMargin() + fmt.textIndent() == pytest.approx(0.0)  # starts as before
    # a tab reaches as far as the indentation is counted: 4 spaces
    assert doc.defaultTextOption().tabStopDistance() == pytest.approx(space * 4)
    for prose in ("Intro.", "f doubles, as this paragraph says at some length.",
                  "pip install x", "item", "Heading", "x", "indented code"):
        assert lines[prose].blockFormat().textIndent() == 0, prose
    # as a reply shows it (the view's own style sheet for code)
    w = MessageWidget(MessageView(1, "assistant", source), tint=True)
    qtbot.addWidget(w)
    hung = []
    block = w.body.document().begin()
    while block.isValid():
        if block.blockFormat().textIndent() < 0:
            hung.append(block.text())
        block = block.next()
    assert hung == ["def f(x):", "    return x * 2", "\tpass"]


def test_no_reply_is_said_only_under_the_conversation_it_was_for(qtbot) -> None:  # type: ignore[no-untyped-def]
    """A reply of another conversation stopped before any text: its "No reply" note does
    not appear under the conversation open now; under its own it does."""
    from app.ui.chat.chat_view import ChatViewWidget

    chat = ChatViewWidget()
    qtbot.addWidget(chat)
    chat.set_messages([MessageView(1, "user", "q"), MessageView(2, "assistant", "a", footer="1 token")])
    chat.remove_from(99, "stopped before any text.")  # another conversation's reply
    assert not chat.failure.isVisibleTo(chat)
    assert [w.message_id for w in chat.messages] == [1, 2]
    chat.add_message(MessageView(3, "user", "q2"))
    chat.add_message(MessageView(4, "assistant", ""))
    chat.remove_from(4, "stopped before any text.")
    assert chat.failure.isVisibleTo(chat)
    assert chat.failure.text() == "No reply: stopped before any text. Regenerate asks again."

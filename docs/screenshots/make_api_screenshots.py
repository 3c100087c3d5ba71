"""Screenshots of issue 11: the window serving the API, its gauge following an API request
(docs/screenshots/api-gauge.png) and the API tab with the request listed (api-panel.png).

    Xvfb :99 -screen 0 1400x900x24 & DISPLAY=:99 openbox &
    DISPLAY=:99 .venv/bin/python docs/screenshots/make_api_screenshots.py \
        .cache/test-models/gemma-3-270m-q4_k_m.gguf docs/screenshots/api-gauge.png \
        docs/screenshots/api-panel.png

Starts the window on Gemma 3 270M with prompt lookup, turns "Serve API" on at port 8080,
streams one completion through the openai client, and shoots the screen when the gauge
shows the live API reply (40 tokens in), then the API tab when it is listed.
"""
import os, sys, threading, subprocess, tempfile, time
from pathlib import Path
os.environ["TANDEM_HOME"] = tempfile.mkdtemp()
from PySide6.QtWidgets import QApplication
from PySide6.QtCore import QTimer
app = QApplication(sys.argv)
from app.ui.qt_compat import apply_qt_workarounds; apply_qt_workarounds()
from app.store.settings import Settings, LoadedSettings
from app.options import SamplingParams, SpecMode, SpeculationConfig
from app.ui.main_window import MainWindow
from app.ui.launch import main as _unused  # noqa
s = Settings()
s.model.target_path = Path(sys.argv[1]).resolve(); s.model.n_ctx = 1024
s.speculation = SpeculationConfig(mode=SpecMode.PROMPT_LOOKUP, draft_max=4)
qss = Path("resources/styles/tandem.qss")
if qss.is_file(): app.setStyleSheet(qss.read_text())
w = MainWindow(LoadedSettings(s)); w.resize(1320, 820); w.show()
state = {"sent": False, "shot": False}
PROMPT = ("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
          "def mul(a, b):\n    return a * b\n\ndef div(a, b):\n    return a / b\n\n"
          "class Calculator:\n    def add(self, a, b):\n        return a + b\n\n")
def send(base):
    import openai
    c = openai.OpenAI(base_url=base, api_key="x")
    m = c.models.list().data[0].id
    for ch in c.completions.create(model=m, prompt=PROMPT, max_tokens=120, temperature=0, stream=True):
        pass
def tick():
    if w.controller.model_info is None: return
    if not state["sent"]:
        w.api_panel.port.setValue(8080)
        w.api_panel.switch.setChecked(True)
        state["sent"] = True
        threading.Thread(target=send, args=(w.api_panel.url.text(),), daemon=True).start()
        return
    g = w.gauge
    if not state["shot"] and g.source_label.isVisible() and "live" in g.mode_label.text() and g._stats and g._stats.emitted >= 40:
        subprocess.run(["import", "-window", "root", sys.argv[2]])
        state["shot"] = True
    if state["shot"] and w.api_panel.table.rowCount() >= 1:
        w.side_tabs.setCurrentWidget(w.api_panel)
        QTimer.singleShot(500, lambda: (subprocess.run(["import", "-window", "root", sys.argv[3]]), w.close(), app.quit()))
        timer.stop()
timer = QTimer(); timer.timeout.connect(tick); timer.start(100)
app.exec()

"""Screenshot for round 7: a new user's window, whose free drafter now starts at k = 16
(app.options.FREE_DRAFTER_K), after two replies; the gauge and footers show k ≤ 16.

Run from the repository root under Xvfb with a window manager, for example:

    Xvfb :99 -screen 0 1400x900x24 & DISPLAY=:99 openbox &
    DISPLAY=:99 .venv/bin/python docs/screenshots/make_round7_screenshots.py docs/screenshots

It uses SmolLM2-135M-Instruct from .cache/test-models and a scratch TANDEM_HOME; the
speeds shown depend on the machine (not figures for the record).
"""
from __future__ import annotations

from shots import CODE_EDIT_TURNS, converse, make_shot, open_main_window, scratch_home

ROOT, OUT = scratch_home("round7")

from app.options import SamplingParams  # noqa: E402
from app.store.settings import Settings  # noqa: E402

SMOL = ROOT / ".cache/test-models/SmolLM2-135M-Instruct.Q4_1.gguf"


shot = make_shot(OUT)


def main() -> None:
    s = Settings()  # a new user's drafter settings: prompt lookup, the default k
    s.model.target_path = SMOL
    s.model.n_ctx = 2048
    s.sampling = SamplingParams(temperature=0.0, max_tokens=120)
    app, w = open_main_window(s)
    assert w.model_bar.k_spin.value() == 16
    converse(w, CODE_EDIT_TURNS)
    shot("default-k16.png")
    w.close()
    app.quit()


if __name__ == "__main__":
    main()

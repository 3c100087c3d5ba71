"""Screenshot for round 4: Auto's first reply in a fresh session. With nothing to replay
it used to decode plainly; it now runs the suffix drafter (reason ``prior``), and the
reply's footer says so.

Run from the repository root under Xvfb with a window manager, for example:

    Xvfb :99 -screen 0 1400x900x24 & DISPLAY=:99 openbox &
    DISPLAY=:99 .venv/bin/python docs/screenshots/make_round4_screenshots.py docs/screenshots

It uses Gemma 3 270M from the test models and a scratch TANDEM_HOME, at the default
temperature (0.8, seed 11). Speeds shown depend on the machine.
"""
from __future__ import annotations

from shots import make_shot, open_main_window, scratch_home, wait

ROOT, OUT = scratch_home("round4")

from app.store.settings import Settings  # noqa: E402

GEMMA = ROOT / ".cache/test-models/gemma-3-270m-q4_k_m.gguf"

shot = make_shot(OUT)


def main() -> None:
    s = Settings()
    s.model.target_path = GEMMA
    s.model.n_ctx = 2048
    s.model.n_gpu_layers = 0
    s.sampling = s.sampling.model_copy(update={"seed": 11, "max_tokens": 96})
    s.speculation = s.speculation.with_changes(mode="auto", draft_max=8)
    app, w = open_main_window(s)
    c = w.controller
    assert c.send_message("Write a short Python function that returns the squares of a list, "
                          "then show it once more with type hints.")
    wait(lambda: c.reply is None and c.last_reply_id is not None)
    w.raise_()
    shot("auto-first-reply.png")
    w.close()
    app.processEvents()


if __name__ == "__main__":
    main()

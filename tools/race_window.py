"""Open the race window on its own: ``python tools/race_window.py --model M [options]``.

For trying the race without the chat window (and for screenshots): loads the target (and
optional draft model) on a chat service, offers the history store's conversations to the
prompt-lookup estimate, and with ``--start`` starts a race at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options, open the window, run until it is closed. Returns 0."""
    p = argparse.ArgumentParser(prog="tools/race_window.py", description=__doc__)
    p.add_argument("--model", required=True, type=Path, help="target model GGUF")
    p.add_argument("--draft", type=Path, help="draft model GGUF (default: prompt lookup)")
    p.add_argument("--example", default=None, help="a builtin example prompt, e.g. rename-variable")
    p.add_argument("--prompt", default="", help="a custom prompt text")
    p.add_argument("--k", type=int, default=4, help="draft length (4)")
    p.add_argument("--adaptive", action="store_true",
                   help="k is a maximum: the engine's cost-aware draft length (default: exactly k)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--temp", type=float, default=0.0)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--n-ctx", type=int, default=2048)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--start", action="store_true", help="start the race right away")
    p.add_argument("--size", default=None, metavar="WxH", help="window size, e.g. 1400x900")
    args = p.parse_args(argv)

    from app.chat.service import ChatService
    from app.engine.session import SessionConfig
    from app.options import SamplingParams, SpecMode, SpeculationConfig
    from app.store.history import HistoryError, HistoryStore
    from app.ui.launch import create_application
    from app.ui.race import RaceWindow, conversations_from_history
    from app.ui.service_bridge import ServiceBridge

    qapp = create_application(sys.argv[:1])
    service = ChatService()
    bridge = ServiceBridge(service)
    try:
        model = service.load(SessionConfig(target_path=args.model, draft_path=args.draft,
                                           n_ctx=args.n_ctx, n_threads=args.threads)).result()
        try:
            with HistoryStore.open() as store:
                conversations = conversations_from_history(store)
        except HistoryError:
            conversations = []
        mode = SpecMode.DRAFT_MODEL if args.draft else SpecMode.PROMPT_LOOKUP
        window = RaceWindow(
            bridge, model,
            sampling=SamplingParams(temperature=args.temp, seed=args.seed,
                                    max_tokens=args.max_tokens),
            speculation=SpeculationConfig(mode=mode, draft_max=args.k, adaptive=args.adaptive),
            prompt=args.prompt,
            conversations=conversations,
        )
        if args.example:
            window.select_example(args.example)
        if args.size:
            width, height = (int(v) for v in args.size.lower().split("x"))
            window.resize(width, height)
        window.show()
        if args.start:
            window.start_race()
        status = qapp.exec()
        window.shutdown()
    finally:
        bridge.shutdown()
    return int(status)


if __name__ == "__main__":
    raise SystemExit(main())

"""Does the demo model loop in a three-turn code conversation, and do the demo's sampling
defaults stop it while speculation stays lossless?

The conversation: the starter "Add type hints to a function", then "Now add a docstring
to it.", then "Now write a pytest unit test for it." Each sampling setting runs the whole
conversation twice, speculation off and prompt lookup (each continuing its own replies),
and prints per turn: tokens, finish reason, whether the reply loops (a piece of 24+
characters repeated 3+ times back to back, or a line repeated 4+ times), and whether the
prompt-lookup reply has the same tokens as plain decoding.

    python bench/demo_loops.py [--model M] [--max-tokens 384] [--json]
    python bench/demo_loops.py --seeds 8     # sampled settings over seeds 1..8, plain only

Figures are counts of tokens and loops, not timings; a busy machine does not change them.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from _common import SMOLLM, require_model

from app.engine.chat import ChatMessage
from app.engine.reply import ReplyRecord
from app.engine.session import Session, SessionConfig
from app.options import SamplingParams, SpecMode, SpeculationConfig

TURNS = (
    "Add type hints to this Python function and give me back the whole function:\n\n```python\n"
    "def total_price(items, tax_rate=0.2):\n    total = 0\n    for item in items:\n"
    "        total += item['price'] * item['quantity']\n    return total * (1 + tax_rate)\n```",
    "Now add a docstring to it.",
    "Now write a pytest unit test for it.",
)
SETTINGS = {
    "greedy, no repetition control": SamplingParams(temperature=0.0),
    "greedy + DRY 0.8": SamplingParams(temperature=0.0, dry_multiplier=0.8),
    "T 0.2, top-p 0.9 (seed 7)": SamplingParams(temperature=0.2, top_p=0.9, seed=7),
    "T 0.2, top-p 0.9 + DRY 0.8 (seed 7)": SamplingParams(temperature=0.2, top_p=0.9, dry_multiplier=0.8, seed=7),
    "window default (T 0.8, seed 7)": SamplingParams(seed=7),
    "window default (T 0.8, seed 7) + DRY 0.8": SamplingParams(seed=7, dry_multiplier=0.8),
}
_REPEAT = re.compile(r"(.{24,}?)\1{2,}", re.S)


def loops(text: str) -> bool:
    """A piece of 24+ characters three times back to back, or one line 4+ times."""
    if _REPEAT.search(text):
        return True
    lines = [ln.strip() for ln in text.splitlines() if len(ln.strip()) >= 8]
    return any(lines.count(ln) >= 4 for ln in set(lines))


@dataclass
class Turn:
    tokens: int
    reason: str
    loops: bool


def conversation(session: Session, sampling: SamplingParams, mode: SpecMode,
                 max_tokens: int) -> tuple[list[Turn], list[tuple[int, ...]], list[str]]:
    messages: list[ChatMessage] = []
    turns, ids, texts = [], [], []
    spec = SpeculationConfig(mode=mode)
    for question in TURNS:
        messages.append(ChatMessage("user", question))
        fin = None
        for ev in session.chat(messages, sampling.with_changes(max_tokens=max_tokens), spec):
            if isinstance(ev, ReplyRecord):
                fin = ev
        assert fin is not None
        messages.append(ChatMessage("assistant", fin.text))
        turns.append(Turn(len(fin.token_ids), fin.reason, loops(fin.text)))
        ids.append(fin.token_ids)
        texts.append(fin.text)
    return turns, ids, texts


def seed_sweep(model: Path, seeds: int, max_tokens: int) -> int:
    """Loops and max-token endings per setting over ``seeds`` seeds (plain decoding)."""
    with Session.open(SessionConfig(target_path=model, n_ctx=4096)) as session:
        for label, sampling in SETTINGS.items():
            if sampling.greedy:
                continue
            looped = capped = 0
            for seed in range(1, seeds + 1):
                turns, _, _ = conversation(session, sampling.with_changes(seed=seed), SpecMode.OFF, max_tokens)
                looped += sum(t.loops for t in turns)
                capped += sum(t.reason == "length" for t in turns)
            print(f"{label.replace('(seed 7)', '').replace('seed 7', 'seeds')}: over {seeds} seeds × "
                  f"{len(TURNS)} turns, {looped} replies loop, {capped} reach {max_tokens} tokens", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(SMOLLM))
    ap.add_argument("--max-tokens", type=int, default=384)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--show", action="store_true", help="print the replies")
    ap.add_argument("--seeds", type=int, default=0,
                    help="instead: run each sampled setting over seeds 1..N (plain decoding only) "
                         "and count the turns that loop or reach max tokens")
    args = ap.parse_args(argv)
    model = require_model(Path(args.model))
    if args.seeds:
        return seed_sweep(model, args.seeds, args.max_tokens)
    results = []
    with Session.open(SessionConfig(target_path=model, n_ctx=4096)) as session:
        for label, sampling in SETTINGS.items():
            plain, plain_ids, plain_texts = conversation(session, sampling, SpecMode.OFF, args.max_tokens)
            spec, spec_ids, _ = conversation(session, sampling, SpecMode.PROMPT_LOOKUP, args.max_tokens)
            same = [a == b for a, b in zip(plain_ids, spec_ids)]
            results.append({"setting": label, "sampling": sampling.model_dump(mode="json"),
                            "plain": [asdict(t) for t in plain], "prompt_lookup": [asdict(t) for t in spec],
                            "identical": same})
            if not args.json:
                print(f"{label}:", flush=True)
                for i, (p, s, eq) in enumerate(zip(plain, spec, same)):
                    print(f"  turn {i + 1}: plain {p.tokens} tok ({p.reason}{', LOOPS' if p.loops else ''});"
                          f" prompt lookup {s.tokens} tok ({s.reason}{', LOOPS' if s.loops else ''});"
                          f" identical tokens: {eq}")
                if args.show:
                    for i, t in enumerate(plain_texts):
                        print(f"  --- plain turn {i + 1} ---\n{t}")
    if args.json:
        json.dump(results, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Prompt tokens read again per turn once a conversation overflows the context window:
the overflow policy's cut in steps (:data:`app.engine.context_fit.DROP_STEP_FRACTION`,
the default) against the fewest exchanges dropped each turn (a step of one token).

One conversation growing by one exchange (a numbered user message and a fixed reply,
so both runs see the same text) per turn past ``--n-ctx``; each turn runs
:meth:`Session.chat` for one reply token and records the prefill: tokens evaluated
(``SpecStats.prefill_tokens``, the prompt less what the KV cache kept; exact, not
disturbed by other work) and TTFT in seconds (disturbed by other work: see the
``disturbed`` flag). The two cuts alternate turn by turn on two sessions of the same
model, so both see the same machine load.

Usage:
    .venv/bin/python bench/overflow_prefill.py --model .cache/test-models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --n-ctx 1024 --turns 16 --policy truncate-middle --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import _common as C

from app.engine import context_fit
from app.engine.chat import ChatMessage
from app.engine.session import Session, SessionConfig
from app.options import ContextOverflow, SamplingParams

def user_text(turn: int) -> str:
    """The user message of turn ``turn`` (each turn's own, so no two prompts match)."""
    return (f"Log part {turn}: 2026-12-05 04:{turn % 60:02d}:00 worker[{turn % 7}] retried "
            f"request {turn} after a timeout. What stands out?")


REPLY = ("The worker keeps retrying after a timeout, which points at a slow upstream "
         "service rather than at the worker itself.")


def one_turn(session: Session, messages: list[ChatMessage], sampling: SamplingParams,
             step: float) -> dict[str, Any]:
    context_fit.DROP_STEP_FRACTION = step
    record = None
    for ev in session.chat(messages, sampling, None):
        record = ev
    stats = record.stats  # type: ignore[union-attr]
    return {"prompt": stats.prompt_tokens, "prefill": stats.prefill_tokens,
            "ttft": stats.ttft,
            "dropped": record.context.dropped_messages if record.context else 0}  # type: ignore[union-attr]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--n-ctx", type=int, default=1024)
    ap.add_argument("--turns", type=int, default=16, help="turns after the first overflow")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--policy", default="truncate-middle",
                    choices=[p.value for p in ContextOverflow if p is not ContextOverflow.STOP])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sampling = SamplingParams(temperature=0.0, max_tokens=64,
                              context_overflow=ContextOverflow(args.policy))
    stepped_default = context_fit.DROP_STEP_FRACTION
    config = SessionConfig(target_path=args.model, n_ctx=args.n_ctx, n_threads=args.threads)
    rows: dict[str, list[dict[str, Any]]] = {"steps": [], "fewest": []}
    other = C.OtherCpu()
    with Session.open(config) as a, Session.open(config) as b:
        messages = [ChatMessage("system", "You read logs for an on-call engineer.")]
        overflowed = 0
        while overflowed < args.turns:
            messages.append(ChatMessage("user", user_text(len(messages) // 2)))
            if len(a.chat_prompt(messages)) + context_fit.reply_room(args.n_ctx, 64) > args.n_ctx:
                overflowed += 1
                order = [("steps", a, stepped_default), ("fewest", b, 0.0)]
                for name, session, step in (order if overflowed % 2 else order[::-1]):
                    rows[name].append(one_turn(session, messages, sampling, step))
            else:  # fill both caches with the same conversation
                for session in (a, b):
                    one_turn(session, messages, sampling, stepped_default)
            messages.append(ChatMessage("assistant", REPLY))
    context_fit.DROP_STEP_FRACTION = stepped_default
    note = other.note()
    out = {
        "model": args.model.name, "n_ctx": args.n_ctx, "policy": args.policy,
        "turns": args.turns, "step_fraction": stepped_default,
        "disturbed": note["disturbed"], "other_cores": note["other_cores"],
        **{name: {"prefill_tokens_total": sum(r["prefill"] for r in rs),
                  "prefill_tokens_median": statistics.median(r["prefill"] for r in rs),
                  "ttft_median_s": statistics.median(r["ttft"] for r in rs),
                  "cut_moves": sum(1 for x, y in zip(rs, rs[1:]) if x["dropped"] != y["dropped"]),
                  "per_turn": rs}
           for name, rs in rows.items()},
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for name in rows:
            r = out[name]
            print(f"{name:7s} prefill tokens total {r['prefill_tokens_total']:6d}  median "
                  f"{r['prefill_tokens_median']:6.0f}  TTFT median {r['ttft_median_s']:.3f} s  "
                  f"cut moved {r['cut_moves']}×")
        print("disturbed" if note["disturbed"] else "quiet",
              f"(other work: {note['other_cores']} cores on average)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

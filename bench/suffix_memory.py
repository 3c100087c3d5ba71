"""Memory of the suffix drafter's reply index at N stored replies (default 1,000).

Builds a :class:`app.engine.suffix.SuffixIndex` from N synthetic replies the way the app
rebuilds it from history at start (one bulk load), then adds more replies one at a time
as the chat layer does when replies finish, and reports:

* ``memory_bytes``: the bytes of the index's arrays (text buffer with its spare
  capacity, suffix array, reply list) as :meth:`SuffixIndex.stats` counts them;
* ``traced_bytes`` / ``traced_peak_bytes``: what ``tracemalloc`` saw allocated by the
  index and at the peak of the bulk load's sort (NumPy reports its buffers to it);
* ``rss_delta_bytes``: the process's resident set growth over the build (coarse);
* the index's cap at its defaults (tokens, replies) and what is held at the cap;
* times of the bulk load, one ``add_reply`` and one draft (informational; a busy machine
  disturbs them — they are not benchmark figures).

Memory depends on the number of tokens and replies only, not on which tokens they are:
replies are random token ids (Zipf-distributed over the vocabulary, with repeated
snippets so that matches exist), their lengths uniform in ``[0.25, 1.75] × mean``.

Usage:
    .venv/bin/python bench/suffix_memory.py                      # 1,000 replies, mean 300 tokens
    .venv/bin/python bench/suffix_memory.py --replies 1000 --mean-tokens 600 --json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
import tracemalloc
from typing import Any

import _common as C  # puts the repository on sys.path
import numpy as np

from app.engine.suffix import SuffixDrafter, SuffixIndex


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def synthetic_replies(n: int, mean_tokens: int, vocab: int, seed: int) -> list[list[int]]:
    """``n`` replies of Zipf-distributed token ids, a third of each from shared snippets."""
    rng = np.random.default_rng(seed)
    snippets = [(rng.zipf(1.2, int(rng.integers(8, 40))) % vocab).tolist() for _ in range(200)]
    out: list[list[int]] = []
    for _ in range(n):
        length = int(rng.integers(max(1, mean_tokens // 4), max(2, mean_tokens * 7 // 4)))
        reply: list[int] = []
        while len(reply) < length:
            if rng.random() < 0.33:
                reply += snippets[int(rng.integers(len(snippets)))]
            else:
                reply += (rng.zipf(1.2, int(rng.integers(5, 30))) % vocab).tolist()
        out.append(reply[:length])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replies", type=int, default=1000, help="stored replies (1000)")
    ap.add_argument("--mean-tokens", type=int, default=300, help="mean reply length (300)")
    ap.add_argument("--vocab", type=int, default=262144, help="vocabulary size (262144)")
    ap.add_argument("--more", type=int, default=50, help="replies added one by one after (50)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    replies = synthetic_replies(args.replies + args.more, args.mean_tokens, args.vocab, args.seed)
    bulk, more = replies[: args.replies], replies[args.replies :]
    rss0 = _rss_bytes()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    index = SuffixIndex()
    t0 = time.perf_counter()
    index.load_replies(bulk)
    t_bulk = time.perf_counter() - t0
    traced, peak = tracemalloc.get_traced_memory()
    at_n = index.stats()
    rss1 = _rss_bytes()
    add_times = []
    for r in more:
        t = time.perf_counter()
        index.add_reply(r)
        add_times.append(time.perf_counter() - t)
    traced_more, peak_more = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    after = index.stats()

    drafter = SuffixDrafter(index)
    ctx = [1, *replies[7][:40], *replies[3][:60]]
    drafter.begin(ctx)
    draft_times = []
    for _ in range(200):
        t = time.perf_counter()
        drafter.draft(ctx, 16)
        draft_times.append(time.perf_counter() - t)

    result: dict[str, Any] = {
        "replies": at_n.replies,
        "tokens": at_n.tokens,
        "mean_tokens_per_reply": at_n.tokens / max(1, at_n.replies),
        "memory_bytes": at_n.memory_bytes,
        "memory_bytes_per_token": at_n.memory_bytes / max(1, at_n.tokens),
        "traced_bytes": traced - base,
        "traced_peak_bytes": peak - base,
        "rss_delta_bytes": rss1 - rss0,
        "after_more": {"replies": after.replies, "tokens": after.tokens,
                       "tail_tokens": after.tail_tokens, "memory_bytes": after.memory_bytes,
                       "traced_bytes": traced_more - base,
                       "traced_peak_bytes": peak_more - base, "rebuilds": after.rebuilds},
        "cap": {"max_tokens": index.max_tokens, "max_replies": index.max_replies,
                "max_match": index.max_match},
        "times_informational": {
            "bulk_load_s": t_bulk,
            "add_reply_median_s": statistics.median(add_times) if add_times else None,
            "add_reply_max_s": max(add_times) if add_times else None,
            "draft_median_s": statistics.median(draft_times),
        },
        "machine": C.machine_note(),
    }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        mib = 1 / 2**20
        print(f"{result['replies']} replies, {result['tokens']} tokens "
              f"(mean {result['mean_tokens_per_reply']:.0f}/reply)")
        print(f"index arrays: {result['memory_bytes'] * mib:.2f} MiB "
              f"({result['memory_bytes_per_token']:.1f} B/token); tracemalloc: "
              f"{result['traced_bytes'] * mib:.2f} MiB held, "
              f"{result['traced_peak_bytes'] * mib:.2f} MiB peak during the bulk load; "
              f"RSS +{result['rss_delta_bytes'] * mib:.1f} MiB")
        a = result["after_more"]
        print(f"after {args.more} more add_reply calls: {a['replies']} replies, "
              f"{a['memory_bytes'] * mib:.2f} MiB, tail {a['tail_tokens']} positions, "
              f"peak {a['traced_peak_bytes'] * mib:.2f} MiB")
        cap = result["cap"]
        print(f"cap: {cap['max_tokens']} tokens / {cap['max_replies']} replies "
              f"(oldest evicted first), match depth {cap['max_match']}")
        t = result["times_informational"]
        print(f"times (informational, machine load {result['machine']['loadavg']}): bulk "
              f"{t['bulk_load_s'] * 1e3:.0f} ms, add_reply median "
              f"{(t['add_reply_median_s'] or 0) * 1e3:.2f} ms (max "
              f"{(t['add_reply_max_s'] or 0) * 1e3:.0f} ms), draft median "
              f"{t['draft_median_s'] * 1e3:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Returning to a long conversation after another prompt ran: the prefix cache's effect
on TTFT, and the two ways of keeping a conversation's KV state that it chose between.

``ttft`` (the product): a conversation with a long paste gets a reply; then either an API
completion or another conversation runs on the same session; then the first conversation
goes on ("Say hello."). Measured: that last reply's TTFT and prefill tokens, without the
prefix cache (``prefix_cache_bytes=0``: before) and with it (after), alternating, medians
over ``--repeat``. The prefill token counts do not depend on the machine's load.

``ways``: the two designs for keeping several conversations' KV state, on the same model
and conversation length:

* **state saved and restored** (what Tandem does, :mod:`app.engine.prefix_cache`): the
  time to copy sequence 0's state out (``llama_state_seq_get_data``) and back in
  (``llama_state_seq_set_data``), and its bytes;
* **several sequences in one context** (``n_seq_max = 2``, unified KV cache of twice the
  window): no copy on a switch, but every decode step of one conversation attends over
  the cells the other holds; measured as the one-token decode time of a short sequence
  with the other (``--tokens`` long) resident ÷ alone, in the same context.

Usage:
    nice -n 19 .venv/bin/python bench/prefix_cache.py                  # SmolLM2, both parts
    nice -n 19 .venv/bin/python bench/prefix_cache.py --part ttft --repeat 3 --json
    nice -n 19 .venv/bin/python bench/prefix_cache.py --model M.gguf --tokens 3000
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import _common as C

from app.engine.chat import ChatMessage, tokenize_plain
from app.engine.reply import ReplyRecord
from app.engine.llama import LlamaContext, LlamaModel, lib
from app.engine.session import Session, SessionConfig
from app.options import SamplingParams, SpecMode, SpeculationConfig

CODE = "".join(
    f"def handler_{i}(request, store):\n"
    f"    \"\"\"Answer request {i} from the store.\"\"\"\n"
    f"    item = store.get(request.key_{i % 7})\n"
    f"    if item is None:\n"
    f"        return {{'status': 404, 'id': {i}}}\n"
    f"    return {{'status': 200, 'value': item.value * {i % 5 + 1}}}\n\n"
    for i in range(400))
PLAIN = SpeculationConfig(mode=SpecMode.OFF)


def _finished(events: Any) -> ReplyRecord:
    fin = None
    for ev in events:
        if isinstance(ev, ReplyRecord):
            fin = ev
    assert fin is not None
    return fin


def _paste(model: LlamaModel, tokens: int) -> str:
    """The first lines of CODE that make about ``tokens`` tokens."""
    lines = CODE.splitlines(keepends=True)
    lo, hi = 1, len(lines)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(model.tokenize("".join(lines[:mid]), add_special=False, parse_special=False)) <= tokens:
            lo = mid
        else:
            hi = mid - 1
    return "".join(lines[:lo])


def ttft_once(model_path: Path, n_ctx: int, tokens: int, cache_bytes: int, between: str,
              threads: int | None) -> dict[str, Any]:
    """One return to a long conversation after ``between`` (``api`` or ``chat``) ran."""
    cfg = SessionConfig(target_path=model_path, n_ctx=n_ctx, n_threads=threads,
                        prefix_cache_bytes=cache_bytes)
    sampling = SamplingParams(temperature=0.0, max_tokens=32)
    with Session.open(cfg) as s:
        paste = _paste(s.target, tokens)
        conv = [ChatMessage("user", "Explain what this code does.\n\n" + paste)]
        first = _finished(s.chat(conv, sampling, PLAIN))
        if between == "api":
            _finished(s.generate(tokenize_plain(s.target, "Once upon a time, in a quiet town,"),
                                 SamplingParams(temperature=0.0, max_tokens=16), PLAIN))
        else:
            _finished(s.chat([ChatMessage("user", "Write a haiku about the sea.")],
                             SamplingParams(temperature=0.0, max_tokens=16), PLAIN))
        again = [*conv, ChatMessage("assistant", first.text), ChatMessage("user", "Say hello.")]
        back = _finished(s.chat(again, SamplingParams(temperature=0.0, max_tokens=8), PLAIN))
    st = back.stats
    return {"ttft_s": round(st.ttft, 4), "prefill_tokens": st.prefill_tokens,
            "prompt_tokens": st.prompt_tokens, "first_prompt_tokens": first.stats.prompt_tokens}


def part_ttft(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for between in ("api", "chat"):
        runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        for _ in range(args.repeat):
            for label, cache in (("before", 0), ("after", 2**30)):
                runs[label].append(ttft_once(args.model, args.n_ctx, args.tokens, cache,
                                             between, args.threads))
        row = {}
        for label, rs in runs.items():
            row[label] = {"ttft_s_median": statistics.median(r["ttft_s"] for r in rs),
                          "ttft_s": [r["ttft_s"] for r in rs],
                          "prefill_tokens": sorted({r["prefill_tokens"] for r in rs}),
                          "prompt_tokens": rs[0]["prompt_tokens"]}
        row["ttft_ratio_after_over_before"] = round(
            row["after"]["ttft_s_median"] / row["before"]["ttft_s_median"], 4)
        out[between] = row
    return out


# -- the two ways ----------------------------------------------------------------------
def _multi_seq_context(model: LlamaModel, n_ctx: int, threads: int) -> Any:
    L = lib()
    p = L.llama_context_default_params()
    p.n_ctx, p.n_batch, p.n_ubatch = n_ctx, 512, 512
    p.n_seq_max, p.kv_unified, p.swa_full = 2, True, False
    p.n_threads = p.n_threads_batch = threads
    p.no_perf = True
    ctx = L.llama_init_from_model(model.ptr, p)
    if not ctx:
        sys.exit("error: could not create the two-sequence context")
    return ctx


def _decode(ctx: Any, batch: Any, tokens: list[int], pos0: int, seq: int) -> None:
    L = lib()
    for start in range(0, len(tokens), 512):
        chunk = tokens[start:start + 512]
        for i, t in enumerate(chunk):
            batch.token[i], batch.pos[i] = t, pos0 + start + i
            batch.n_seq_id[i], batch.logits[i] = 1, 0
            batch.seq_id[i][0] = seq
        batch.logits[len(chunk) - 1] = 1
        batch.n_tokens = len(chunk)
        if L.llama_decode(ctx, batch) != 0:
            sys.exit("error: llama_decode failed")


def _paired_step_ratios(a: Any, b: Any, batch: Any, pos0: int, steps: int) -> list[float]:
    """One-token decodes on sequence 1 of context ``a`` and of ``b`` from ``pos0``,
    alternating (so both see the same load); each step's time in ``a`` ÷ in ``b``."""
    ratios = []
    for i in range(steps):
        dt = []
        for ctx in (a, b):
            t = time.perf_counter()
            _decode(ctx, batch, [100 + i % 50], pos0 + i, 1)
            dt.append(time.perf_counter() - t)
        if i >= 2:  # the first steps build graphs
            ratios.append(dt[0] / dt[1])
    return ratios


def part_ways(args: argparse.Namespace) -> dict[str, Any]:
    L = lib()
    threads = args.threads or 2
    model = LlamaModel(args.model, n_gpu_layers=0)
    conv = tokenize_plain(model, _paste(model, args.tokens))
    short = tokenize_plain(model, "Write a haiku about the sea.")
    # state saved and restored, in the session's own kind of context
    ctx = LlamaContext(model, n_ctx=args.n_ctx, n_threads=threads)
    ctx.decode(conv, 0, logits="none")
    save: list[float] = []
    load: list[float] = []
    size = 0
    for _ in range(5):
        t = time.perf_counter()
        data = ctx.state_bytes()
        save.append(time.perf_counter() - t)
        size = len(data)
        t = time.perf_counter()
        assert ctx.load_state(data)
        load.append(time.perf_counter() - t)
    assert ctx.pos_max() == len(conv) - 1
    t = time.perf_counter()
    ctx.clear()
    ctx.decode(conv, 0, logits="last")
    reread = time.perf_counter() - t
    ctx.close()
    # several sequences in one context: a short conversation's decode steps with the
    # long one resident (context a) and alone (context b, same size), alternating
    a = _multi_seq_context(model, 2 * args.n_ctx, threads)
    b = _multi_seq_context(model, 2 * args.n_ctx, threads)
    batch = L.llama_batch_init(512, 0, 2)
    _decode(a, batch, conv, 0, 0)
    for ctx_ in (a, b):
        _decode(ctx_, batch, short, 0, 1)
    ratios = _paired_step_ratios(a, b, batch, len(short), args.steps * args.repeat)
    L.llama_batch_free(batch)
    L.llama_free(a)
    L.llama_free(b)
    kv_one = model.kv_cache_bytes(args.n_ctx)
    model.close()
    return {
        "conversation_tokens": len(conv),
        "state": {"bytes": size, "save_s_median": statistics.median(save),
                  "restore_s_median": statistics.median(load), "reread_s": reread},
        "multi_seq": {"step_pairs": len(ratios),
                      "step_ratio_quartiles": [round(q, 4) for q in statistics.quantiles(ratios, n=4)],
                      "step_ratio_median": round(statistics.median(ratios), 4),
                      "kv_bytes_allocated": 2 * kv_one, "kv_bytes_one_window": kv_one},
    }


def _print(data: dict[str, Any]) -> None:
    print(f"model: {data['model']}  (machine: {data['machine']})")
    if "ways" in data:
        w = data["ways"]
        st, ms = w["state"], w["multi_seq"]
        print(f"ways, a {w['conversation_tokens']}-token conversation:")
        print(f"  state saved/restored: {st['bytes'] / C.MiB:.1f} MiB, save "
              f"{st['save_s_median'] * 1000:.1f} ms, restore {st['restore_s_median'] * 1000:.1f} ms"
              f" (re-reading it: {st['reread_s']:.2f} s)")
        print(f"  several sequences: decode step beside it / alone = {ms['step_ratio_median']}"
              f" (median of {ms['step_pairs']} interleaved pairs; quartiles "
              f"{ms['step_ratio_quartiles']}), KV allocated "
              f"{ms['kv_bytes_allocated'] / C.MiB:.0f} MiB vs {ms['kv_bytes_one_window'] / C.MiB:.0f} MiB")
    for between, row in data.get("ttft", {}).items():
        print(f"return after {'an API request' if between == 'api' else 'another conversation'}"
              f" ({row['before']['prompt_tokens']} prompt tokens):")
        for label in ("before", "after"):
            r = row[label]
            print(f"  {label:6}: TTFT median {r['ttft_s_median']:.3f} s {r['ttft_s']}, "
                  f"prefill tokens {r['prefill_tokens']}")
        print(f"  after / before: {row['ttft_ratio_after_over_before']}")
    if data.get("disturbed"):
        print(C.disturbed_line(data["machine"], data["during"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=C.SMOLLM)
    ap.add_argument("--part", choices=("both", "ttft", "ways"), default="both")
    ap.add_argument("--tokens", type=int, default=3000, help="the long paste, tokens")
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", type=int, default=24, help="decode steps timed (ways)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    C.require_model(args.model)
    before = C.machine_note()
    other = C.OtherCpu()
    data: dict[str, Any] = {"model": args.model.name, "machine": before,
                            "n_ctx": args.n_ctx, "repeat": args.repeat}
    if args.part in ("both", "ways"):
        data["ways"] = part_ways(args)
    if args.part in ("both", "ttft"):
        data["ttft"] = part_ttft(args)
    data["during"] = other.note()
    data["disturbed"] = C.disturbed(before, data["during"])
    return C.report("prefix_cache", data, args.json, _print)


if __name__ == "__main__":
    raise SystemExit(main())

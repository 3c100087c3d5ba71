"""Tandem's model-free drafters against llama.cpp's n-gram modes, in one run.

Same llama.cpp build (the llama-cpp-python sdist 0.3.36, vendored llama.cpp 0c1e57098;
``bench/build_llama_tools.sh``), same model, prompts, draft length k, threads and number
of generated tokens, greedy, interleaved per prompt so that drifts of the machine hit
every configuration alike. Configurations:

* Tandem: plain decoding, prompt lookup, the suffix drafter (each at k, with Tandem's
  default cost-aware draft length unless ``--fixed-k``), optionally a draft model;
* llama.cpp through ``llama-speculative-simple --spec-type <mode>``: ``ngram-simple``,
  ``ngram-map-k``, ``ngram-mod``, and ``ngram-cache`` where it applies (its draft length
  is fixed at 8 in common/speculative.cpp, so only when k = 8); optionally
  ``draft-simple`` with the same draft model; plain decoding is ``llama-bench`` tg at the
  prompt's depth (``llama-speculative-simple`` refuses ``--spec-type none``).

How each llama.cpp mode gets k (common/speculative.cpp, common/arg.cpp of that sdist):
``ngram-simple`` and ``ngram-map-k`` draft the m-gram that followed the last n-gram:
``--spec-ngram-*-size-m k``, with n = ``--ngram-n`` (default llama.cpp's 12, lowered to
k for ngram-simple, which drafts nothing when m < n). ``ngram-mod`` hashes n_match-token
contexts (``--spec-ngram-mod-n-match``, default 24) and drafts up to n_max:
``--spec-ngram-mod-n-max k --spec-ngram-mod-n-min 1`` (llama.cpp's default n_min of 48
would forbid any draft shorter than 48). ``--spec-draft-n-max k`` is passed too.

Every timed run generates exactly ``--n-predict`` tokens without stop strings on both
sides (llama-speculative-simple has none; it may run up to k tokens past ``-n`` and its
own count and time are used), so both decode the same tokens. Multi-turn sets
(``builtin:agent``) give each turn the whole conversation so far; the earlier replies
are Tandem's plain replies cut at the turn's stop strings, and they also feed Tandem's
suffix index (emptied each repeat), as the app does. llama.cpp's tools start fresh for
every prompt (in llama-server an ngram-mod table would persist across a slot's requests).

Near-ties: on llama.cpp's default CPU kernels a batch of n tokens is not computed bit for
bit like n one-token passes (docs/proof.md), so a speculative run can part from plain
decoding where two tokens nearly tie, and then decodes other text at another speed: on
``builtin:code`` suffix lookup ran the f-strings prompt at 90–94 tok/s on the text it
parted to and at 146–155 on plain decoding's (with ``--exact``). That
lottery hits Tandem and llama.cpp alike but not in the same runs. ``--exact`` runs
Tandem with exact verification (``SessionConfig.exact_verification``: weight repacking
off, flash attention on, a Q8_0 KV cache, ``GGML_CPU_TILED_MM=0`` set here before
llama.cpp loads; plain decoding then runs in that configuration too), so every Tandem
reply equals its plain reply; ``--llama-exact`` adds llama.cpp's modes in the same
configuration (``-nr -fa on -ctk q8_0 -ctv q8_0``, labelled ``llama-exact <mode>``).
llama.cpp's best n-gram mode is then the best of both configurations. Plain decoding
stays one figure per side: Tandem's in its configuration (exact with ``--exact``) and
``llama-bench`` tg with llama.cpp's defaults, which is also the "× own plain" of the
``llama-exact`` rows.

Reported, medians over all (prompt, repeat) runs: decode tok/s per configuration, α,
each configuration's speedup over its own tool's plain decoding and over Tandem plain,
and the headline ratios (Tandem best ÷ Tandem plain, Tandem best ÷ llama.cpp
best n-gram mode, Tandem plain ÷ llama-bench tg, Tandem draft model ÷ draft-simple).
Results also go to bench/out/vs_ngram-*.json. A run on a busy machine is marked
``disturbed`` (load average before it, or other processes' CPU time during it:
``_common.OtherCpu``).

Usage:
    .venv/bin/python bench/vs_ngram.py --prompts builtin:code --k 16 --threads 2 --n-predict 128 --repeat 3
    .venv/bin/python bench/vs_ngram.py --prompts builtin:agent --k 8 --draft-model self
    .venv/bin/python bench/vs_ngram.py --prompts builtin:code --k 16 --exact --llama-exact
    .venv/bin/python bench/vs_ngram.py --limit 1 --repeat 1 --n-predict 16      # dry run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import _common as C
from vs_llamacpp import _ACCEPT_RE, _DECODED_RE, _DRAFTED_RE, _ENCODED_RE, run_llama_bench

from app.engine.exact import TILED_MM_ENV
from app.engine.measure.bench import generate_once
from app.engine.measure.multiturn import Conversation, load_conversations, prepare_turn
from app.engine.measure.prompts import resolve_format
from app.engine.session import Session, SessionConfig
from app.options import FREE_DRAFTER_K, SamplingParams, SpeculationConfig

LLAMA_NGRAM_MODES = ("ngram-simple", "ngram-map-k", "ngram-mod", "ngram-cache")
TANDEM_MODES = ("prompt-lookup", "suffix")
NGRAM_CACHE_K = 8  # common/speculative.cpp: create_state_ngram_cache, n_draft = 8


def llama_mode_args(mode: str, k: int, args: argparse.Namespace) -> list[str]:
    """The llama-speculative-simple flags that make ``mode`` draft up to k tokens."""
    out = ["--spec-type", mode, "--spec-draft-n-max", str(k), "--spec-draft-n-min", "0"]
    if mode == "ngram-simple":
        out += ["--spec-ngram-simple-size-n", str(min(args.ngram_n, k)),
                "--spec-ngram-simple-size-m", str(k)]
    elif mode == "ngram-map-k":
        out += ["--spec-ngram-map-k-size-n", str(args.ngram_n), "--spec-ngram-map-k-size-m", str(k)]
    elif mode == "ngram-mod":
        out += ["--spec-ngram-mod-n-match", str(args.ngram_mod_n_match),
                "--spec-ngram-mod-n-max", str(k), "--spec-ngram-mod-n-min", "1"]
    elif mode == "draft-simple":
        out += ["-md", str(args.draft_model), "-td", str(args.threads),
                "--spec-draft-p-min", "0"]
        if args.n_gpu_layers is not None:
            out += ["-ngld", str(args.n_gpu_layers)]
    return out


#: llama.cpp's flags for Tandem's exact-verification configuration (app/engine/exact.py:
#: no weight repacking, flash attention, Q8_0 K and V cache), with GGML_CPU_TILED_MM=0
LLAMA_EXACT_ARGS = ("-nr", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0")


def run_llama_spec(args: argparse.Namespace, mode: str, prompt: str,
                   exact: bool = False) -> dict[str, Any]:
    """One llama-speculative-simple run; its decode speed, counts and output text.
    ``exact``: in Tandem's exact-verification configuration (:data:`LLAMA_EXACT_ARGS`)."""
    argv = [
        str(C.tool("llama-speculative-simple", args.tools)), "-m", str(args.model),
        *llama_mode_args(mode, args.k, args),
        "-p", prompt, "-n", str(args.n_predict), "-c", str(args.n_ctx), "-b", str(args.n_ctx),
        "-t", str(args.threads), "--temp", "0", "--seed", "1",
        *(LLAMA_EXACT_ARGS if exact else ()),
    ]
    if args.n_gpu_layers is not None:
        argv += ["-ngl", str(args.n_gpu_layers)]
    # llama.cpp's common log is written by a worker thread that is not flushed at exit
    # (common/log.cpp, its worker thread): on a busy machine the summary lines can be
    # lost although the run succeeded. Such a run is repeated (at most twice).
    for attempt in range(3):
        res = C.run_child(argv, env=C.tiled_kernel_env(exact))
        log = res.stdout + "\n" + res.stderr
        m = _DECODED_RE.search(log)
        if res.returncode != 0 or m is not None:
            break
    if res.returncode != 0 or m is None:
        raise RuntimeError(f"llama-speculative-simple --spec-type {mode} failed "
                           f"({res.returncode}): {res.stderr[-2000:]}")
    enc = _ENCODED_RE.search(log)
    dr = _DRAFTED_RE.search(log)
    ac = _ACCEPT_RE.search(log)
    return {
        "tps": int(m.group(1)) / float(m.group(2)),
        "decoded": int(m.group(1)),
        "prompt_tokens": int(enc.group(1)) if enc else None,
        "drafted": int(dr.group(1)) if dr else 0,
        "accepted": int(ac.group(1)) if ac else 0,
        "stdout": res.stdout,
        "attempts": attempt + 1,
        "argv": [a if a != prompt else "<prompt>" for a in argv],
    }


def cut_at_stop(text: str, stops: tuple[str, ...]) -> str:
    """``text`` up to the first of ``stops`` (the reply the app would have kept)."""
    cut = len(text)
    for s in stops:
        i = text.find(s)
        if i >= 0:
            cut = min(cut, i)
    return text[:cut]


def turn_text(session: Session, conv: Conversation, turn: int, replies: list[str],
              fmt: str) -> str:
    """The prompt text llama.cpp gets for a turn (what Tandem tokenizes, as text)."""
    t = conv.turns
    if fmt == "plain":
        return "".join(t[i].plain + replies[i] for i in range(turn)) + t[turn].plain
    from app.engine.chat import ChatMessage

    msgs = [ChatMessage("system", conv.system)] if conv.system else []
    for i in range(turn):
        msgs += [ChatMessage("user", t[i].chat), ChatMessage("assistant", replies[i])]
    msgs.append(ChatMessage("user", t[turn].chat))
    text = session.chat_format.render(msgs)
    target = session.target
    bos = target.token_text(target.bos).decode("utf-8", "replace") if target.bos >= 0 else ""
    return text[len(bos):] if bos and text.startswith(bos) else text  # llama adds its own BOS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=C.GEMMA)
    ap.add_argument("--prompts", default="builtin:code", help="builtin:code / chat / agent or a file")
    ap.add_argument("--limit", type=int, default=None, help="first N prompts (conversations)")
    ap.add_argument("--k", type=int, default=FREE_DRAFTER_K,
                    help=f"draft length, both sides ({FREE_DRAFTER_K}: Tandem's default for "
                         "model-free drafters)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-predict", type=int, default=128)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--n-gpu-layers", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--format", choices=("auto", "plain", "chat"), default="auto")
    ap.add_argument("--fixed-k", action="store_true",
                    help="Tandem drafts up to k every round (default: its cost-aware length)")
    ap.add_argument("--ngram-n", type=int, default=12,
                    help="lookup n-gram of ngram-simple/ngram-map-k (llama.cpp's 12)")
    ap.add_argument("--ngram-mod-n-match", type=int, default=24, help="ngram-mod context (24)")
    ap.add_argument("--llama-modes", default=",".join(LLAMA_NGRAM_MODES),
                    help="llama.cpp n-gram modes to run (comma-separated)")
    ap.add_argument("--tandem-modes", default=",".join(TANDEM_MODES))
    ap.add_argument("--draft-model", default=None,
                    help="also Tandem draft model vs llama draft-simple ('self': the target)")
    ap.add_argument("--exact", action="store_true",
                    help="Tandem with exact verification (module doc; its plain decoding too)")
    ap.add_argument("--llama-exact", action="store_true",
                    help="also llama.cpp's n-gram modes in the exact configuration")
    ap.add_argument("--skip-llama-bench", action="store_true", help="no llama-bench tg baseline")
    ap.add_argument("--tools", type=Path, default=C.TOOLS)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    C.require_model(args.model)
    if args.draft_model == "self":
        args.draft_model = args.model
    elif args.draft_model is not None:
        args.draft_model = C.require_model(Path(args.draft_model))
    llama_modes = [m for m in args.llama_modes.split(",") if m]
    skipped: list[str] = []
    if "ngram-cache" in llama_modes and args.k != NGRAM_CACHE_K:
        llama_modes.remove("ngram-cache")
        skipped.append(f"ngram-cache (its draft length is fixed at {NGRAM_CACHE_K}; k = {args.k})")
    tandem_modes = [m for m in args.tandem_modes.split(",") if m]
    conversations = load_conversations(args.prompts)
    if args.limit is not None:
        conversations = conversations[: max(1, args.limit)]
    if args.llama_exact and not args.exact:
        print("note: --llama-exact without --exact: llama.cpp's exact replies are compared "
              "with Tandem's plain replies on the default kernels, which can differ",
              file=sys.stderr)
    if args.exact:
        # read by ggml once, at its first matrix product in this process (app/engine/llama.py)
        os.environ[TILED_MM_ENV] = "0"
    before = C.machine_note()
    other_cpu = C.OtherCpu()

    config = SessionConfig(target_path=args.model, draft_path=args.draft_model,
                           n_ctx=args.n_ctx, n_threads=args.threads,
                           n_gpu_layers=args.n_gpu_layers, exact_verification=args.exact)
    sampling = SamplingParams(temperature=0.0, max_tokens=args.n_predict)  # no stop strings
    specs: dict[str, SpeculationConfig] = {"tandem plain": SpeculationConfig(mode="off")}
    for m in tandem_modes:
        specs[f"tandem {m}"] = SpeculationConfig(mode=m, draft_max=args.k,  # type: ignore[arg-type]
                                                 adaptive=not args.fixed_k)
    if args.draft_model is not None:
        specs["tandem draft-model"] = SpeculationConfig(mode="draft-model", draft_max=args.k,
                                                        adaptive=False)
    llama_labels = [f"llama {m}" for m in llama_modes]
    if args.llama_exact:
        llama_labels += [f"llama-exact {m}" for m in llama_modes]
    if args.draft_model is not None:
        llama_labels.append("llama draft-simple")
    labels = list(specs) + ([] if args.skip_llama_bench else ["llama-bench tg"]) + llama_labels
    rows: list[dict[str, Any]] = []
    with Session.open(config) as session:
        if args.exact and not session.exact_verification:
            sys.exit("error: exact verification is not possible for this model here: "
                     + " ".join(session.notes))
        fmt = resolve_format(session, args.format)  # type: ignore[arg-type]
        warm_prompt = prepare_turn(session, conversations[0], 0, [], fmt)
        warm = sampling.model_copy(update={"max_tokens": 8})
        for spec in specs.values():
            generate_once(session, warm_prompt, warm, spec)
        n_turns = sum(len(c.turns) for c in conversations)
        step = 0
        for rep in range(args.repeat):
            session.suffix_index.clear()
            for conv in conversations:
                replies: list[str] = []
                for ti, turn in enumerate(conv.turns):
                    prompt = prepare_turn(session, conv, ti, replies, fmt)
                    text = turn_text(session, conv, ti, replies, fmt)
                    rot = step % len(labels)
                    step += 1
                    plain_fin = None
                    for label in labels[rot:] + labels[:rot]:
                        row: dict[str, Any] = {"config": label, "prompt": prompt.name,
                                               "repeat": rep, "prompt_tokens": len(prompt.tokens)}
                        if label in specs:
                            # as llama.cpp's tools decode: n_predict tokens or up to
                            # the end-of-generation token, no stop strings
                            fin = generate_once(session, replace(prompt, stop=()), sampling,
                                                specs[label])
                            s = fin.stats
                            row.update(tps=s.decode_tps, emitted=s.emitted, drafted=s.verified,
                                       accepted=s.accepted, rounds=s.rounds, text=fin.text)
                            if label == "tandem plain":
                                plain_fin = fin
                        elif label == "llama-bench tg":
                            lb = run_llama_bench(_bench_args(args), depth=len(prompt.tokens),
                                                 env=C.tiled_kernel_env(False))
                            row.update(tps=lb["tg_tps"], emitted=lb["n_gen"])
                        else:
                            tool, mode = label.split(" ", 1)
                            r = run_llama_spec(args, mode, text, exact=tool == "llama-exact")
                            row.update(tps=r["tps"], emitted=r["decoded"], drafted=r["drafted"],
                                       accepted=r["accepted"], llama_prompt_tokens=r["prompt_tokens"],
                                       stdout=r["stdout"], argv=r["argv"], attempts=r["attempts"])
                        rows.append(row)
                    assert plain_fin is not None
                    ref = plain_fin.text
                    for row in rows[-len(labels):]:
                        if "stdout" in row:  # llama prints prompt + reply: Tandem's reply in it?
                            row["same_reply_as_tandem_plain"] = bool(ref) and ref in row.pop("stdout")
                        elif "text" in row and row["config"] != "tandem plain":
                            row["same_reply_as_tandem_plain"] = row.pop("text") == ref
                        else:
                            row.pop("text", None)
                    _progress(step, n_turns * args.repeat, rows[-len(labels):])
                    reply = cut_at_stop(ref, turn.stop)
                    replies.append(reply)
                    session.suffix_index.add_reply(
                        session.target.tokenize(reply, add_special=False, parse_special=False))
    after = C.machine_note()
    during = other_cpu.note()
    result = _summarize(args, labels, rows, skipped, before, after, during, fmt)
    path = C.write_result("vs_ngram", result)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        _print(result)
    print(f"written: {path}", file=sys.stderr)
    return 0


def _bench_args(args: argparse.Namespace) -> argparse.Namespace:
    return argparse.Namespace(tools=args.tools, model=args.model, n_predict=args.n_predict,
                              threads=args.threads, n_gpu_layers=args.n_gpu_layers)


def _median(v: list[float]) -> float | None:
    return statistics.median(v) if v else None


def _summarize(args: argparse.Namespace, labels: list[str], rows: list[dict[str, Any]],
               skipped: list[str], before: dict[str, Any], after: dict[str, Any],
               during: dict[str, Any], fmt: str) -> dict[str, Any]:
    med = {lab: _median([r["tps"] for r in rows if r["config"] == lab and r.get("tps")])
           for lab in labels}
    t_plain = med.get("tandem plain")
    l_plain = med.get("llama-bench tg")
    configs = []
    for lab in labels:
        rs = [r for r in rows if r["config"] == lab]
        dr = sum(r.get("drafted", 0) for r in rs)
        ac = sum(r.get("accepted", 0) for r in rs)
        same = [r["same_reply_as_tandem_plain"] for r in rs if "same_reply_as_tandem_plain" in r]
        own = t_plain if lab.startswith("tandem") else l_plain
        configs.append({
            "config": lab, "runs": len(rs), "decode_tps_median": med[lab],
            "acceptance_rate": ac / dr if dr else None,
            "speedup_vs_own_plain": med[lab] / own if med[lab] and own else None,
            "speedup_vs_tandem_plain": med[lab] / t_plain if med[lab] and t_plain else None,
            "same_reply_as_tandem_plain": f"{sum(same)}/{len(same)}" if same else None,
        })

    def best(tools: tuple[str, ...], modes: tuple[str, ...]) -> tuple[str | None, float | None]:
        cands = [(lab, med[lab]) for lab in labels
                 if lab.split(" ", 1)[0] in tools and lab.split(" ", 1)[-1] in modes and med[lab]]
        return max(cands, key=lambda x: x[1] or 0.0) if cands else (None, None)

    tb, tb_tps = best(("tandem",), TANDEM_MODES)
    lbest, lb_tps = best(("llama", "llama-exact"), LLAMA_NGRAM_MODES)
    goals: dict[str, Any] = {
        "tandem_best": tb, "llama_best_ngram": lbest,
        "tandem_best_over_tandem_plain": tb_tps / t_plain if tb_tps and t_plain else None,
        "tandem_best_over_llama_best_ngram": tb_tps / lb_tps if tb_tps and lb_tps else None,
        "tandem_plain_over_llama_bench_tg": t_plain / l_plain if t_plain and l_plain else None,
    }
    # the same ratios as medians of per-turn pairs (both configurations ran back to back
    # on the same prompt, so drift of the machine cancels within a pair)
    turns: dict[tuple[Any, Any], dict[str, float]] = {}
    for r in rows:
        if r.get("tps"):
            turns.setdefault((r["prompt"], r["repeat"]), {})[r["config"]] = r["tps"]

    def paired(a: str | None, b: str | None) -> float | None:
        v = [t[a] / t[b] for t in turns.values() if a in t and b in t] if a and b else []
        return statistics.median(v) if v else None

    goals["paired_median"] = {
        "tandem_best_over_tandem_plain": paired(tb, "tandem plain"),
        "tandem_best_over_llama_best_ngram": paired(tb, lbest),
        "tandem_plain_over_llama_bench_tg": paired("tandem plain", "llama-bench tg"),
    }
    # per prompt: each configuration's median over the repeats, their ratio, and the
    # median and geometric mean of those ratios over the prompts (the ratio of medians over
    # all runs pools prompts of different speeds: its median falls in a gap between them)
    by_prompt: dict[Any, dict[str, list[float]]] = {}
    for r in rows:
        if r.get("tps"):
            by_prompt.setdefault(r["prompt"], {}).setdefault(r["config"], []).append(r["tps"])

    def per_prompt(a: str | None, b: str | None) -> dict[str, Any] | None:
        ratios = {p: statistics.median(c[a]) / statistics.median(c[b])
                  for p, c in by_prompt.items() if a in c and b in c} if a and b else {}
        if not ratios:
            return None
        v = list(ratios.values())
        return {"median": statistics.median(v), "geometric_mean": statistics.geometric_mean(v),
                "ratios": ratios}

    goals["per_prompt"] = {
        "tandem_best_over_tandem_plain": per_prompt(tb, "tandem plain"),
        "tandem_best_over_llama_best_ngram": per_prompt(tb, lbest),
        "tandem_plain_over_llama_bench_tg": per_prompt("tandem plain", "llama-bench tg"),
    }
    if med.get("tandem draft-model") and med.get("llama draft-simple"):
        goals["tandem_draft_model_over_draft_simple"] = (
            med["tandem draft-model"] / med["llama draft-simple"])
    prompt_mismatch = [r["prompt"] for r in rows if r.get("llama_prompt_tokens") is not None
                       and r["llama_prompt_tokens"] != r["prompt_tokens"]]
    return {
        "model": str(args.model), "draft_model": str(args.draft_model) if args.draft_model else None,
        "prompts": args.prompts, "format": fmt, "k": args.k, "threads": args.threads,
        "n_predict": args.n_predict, "repeat": args.repeat, "fixed_k": args.fixed_k,
        "exact": args.exact, "llama_exact": args.llama_exact,
        "ngram_n": args.ngram_n, "ngram_mod_n_match": args.ngram_mod_n_match,
        "skipped": skipped, "machine_before": before, "machine_after": after,
        "machine_during": during,
        "disturbed": C.disturbed(before, during),
        "prompt_token_mismatch": sorted(set(prompt_mismatch)),
        "configs": configs, "goals": goals, "runs": rows,
    }


def _fmt(v: float | None, spec: str) -> str:
    return "—" if v is None else spec.format(v)


def _progress(step: int, total: int, rows: list[dict[str, Any]]) -> None:
    parts = [f"[{step}/{total}] {rows[0]['prompt']}:"]
    for r in rows:
        parts.append(f"{r['config']} {_fmt(r.get('tps'), '{:.1f}')}")
    print("  ".join(parts), file=sys.stderr, flush=True)


def _print(result: dict[str, Any]) -> None:
    print(f"model {result['model']}  prompts {result['prompts']} ({result['format']})  "
          f"k {result['k']}  threads {result['threads']}  n_predict {result['n_predict']}  "
          f"repeat {result['repeat']}"
          + ("  Tandem: exact verification" if result["exact"] else ""))
    head = ("config", "runs", "decode tok/s", "α", "× own plain", "× tandem plain", "same reply")
    rows = [(c["config"], str(c["runs"]), _fmt(c["decode_tps_median"], "{:.1f}"),
             _fmt(c["acceptance_rate"], "{:.2f}"), _fmt(c["speedup_vs_own_plain"], "{:.2f}"),
             _fmt(c["speedup_vs_tandem_plain"], "{:.2f}"), c["same_reply_as_tandem_plain"] or "—")
            for c in result["configs"]]
    w = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w[i]) if i == 0 else h.rjust(w[i]) for i, h in enumerate(head)))
    for r in rows:
        print("  ".join(x.ljust(w[i]) if i == 0 else x.rjust(w[i]) for i, x in enumerate(r)))
    g = result["goals"]
    print(f"Tandem best ({g['tandem_best']}) ÷ Tandem plain: "
          f"{_fmt(g['tandem_best_over_tandem_plain'], '{:.2f}')}")
    print(f"Tandem best ÷ llama.cpp best n-gram ({g['llama_best_ngram']}): "
          f"{_fmt(g['tandem_best_over_llama_best_ngram'], '{:.2f}')}")
    print(f"Tandem plain ÷ llama-bench tg: {_fmt(g['tandem_plain_over_llama_bench_tg'], '{:.3f}')}")
    pm = g["paired_median"]
    print("the same as medians of per-turn pairs: "
          f"{_fmt(pm['tandem_best_over_tandem_plain'], '{:.2f}')}, "
          f"{_fmt(pm['tandem_best_over_llama_best_ngram'], '{:.3f}')}, "
          f"{_fmt(pm['tandem_plain_over_llama_bench_tg'], '{:.3f}')}")
    pp = g["per_prompt"]

    def agg(key: str) -> str:
        x = pp[key]
        return "—" if x is None else f"{x['median']:.3f} / {x['geometric_mean']:.3f}"

    print("per prompt (ratio of each prompt's medians; median / geometric mean over prompts): "
          f"{agg('tandem_best_over_tandem_plain')}, {agg('tandem_best_over_llama_best_ngram')}, "
          f"{agg('tandem_plain_over_llama_bench_tg')}")
    if "tandem_draft_model_over_draft_simple" in g:
        print(f"Tandem draft model ÷ llama draft-simple: "
              f"{g['tandem_draft_model_over_draft_simple']:.3f}")
    for s in result["skipped"]:
        print(f"skipped: {s}")
    if result["prompt_token_mismatch"]:
        print(f"prompt token counts differ for: {', '.join(result['prompt_token_mismatch'])}")
    if result["disturbed"]:
        print(C.disturbed_line(result["machine_before"], result["machine_during"]))


if __name__ == "__main__":
    raise SystemExit(main())

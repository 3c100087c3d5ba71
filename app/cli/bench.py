"""``python -m app bench``: speculation off vs on on a prompt set, printed as a table.

The measurement is :func:`app.engine.measure.bench.run_bench`; this module parses the
options, loads the session, prints progress on stderr and the result on stdout (text,
Markdown or JSON, worded by :mod:`app.cli.report`). With ``--server`` and ``--server-off``
it runs the serving crossover against two remote servers instead (:mod:`app.cli.crossover`).
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from app.cli.options import (
    BENCH_DEFAULTS,
    add_draft_length_arg,
    add_drafting_args,
    add_model_args,
    add_sampling_args,
    check_model_files,
    drafter_mode,
    option_error,
    session_config,
    speculation_configs,
)
from app.cli.crossover import add_crossover_args, run_server_bench
from app.cli.interrupt import ctrl_c_sets, with_cancel
from app.cli.json_output import print_json
from app.cli.remote import (
    add_server_args,
    refuse_drafter_with_server,
    refuse_key_without_server,
    run_remote_bench,
)
from app.cli.report import bench_json, bench_markdown, bench_text
from app.engine.llama import build_info
from app.engine.measure.bench import BenchReport, RunRecord, run_bench
from app.engine.measure.multiturn import (
    Conversation,
    is_multiturn,
    load_conversations,
    run_conversations,
)
from app.engine.measure.prompts import BenchPrompt, load_prompts, prepare_prompt, resolve_format
from app.engine.session import Session
from app.errors import LoadCancelledError, TandemError
from app.options import SamplingParams, SpecMode, SpeculationConfig, default_draft_max


def add_cli_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``bench`` to ``python -m app``'s subcommands (called by :mod:`app.cli.main`)."""
    p = sub.add_parser(
        "bench",
        help="benchmark speculation off vs on (interleaved, medians)",
        description=(
            "Run a prompt set with speculation off and on, interleaved in one process, and "
            "report per configuration: decode tok/s (median), per-token latency p50/p95, "
            "TTFT (median), acceptance rate α, mean acceptance length τ, draft cost ratio "
            "c, predicted and measured speedup, and outputs identical to 'off'; on single "
            "prompts each run that differs from 'off' is measured at its first differing "
            "token and called a near-tie or suspect (docs/proof.md). Without "
            "--draft, --prompt-lookup or --suffix only 'off' runs. Multi-turn sets "
            "(builtin:agent) and --suffix run as conversations: each turn's prompt holds "
            "the earlier replies, which also feed the suffix drafter's index."
        ),
    )
    add_model_args(p, server=True, required=False)
    add_drafting_args(p)
    p.add_argument("--prompts", default="builtin:code",
                   help="builtin:code, builtin:chat, builtin:agent (multi-turn), or a "
                        ".json/.jsonl/.txt file (builtin:code)")
    add_draft_length_arg(p, several=True)
    p.add_argument("--repeat", type=int, default=3, help="runs per prompt and configuration (3)")
    add_sampling_args(p, ("max_tokens",), BENCH_DEFAULTS)
    p.add_argument("--format", choices=("auto", "plain", "chat"), default="auto",
                   help="auto: chat template when the model has one, else plain completion")
    add_sampling_args(p, ("temperature", "seed"), BENCH_DEFAULTS)
    p.add_argument("--limit", type=int, default=None, help="use only the first N prompts")
    p.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up runs")
    p.add_argument("--keep-cache", action="store_true",
                   help="reuse the KV cache across runs (TTFT then measures cache hits)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    p.add_argument("--no-divergence", action="store_true",
                   help="do not record what the sampler drew from: differences from 'off' "
                        "are counted but not measured (saves the recorder's time per token)")
    p.add_argument("--include-tokens", action="store_true",
                   help="with --json: add each run's token ids and times")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON object")
    out.add_argument("--markdown", action="store_true", help="print a Markdown table")
    add_server_args(p)
    add_crossover_args(p)
    p.set_defaults(handler=_run_bench_cli)


def _check_bench_options(args: argparse.Namespace) -> None:
    """Refuse counts below one and a bench without a model, in one sentence."""
    if args.repeat < 1:
        raise TandemError("Invalid option: --repeat must be at least 1.")
    if args.max_tokens < 1:
        raise TandemError("Invalid option: --max-tokens must be at least 1.")
    if args.model is None and args.server:
        raise TandemError("Invalid option: bench --server needs --model (the server's "
                          "model id), or --server-off for the serving crossover.")
    if args.model is None:
        raise TandemError("Invalid option: bench needs --model (a GGUF here) or --server.")


def _run_bench_cli(args: argparse.Namespace) -> int:
    if args.server_off:
        return run_server_bench(args)
    _check_bench_options(args)
    if args.server:
        refuse_drafter_with_server(args)
        return with_cancel(lambda cancel: run_remote_bench(args, cancel))
    refuse_key_without_server(args)
    args.model = Path(args.model)
    check_model_files(args)
    mode = drafter_mode(args)
    # Multi-turn sets, and the suffix drafter on any set, run as conversations with the
    # history shared across turns as the app does (app.engine.measure.multiturn).
    conversational = mode in (SpecMode.SUFFIX, SpecMode.AUTO) or is_multiturn(args.prompts)
    conversations = load_conversations(args.prompts) if conversational else []
    prompts = [] if conversational else load_prompts(args.prompts)
    if args.limit is not None:
        prompts = prompts[: max(1, args.limit)]
        conversations = conversations[: max(1, args.limit)]

    try:
        if args.k is None:
            args.k = (default_draft_max(mode),)
        ks = [max(args.k)] if mode is SpecMode.AUTO else args.k  # auto: k is its maximum
        specs = speculation_configs(args, mode, ks) if mode is not SpecMode.OFF else []
        sampling = SamplingParams(
            temperature=args.temp, seed=args.seed, max_tokens=args.max_tokens
        )
        config = session_config(args, mode)
    except ValidationError as exc:
        raise option_error(exc) from exc

    def progress(done: int, total: int, rec: RunRecord) -> None:
        if args.quiet:
            return
        tps = rec.stats.decode_tps
        extra = ""
        if rec.stats.acceptance_rate is not None:
            extra = f"  α {rec.stats.acceptance_rate:.2f}"
        print(
            f"[{done}/{total}] {rec.prompt_name} {rec.label}: {len(rec.token_ids)} tokens, "
            f"{tps:.1f} tok/s{extra}" if tps else f"[{done}/{total}] {rec.prompt_name} {rec.label}",
            file=sys.stderr,
            flush=True,
        )

    cancel = threading.Event()
    # Ctrl-C ends the run in progress within one round (it is dropped) and the runs that
    # finished are reported (exit 130)
    with ctrl_c_sets(cancel):
        try:
            with Session.open(config, progress=lambda _p: not cancel.is_set()) as session:
                report = _bench_session(session, args, mode, conversational, conversations,
                                        prompts, specs, sampling, cancel, progress)
        except LoadCancelledError as exc:
            if not cancel.is_set():
                raise
            print(exc, file=sys.stderr)
            return 130
    if args.json:
        print_json(bench_json(report, include_tokens=args.include_tokens))
    elif args.markdown:
        sys.stdout.write(bench_markdown(report))
    else:
        sys.stdout.write(bench_text(report))
    return 130 if report.cancelled else 0


def _bench_session(session: Session, args: argparse.Namespace, mode: SpecMode,
                   conversational: bool, conversations: list[Conversation],
                   prompts: list[BenchPrompt], specs: list[SpeculationConfig],
                   sampling: SamplingParams, cancel: threading.Event,
                   progress: Callable[[int, int, RunRecord], None]) -> BenchReport:
    """The benchmark's runs on the loaded ``session``, with its settings recorded."""
    fmt = resolve_format(session, args.format)
    prepared = [prepare_prompt(session, pr, fmt) for pr in prompts]
    n_turns = sum(len(c.turns) for c in conversations)
    settings: dict[str, Any] = {
        "model": str(args.model),
        "draft": str(args.draft) if args.draft else None,
        "mode": mode.value,
        "k": list(args.k) if mode is not SpecMode.OFF else [],
        "prompts": args.prompts,
        "n_prompts": n_turns if conversational else len(prepared),
        "conversations": len(conversations) if conversational else None,
        "format": fmt,
        "repeat": args.repeat,
        "max_tokens": args.max_tokens,
        "n_ctx": session.n_ctx,
        "threads": session.ctx.n_threads,
        "cache_ram_mib": args.cache_ram,
        "n_gpu_layers": session.n_gpu_layers,
        "exact_verification": session.exact_verification,
        "temperature": args.temp,
        "seed": args.seed,
        "fresh_cache": not args.keep_cache,
        "divergence_recorded": not args.no_divergence and not conversational,
        "llama_cpp_python": _llama_cpp_version(),
        "cpu_features": list(build_info().cpu_features),
    }
    if conversational:
        return run_conversations(
            session, conversations, specs, sampling, fmt=fmt,
            repeat=args.repeat, warmup=not args.no_warmup,
            fresh_cache=not args.keep_cache, cancel=cancel, progress=progress,
            settings=settings,
        )
    return run_bench(
        session, prepared, specs, sampling,
        repeat=args.repeat, warmup=not args.no_warmup,
        fresh_cache=not args.keep_cache, cancel=cancel, progress=progress,
        settings=settings, record=not args.no_divergence,
    )


def _llama_cpp_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("llama-cpp-python")
    except Exception:
        return None

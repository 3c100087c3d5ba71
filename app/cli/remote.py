"""``generate --server`` and ``bench --server``: the CLI against a remote engine.

The reply or the prompt set goes to an OpenAI-compatible server
(:class:`~app.remote.client.RemoteClient`); Tandem measures decode tok/s and TTFT on the
stream and reports the server's own speculation figures (``timings``,
``metrics.speculative_decoding`` or the ``/metrics`` change; :mod:`app.remote.figures`).
``--model`` names the server's model id (``/v1/models``). The API key comes from the
environment variable ``--api-key-env`` names, never from the command line (where other
users' ``ps`` would show it).

What the server sends is printed with its control characters escaped
(:func:`~app.formatting.printable`): always in messages, and in the reply text when
stdout is a terminal (piped or redirected, the reply is data and keeps its bytes).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import Any

from app.cli.json_output import print_json
from app.cli.report import end_reply_line, write_reply_text
from app.errors import TandemError
from app.engine.measure.bench import median
from app.formatting import advice_words, printable
from app.remote.client import RemoteClient, ServerInfo
from app.remote.stream import RemoteDelta, RemoteResult
from app.remote.errors import RemoteCancelledError
from app.options import SamplingParams
from app.remote.session import remote_extra, request_fields


def add_server_args(p: argparse.ArgumentParser) -> None:
    """``--server URL`` and ``--api-key-env VAR``; with ``--server``, ``--model`` is the
    server's model id (``add_model_args(p, server=True)`` keeps it as typed)."""
    p.add_argument("--server", default=None, metavar="URL",
                   help="use a remote OpenAI-compatible server (llama-server, vLLM, SGLang, "
                        "another Tandem…) at URL; --model is then its model id")
    p.add_argument("--api-key-env", default=None, metavar="VAR",
                   help="with --server: the environment variable holding its API key")


def refuse_key_without_server(args: argparse.Namespace) -> None:
    """A local run (no ``--server``) has no use for ``--api-key-env``: refused, as
    ``--system`` without ``--chat`` is, instead of ignored.

    Raises:
        TandemError: ``--api-key-env`` was given.
    """
    if getattr(args, "api_key_env", None):
        raise TandemError("Invalid option: --api-key-env names the API key of a remote "
                          "server; it goes with --server.")


def refuse_drafter_with_server(args: argparse.Namespace) -> None:
    """A remote server drafts as it was started: a drafter switch, ``--auto``,
    ``--no-spec`` or ``--mtp-assistant`` beside ``--server`` is refused, not ignored.

    Raises:
        TandemError: one of them was given.
    """
    from app.cli.options import drafter_flags

    if given := drafter_flags(args, no_spec=True):
        raise TandemError(f"Invalid option: {given[0]} has no effect with --server: the "
                          "server drafts as it was started (serve-command prints the "
                          "command that starts it with a drafter).")


def client_from_args(args: argparse.Namespace) -> RemoteClient:
    """A client for ``--server`` with the key from ``--api-key-env`` (the spaces and
    line ends around it dropped).

    Raises:
        TandemError: the variable is not set or empty; the address is not one; the key
            has a control character or one outside ASCII (the message does not show it).
    """
    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            raise TandemError(f"--api-key-env {args.api_key_env}: that environment "
                              "variable is not set (or empty).")
    return RemoteClient(args.server, api_key=key)


def _check_model(info: ServerInfo, model: str) -> None:
    ids = [m.id for m in info.models]
    if model not in ids:
        offers = ", ".join(i if len(i) <= 80 else i[:80] + "…" for i in ids[:10])
        raise TandemError(printable(f"{info.display_url} has no model {model!r}; it offers: "
                                    f"{offers or 'none'}."))


def _identify(client: RemoteClient, model: str, cancel: threading.Event) -> ServerInfo | None:
    """What the server is, checked to offer ``model``; None when Ctrl-C stopped it
    before the server answered.

    Raises:
        TandemError: the server failed, or has no such model."""
    try:
        info = client.identify(cancel)
    except RemoteCancelledError:
        return None
    _check_model(info, model)
    return info


def server_json(info: ServerInfo, model: str) -> dict[str, Any]:
    """The ``server`` object of ``--json`` outputs (docs/json.md); ``base_url`` with a
    password in it as ``***``."""
    return {"engine": info.engine.value, "version": info.version,
            "base_url": info.display_url, "model": model,
            "method": info.speculation_method, "draft_max": info.draft_max}


def remote_stats_json(info: ServerInfo, model: str, r: RemoteResult) -> dict[str, Any]:
    """The ``remote stats`` object: Tandem's stream timing and the server's figures
    (None where the server reports nothing)."""
    f = r.figures
    extra = remote_extra(info, model, r)
    return {
        "n_tokens": r.n_tokens, "token_count_source": r.token_count_source,
        "prompt_tokens": r.prompt_tokens, "ttft_s": r.ttft, "decode_s": r.decode_time,
        "total_s": r.total_time, "decode_tps": r.decode_tps,
        "end_to_end_tps": r.end_to_end_tps, "server_decode_tps": r.server_decode_tps,
        "acceptance_rate": f.acceptance_rate if f else None,
        "mean_acceptance_length": f.mean_acceptance_length if f else None,
        "draft_n": f.draft_tokens if f else None,
        "draft_n_accepted": f.accepted if f else None,
        "drafts": f.drafts if f else None,
        "accepted_per_pos": list(f.accepted_per_pos) if f else None,
        "per_position_rate": list(f.per_position_rate) if f else None,
        "speculation_scope": f.scope if f else None,
        "speculation_source": f.source if f else None,
        "advice": extra["advice"],
    }


def stats_line(info: ServerInfo, r: RemoteResult) -> str:
    """One line for stderr: tok/s, TTFT, and the server's figures or that it has none."""
    parts = [f"{info.engine.value}", f"{r.n_tokens} tokens",
             f"decode {r.decode_tps:.1f} tok/s" if r.decode_tps else "decode –",
             f"TTFT {r.ttft:.2f} s"]
    f = r.figures
    if f is None:
        parts.append("the server reports nothing about speculation")
    elif f.acceptance_rate is None:
        parts.append("nothing was drafted")
    else:
        parts.append(f"α {f.acceptance_rate:.0%} ({f.accepted}/{f.draft_tokens})")
        if f.mean_acceptance_length is not None:
            parts.append(f"τ {f.mean_acceptance_length:.2f} per drafting round")
        if f.scope == "server-wide":
            parts.append("server-wide figures (other clients included)")
    method = info.speculation_method or "method unknown"
    parts.append(method + (f", k={info.draft_max}" if info.draft_max else ""))
    return printable(" · ".join(parts))


def run_remote_generate(args: argparse.Namespace, sampling: SamplingParams,
                        cancel: threading.Event) -> int:
    """``generate --server``: one reply with ``sampling`` (the options, checked as for a
    local model), streamed to stdout or printed as JSON."""
    if args.compare:
        raise TandemError("--compare races two modes inside Tandem; it needs a local --model.")
    with client_from_args(args) as client:
        found = _identify(client, args.model, cancel)
        if found is None:
            return 130  # Ctrl-C before the server answered: no reply was asked for
        info = found
        options: dict[str, Any] = dict(request_fields(sampling), cancel=cancel)
        if args.chat:
            messages = ([{"role": "system", "content": args.system}] if args.system else [])
            messages.append({"role": "user", "content": args.prompt})
            events = client.stream_chat(args.model, messages, **options)
        else:
            events = client.stream_completion(args.model, args.prompt, **options)
        result = None
        for ev in events:
            if isinstance(ev, RemoteDelta):
                if not args.json:
                    write_reply_text(ev.text)
            else:
                result = ev
        assert result is not None
        info = client.refresh_speculation(info, result, cancel)
    if args.json:
        print_json({"text": result.text, "finish_reason": result.finish_reason,
                    "server": server_json(info, args.model),
                    "stats": remote_stats_json(info, args.model, result)}, indent=None)
    else:
        end_reply_line(always=True)
        print(stats_line(info, result), file=sys.stderr)
        advice = remote_extra(info, args.model, result)["advice"]
        if advice:
            print(f"advice: {advice_words(advice)}", file=sys.stderr)
    return 0


def run_remote_bench(args: argparse.Namespace, cancel: threading.Event) -> int:
    """``bench --server``: every prompt ``--repeat`` times (after one untimed warm-up
    unless ``--no-warmup``), one request at a time; medians of decode tok/s and TTFT,
    the server's α and τ summed over the runs, and the ``/metrics`` change over the
    whole bench (server-wide)."""
    from app.engine.measure.prompts import load_prompts

    prompts = load_prompts(args.prompts)[: args.limit]
    with client_from_args(args) as client:
        found = _identify(client, args.model, cancel)
        if found is None:
            return 130  # Ctrl-C before the server answered: nothing was measured
        info = found
        before = client.spec_counters()
        runs: list[dict[str, Any]] = []
        last: RemoteResult | None = None
        for prompt in prompts:
            for i in range(args.repeat + (0 if args.no_warmup else 1)):
                if cancel.is_set():
                    break
                r = client.chat(args.model, [{"role": "user", "content": prompt.chat}],
                                max_tokens=args.max_tokens, temperature=args.temp,
                                seed=args.seed if args.seed >= 0 else None, cancel=cancel)
                last = r
                if (i == 0 and not args.no_warmup) or r.finish_reason == "cancelled":
                    continue  # the warm-up, or a run Ctrl-C cut short
                runs.append({"prompt": prompt.name, **remote_stats_json(info, args.model, r)})
                if not args.quiet:
                    print(f"{prompt.name}: {stats_line(info, r)}", file=sys.stderr)
        after = client.spec_counters()
        info = client.refresh_speculation(info, last, cancel)
    summary = bench_summary(runs)
    delta = after.minus(before) if before is not None and after is not None else None
    out = {"server": server_json(info, args.model), "summary": summary,
           "cancelled": cancel.is_set(),
           "server_wide": None if delta is None else {
               "drafts": delta.drafts, "draft_tokens": delta.draft_tokens,
               "accepted": delta.accepted, "accepted_per_pos": list(delta.accepted_per_pos)},
           "runs": runs}
    if args.json:
        print_json(out)
    else:
        print(printable(f"{info.engine.value} {info.version or ''} at {info.display_url}, "
                        f"model {args.model}"))
        for key, value in summary.items():
            print(f"  {key}: {value if not isinstance(value, float) else f'{value:.3f}'}")
        if cancel.is_set():
            print("  Stopped with Ctrl-C: the figures cover the runs that finished.")
    return 0


def bench_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians and sums over ``bench --server`` runs (None where no run had the figure)."""
    def median_of(key: str) -> float | None:
        return median(r[key] for r in runs if r[key] is not None)

    drafted = [r for r in runs if r["draft_n"] is not None]
    draft_n = sum(r["draft_n"] for r in drafted)
    accepted = sum(r["draft_n_accepted"] for r in drafted)
    counted = [r for r in drafted if r["drafts"] is not None]
    drafts = sum(r["drafts"] for r in counted)
    accepted_counted = sum(r["draft_n_accepted"] for r in counted)
    return {"runs": len(runs), "decode_tps_median": median_of("decode_tps"),
            "ttft_s_median": median_of("ttft_s"),
            "server_decode_tps_median": median_of("server_decode_tps"),
            "acceptance_rate": accepted / draft_n if draft_n else None,
            "mean_acceptance_length": 1 + accepted_counted / drafts if drafts else None,
            "draft_n": draft_n if drafted else None,
            "draft_n_accepted": accepted if drafted else None}

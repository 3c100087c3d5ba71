"""``python -m app …``: the command-line interface over the same services as the window.

Subcommands:

* ``generate``  — one reply from a target model, with or without speculation
  (:mod:`app.engine`), streamed to stdout or printed as one JSON object; with
  ``--compare`` the prompt is decoded with speculation off and then on, with one seed,
  and the first difference is measured and said in words (:mod:`app.engine.divergence`).
* ``models``    — list, inspect, pair-check and download GGUF models (:mod:`app.cli.models`).
* ``bench``     — speculation off vs on, interleaved, with medians (:mod:`app.cli.bench`).
* ``serve``     — the local OpenAI-compatible API (:mod:`app.cli.serve`, :mod:`app.api`).
* ``serve-command`` — the launch command for llama-server or vLLM on a bigger machine
  (:mod:`app.cli.serve_command`, :mod:`app.catalog.server_command`).
* ``install-launcher`` / ``uninstall-launcher`` — the desktop launcher
  (:mod:`app.cli.launcher`).

Every argparse parser and every ``print`` of the app lives under :mod:`app.cli`.

Exit status (the same for every subcommand, see ``docs/cli.md``): 0 success; 1 a
negative answer that is not an error (``models pair``: not compatible); 2 a user-facing
error (:class:`app.errors.TandemError`: one line on stderr, no traceback) or a usage
error; 130 interrupted (Ctrl-C). ``--json`` outputs carry ``schema_version`` and are
documented in ``docs/json.md``.

The program name in help and usage lines is the one the user typed: ``tandem-cli``,
``tandem`` (a frozen app or the GUI script given arguments) or ``python -m app``
(:func:`program_name`).
"""

from __future__ import annotations

import argparse
import codecs
import dataclasses
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from app import __version__
from app.cli.options import (
    CLI_DEFAULTS,
    PromptOptions,
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
from app.cli.interrupt import ctrl_c_sets, with_cancel
from app.cli.json_output import print_json
from app.cli.remote import (
    add_server_args,
    refuse_drafter_with_server,
    refuse_key_without_server,
    run_remote_generate,
)
from app.cli.report import end_reply_line, reply_stats_line, write_reply_text
from app.errors import LoadCancelledError, TandemError

Handler = Callable[[argparse.Namespace], int]


def _add_generate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("generate", help="generate one reply with a GGUF target model")
    p.add_argument("prompt", help="the prompt text (with --chat: the user message); "
                                  "'-' reads it from standard input")
    add_model_args(p, server=True)
    p.add_argument("--no-spec", action="store_true", help="speculation off: plain decoding")
    add_draft_length_arg(p, several=False)
    add_drafting_args(p)
    add_sampling_args(p, ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "seed",
                          "max_tokens"), CLI_DEFAULTS)
    p.add_argument("--stop", action="append", default=[], type=_stop_string,
                   help="stop string (repeatable; not empty)")
    p.add_argument("--chat", action="store_true", help="wrap the prompt with the model's chat template")
    p.add_argument("--system", default=None, help="system prompt (with --chat)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming")
    p.add_argument("--compare", action="store_true",
                   help="decode the prompt with speculation off, then on (same seed), and "
                        "say where the two replies first differ and whether that is a "
                        "near-tie or suspect")
    add_server_args(p)
    p.set_defaults(handler=_run_generate)


def _stop_string(value: str) -> str:
    """A ``--stop`` value: an empty one would match before the first token (the local
    API refuses it too)."""
    if not value:
        raise argparse.ArgumentTypeError("a stop string cannot be empty")
    return value


def _run_generate(args: argparse.Namespace) -> int:
    import threading

    from app.engine.session import Session
    from app.options import SamplingParams

    if args.prompt == "-":
        args.prompt = read_prompt(sys.stdin)
    try:
        sampling = SamplingParams(
            temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
            repeat_penalty=args.repeat_penalty, seed=args.seed, max_tokens=args.max_tokens,
            stop=tuple(args.stop))
    except ValidationError as exc:
        raise option_error(exc) from exc
    if args.server:
        refuse_drafter_with_server(args)
        return with_cancel(lambda cancel: run_remote_generate(args, sampling, cancel))
    refuse_key_without_server(args)
    args.model = Path(args.model)
    check_model_files(args)
    if args.compare and args.no_spec:
        raise TandemError("Invalid option: --compare needs speculation (drop --no-spec).")
    mode = drafter_mode(args, off=args.no_spec)
    try:
        PromptOptions(prompt=args.prompt, chat=args.chat, system=args.system)
        [spec] = speculation_configs(args, mode, [args.draft_max])
        config = session_config(args, mode)
    except ValidationError as exc:
        raise option_error(exc) from exc

    cancel = threading.Event()
    # Ctrl-C cancels like the Stop button, from loading to the end of the reply (the
    # handler stays until every native object is freed)
    with ctrl_c_sets(cancel):
        try:
            with Session.open(config, progress=lambda _p: not cancel.is_set()) as session:
                for note in session.notes:
                    print(f"note: {note}", file=sys.stderr)
                fmt = session.chat_format
                # (a template that could not be used said so in its own note above)
                if args.chat and fmt.uses_fallback and fmt.template_error is None:
                    print(f"note: {config.target_path.name} has no chat template: --chat "
                          "wrote a plain User/Assistant transcript, which a base model may "
                          "only continue", file=sys.stderr)
                if args.compare:
                    return _compare(session, args, sampling, spec, cancel)
                result = _stream_reply(session, args, sampling, spec, cancel)
        except LoadCancelledError as exc:
            if not cancel.is_set():
                raise
            print(exc, file=sys.stderr)  # Ctrl-C during the load
            return 130
    if args.json:
        print_json({
            "text": result.text,
            "token_ids": list(result.token_ids),
            "finish_reason": result.reason,
            "seed": result.seed,
            "note": result.note,
            "stats": result.stats.to_dict(),
        }, indent=None)
    else:
        end_reply_line(always=True)
        if result.note:
            print(result.note, file=sys.stderr)
        print(reply_stats_line(result), file=sys.stderr)
    return 130 if result.reason == "cancelled" else 0  # a reply cut by Ctrl-C is printed


def _compare(session: Any, args: argparse.Namespace, sampling: Any, spec: Any,
             cancel: Any) -> int:
    """``generate --compare``: the race of the window on the command line."""
    from app.cli.report import compare_json, compare_text
    from app.engine.chat import ChatMessage, tokenize_plain
    from app.engine.measure.prompts import PreparedPrompt, prepare_chat
    from app.engine.measure.race import run_race

    if args.chat:
        messages = [ChatMessage("system", args.system)] if args.system else []
        messages.append(ChatMessage("user", args.prompt))
        prompt = prepare_chat(session, messages)
    else:
        prompt = PreparedPrompt(tokens=tuple(tokenize_plain(session.target, args.prompt)))
    result = run_race(session, prompt, sampling, spec, cancel)
    if args.json:
        print_json(compare_json(result), indent=None)
    else:
        sys.stdout.write(compare_text(result))
    return 130 if cancel.is_set() else 0


def read_prompt(stream: TextIO) -> str:
    """The prompt given as ``-``: all of ``stream`` (standard input), without the one
    trailing newline that ``echo`` or a file's last line adds.

    Raises:
        TandemError: the stream is empty or cannot be decoded.
    """
    try:
        text = stream.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise TandemError(f"Could not read the prompt from standard input: {exc}") from exc
    if text.endswith("\n"):
        text = text[:-2] if text.endswith("\r\n") else text[:-1]
    if not text.strip():
        raise TandemError("The prompt read from standard input is empty.")
    return text


def _stream_reply(session: Any, args: argparse.Namespace, sampling: Any, spec: Any,
                  cancel: Any) -> Any:
    """Run one reply on ``session``; stream its text unless --json; return its record
    (:class:`~app.engine.reply.ReplyRecord`, with Auto's choice when Auto was asked)."""
    from app.engine.chat import ChatMessage, tokenize_plain
    from app.engine.events import TextDelta
    from app.engine.reply import ReplyRecord
    from app.options import SpecMode

    asked_spec, choice = spec, None
    if spec.mode is SpecMode.AUTO:  # one reply, nothing earlier: auto's prior
        from app.engine.auto import resolve_auto

        spec, choice = resolve_auto(session, (), (), spec)
        print(f"auto: {spec.mode.words}" + (f", k={spec.draft_max}" if spec.speculating else "")
              + f" ({choice.reason})", file=sys.stderr)
    if args.chat:
        messages = []
        if args.system:
            messages.append(ChatMessage("system", args.system))
        messages.append(ChatMessage("user", args.prompt))
        events = session.chat(messages, sampling, spec, cancel)
    else:
        events = session.generate(tokenize_plain(session.target, args.prompt), sampling, spec, cancel)
    result = None
    for ev in events:
        if isinstance(ev, TextDelta) and not args.json:
            write_reply_text(ev.text)
        elif isinstance(ev, ReplyRecord):
            result = ev
    if result is None:
        raise TandemError("The generation ended without a result.")
    record = result.asked(speculation=asked_spec, prompt=None if args.chat else args.prompt)
    return dataclasses.replace(record, auto=choice)




def _feature_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Subcommands that live with their feature; each module adds its own parsers."""
    from app.cli import bench, launcher, models, serve, serve_command

    for module in (models, bench, serve, serve_command, launcher):
        module.add_cli_parsers(sub)


def program_name(argv0: str | None = None) -> str:
    """How the user started Tandem, for help and usage lines.

    ``argv0`` (default ``sys.argv[0]``): ``/usr/bin/tandem-cli`` → ``tandem-cli``,
    ``tandem.exe`` → ``tandem``, ``…/app/__main__.py`` (``python -m app``) or any other
    Python file → ``python -m app``.
    """
    argv0 = (sys.argv[0] if sys.argv else "") if argv0 is None else argv0
    name = Path(argv0).name
    if not name or name in ("-c", "-m") or name.endswith((".py", ".pyc")):
        return "python -m app"
    return name[:-4] if name.lower().endswith(".exe") else name


def version_text() -> str:
    """``--version``'s line: ``Tandem 0.1.0``."""
    return f"Tandem {__version__}"


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; ``prog`` is the name shown in help (:func:`program_name`)."""
    parser = argparse.ArgumentParser(
        prog=prog or program_name(),
        description="Tandem: local GGUF chat with speculative decoding.",
        epilog="exit status: 0 ok, 1 a negative answer (models pair: not compatible), "
               "2 error, 130 interrupted. JSON outputs: docs/json.md.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show llama.cpp's log")
    parser.add_argument("--version", action="version", version=version_text())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_generate(sub)
    _feature_parsers(sub)
    return parser


_ESCAPE_ERRORS = "tandem-escape"


def _escape_unencodable(exc: UnicodeError) -> tuple[str, int]:
    """Codec error handler: an undecodable byte of a file name (a surrogate escape,
    U+DC80…U+DCFF) prints as ``\\xNN``, the byte it stands for; any other character the
    terminal cannot show prints as Python's backslash escape."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    out = []
    for ch in exc.object[exc.start:exc.end]:
        cp = ord(ch)
        if 0xDC80 <= cp <= 0xDCFF:
            out.append(f"\\x{cp - 0xDC00:02x}")
        else:
            out.append(ch.encode("ascii", "backslashreplace").decode("ascii"))
    return "".join(out), exc.end


class _PlainFormatter(logging.Formatter):
    """``warning: message``: a log record as a line for the user."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {record.getMessage()}"


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run the CLI; returns the process exit status (module docstring: 0, 1, 2, 130).

    Args:
        argv: the arguments (default ``sys.argv[1:]``).
        prog: the program name for help (default from ``sys.argv[0]``, :func:`program_name`).
    """
    # A file name that is not valid UTF-8 (surrogate escapes, PEP 383) must print, not
    # end in UnicodeEncodeError: its odd bytes are written as \xNN.
    codecs.register_error(_ESCAPE_ERRORS, _escape_unencodable)
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors=_ESCAPE_ERRORS)
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if getattr(args, "exact", False):
        # before llama.cpp loads: Q4_K/Q6_K weights are exact only with the kernel off
        from app.engine.exact import tiled_kernel_off_for_exact

        tiled_kernel_off_for_exact()
    stderr = logging.StreamHandler()
    # a warning reads "warning: …" as the error line does; --verbose names the module
    stderr.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s")
                        if args.verbose else _PlainFormatter())
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        handlers=[stderr])
    if not args.verbose:
        # llama.cpp's loader warnings are noise on a terminal; errors reach the user as
        # TandemError messages instead.
        logging.getLogger("app.engine.llama").setLevel(logging.CRITICAL)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    from app.diagnostics import log_fields
    from app.store.logs import start_log, watch_fatal_errors

    start_log("cli", log_fields())  # tandem-cli.log in the user log folder, with a header
    watch_fatal_errors("cli")  # a crash in llama.cpp prints the tracebacks, not only "Bus error"
    from app.remote.display import redact_userinfo  # a --server password stays out of the log

    logging.getLogger("app.cli").info("command: %s", redact_userinfo(
        " ".join(sys.argv[1:] if argv is None else argv)))
    try:
        return handler(args)
    except TandemError as exc:
        end_reply_line()  # a reply cut short: the error starts a line of its own
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        end_reply_line()
        return 130
    except BrokenPipeError:
        # the reader went away (``… | head``): stop quietly, as the Python docs advise
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1

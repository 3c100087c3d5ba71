"""``python -m app serve-command``: the launch command for llama-server or vLLM.

"Run this on a bigger machine" on the command line: from a target (a GGUF here, a
Hugging Face repository, or a model of the curated catalog), a drafter and k, print the
command that starts the same pair on a serving engine (:mod:`app.catalog.server_command`
writes it; this module parses and prints). ``--json`` prints the argument vector, the
shell line and the notes (docs/json.md, "serve-command").
"""

from __future__ import annotations

import argparse
import sys

from app.catalog.server_command import (
    DEFAULT_API_KEY_ENV,
    EVERY_INTERFACE,
    ModelSource,
    ServeDrafter,
    ServeEngine,
    ServePlan,
    build_command,
    catalog_assistant,
    resolve_model,
    resolve_mtp_assistant,
)
from app.cli.json_output import print_json
from app.cli.options import port_arg
from app.errors import TandemError
from app.formatting import serve_note_words
from app.options import DEFAULT_PORT, DRAFT_MODEL_K, FREE_DRAFTER_K, SpecMode, default_draft_max


def add_cli_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``serve-command`` to the CLI."""
    p = sub.add_parser(
        "serve-command",
        help="print the command that runs a target and drafter on llama-server or vLLM",
        description="Print the launch command for a serving engine on a bigger machine. "
                    "Models the curated catalog knows are named by their Hugging Face "
                    "repository, others by their path.")
    p.add_argument("--model", required=True,
                   help="the target: a GGUF or model folder here, owner/name[:QUANT], or a "
                        "model name or pair id from `models catalog`")
    drafter = p.add_mutually_exclusive_group()
    drafter.add_argument("--draft", metavar="MODEL", help="a draft model (same forms as --model)")
    drafter.add_argument("--prompt-lookup", action="store_true",
                         help="prompt lookup (llama-server ngram-simple, vLLM ngram)")
    drafter.add_argument("--suffix", action="store_true",
                         help="suffix lookup (vLLM suffix; llama-server ngram-mod)")
    drafter.add_argument("--mtp", action="store_true",
                         help="the target's multi-token-prediction heads")
    drafter.add_argument("--eagle3", metavar="MODEL", help="an EAGLE-3 head for the target")
    p.add_argument("--mtp-assistant", metavar="MODEL",
                   help="a separate MTP assistant (Gemma 4's) drafting for the target "
                        "(llama-server draft-mtp with -md/-hfd; vLLM mtp with its model): "
                        "a file here, its repository[:QUANT] or a pair id from `models "
                        "catalog`; implies --mtp, which takes the catalog's assistant for "
                        "its target when none is given")
    p.add_argument("--engine", required=True, choices=[e.value for e in ServeEngine])
    p.add_argument("-k", "--draft-max", type=int, default=None,
                   help="draft length k (default: the drafter's own, 4 with a draft model or "
                        "EAGLE-3, 3 with MTP, 16 with prompt or suffix lookup)")
    p.add_argument("--draft-min", type=int, default=0, help="a shorter draft is dropped")
    p.add_argument("--host", default=EVERY_INTERFACE,
                   help=f"where the server listens (default {EVERY_INTERFACE})")
    p.add_argument("--port", type=port_arg, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}")
    p.add_argument("--api-key-env", default=DEFAULT_API_KEY_ENV, metavar="VAR",
                   help=f"the environment variable holding the server's API key (default "
                        f"{DEFAULT_API_KEY_ENV})")
    p.add_argument("--no-api-key", action="store_true",
                   help="no key: the server listens on 127.0.0.1 only")
    p.add_argument("--gpus", type=int, default=1,
                   help="GPUs to spread the target over (vLLM --tensor-parallel-size)")
    p.add_argument("--ctx-size", type=int, default=None, help="context length in tokens")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=run_serve_command)


def _drafter(args: argparse.Namespace) -> ServeDrafter:
    """The drafter the switches ask for (--mtp-assistant means MTP).

    Raises:
        TandemError: --mtp-assistant with another drafter's switch.
    """
    drafter = _switched_drafter(args)
    if args.mtp_assistant and drafter not in (ServeDrafter.OFF, ServeDrafter.MTP):
        raise TandemError(f"Invalid option: --mtp-assistant drafts with MTP, not {drafter}; "
                          "drop one of them.")
    return ServeDrafter.MTP if args.mtp_assistant else drafter


def _switched_drafter(args: argparse.Namespace) -> ServeDrafter:
    if args.draft:
        return ServeDrafter.DRAFT_MODEL
    if args.eagle3:
        return ServeDrafter.EAGLE3
    for flag, drafter in (("prompt_lookup", ServeDrafter.PROMPT_LOOKUP),
                          ("suffix", ServeDrafter.SUFFIX), ("mtp", ServeDrafter.MTP)):
        if getattr(args, flag):
            return drafter
    return ServeDrafter.OFF


def _default_k(drafter: ServeDrafter) -> int:
    """The drafter's own default k (:func:`app.options.default_draft_max`); EAGLE-3, which
    Tandem does not run, drafts like a draft model."""
    if drafter is ServeDrafter.EAGLE3:
        return DRAFT_MODEL_K
    try:
        return default_draft_max(SpecMode(drafter.value))
    except ValueError:  # off, or a drafter this build does not declare
        return FREE_DRAFTER_K


def run_serve_command(args: argparse.Namespace) -> int:
    """Print the command (or its JSON); 2 with one line on stderr for bad input."""
    drafter = _drafter(args)
    k = args.draft_max if args.draft_max is not None else _default_k(drafter)
    target = resolve_model(args.model)
    draft: ModelSource | None
    if args.mtp_assistant:
        draft = resolve_mtp_assistant(args.mtp_assistant)
    elif drafter is ServeDrafter.MTP:
        draft = catalog_assistant(target)
    else:
        second = args.draft or args.eagle3
        draft = resolve_model(second) if second else None
    api_key_env = None if args.no_api_key else args.api_key_env
    if api_key_env is None and args.host not in (EVERY_INTERFACE, "127.0.0.1"):
        raise TandemError("Invalid option: --no-api-key keeps the server on 127.0.0.1; "
                          "drop --host or give it a key.")
    plan = ServePlan(engine=ServeEngine(args.engine), target=target,
                     drafter=drafter, draft=draft, k=k,
                     draft_min=args.draft_min, host=args.host, port=args.port,
                     api_key_env=api_key_env, gpus=args.gpus, ctx_size=args.ctx_size)
    command = build_command(plan)
    if args.json:
        print_json(command.to_dict())
        return 0
    print(command.shell())
    for note in command.notes:
        print(f"note: {serve_note_words(note.value, api_key_env=api_key_env or '')}",
              file=sys.stderr)
    return 0

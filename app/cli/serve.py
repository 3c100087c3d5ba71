"""``python -m app serve``: the local OpenAI-compatible API on a model loaded here.

Loads the target (and the draft with ``--draft``) into a
:class:`~app.chat.service.ChatService`, exactly as ``generate`` would, and serves it with
:class:`app.api.server.ApiServer` until Ctrl-C. The drafter options are ``generate``'s
(:mod:`app.cli.options`): they set the server's default speculation, which a request may
change with its ``speculation`` body field.
"""

from __future__ import annotations

import argparse
import os
import sys

from app.api import DEFAULT_HOST, DEFAULT_MAX_BODY_BYTES, DEFAULT_PORT
from app.cli.options import (
    add_draft_length_arg,
    add_drafting_args,
    add_field_arg,
    add_model_args,
    check_model_files,
    port_arg,
    drafter_mode,
    session_config,
    speculation_configs,
)
from app.errors import TandemError
from app.options import SamplingParams


def add_cli_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``serve`` to ``python -m app``'s subcommands (called by :mod:`app.cli.main`)."""
    p = sub.add_parser(
        "serve",
        help="serve an OpenAI-compatible API on 127.0.0.1 (speculation included)",
        description=(
            "Serve /v1/models, /v1/chat/completions, /v1/completions and /health with the "
            "model loaded here. One generation at a time; others wait in a bounded queue "
            "(then 429 with Retry-After). Listens on 127.0.0.1 unless --host says "
            "otherwise, which needs --api-key (or TANDEM_API_KEY) of at least 16 "
            "printable characters without spaces."
        ),
    )
    add_model_args(p)
    add_draft_length_arg(p, several=False)
    add_drafting_args(p)
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on ({DEFAULT_HOST})")
    p.add_argument("--port", type=port_arg, default=DEFAULT_PORT,
                   help=f"port ({DEFAULT_PORT}; 0: any free port)")
    p.add_argument("--api-key", default=os.environ.get("TANDEM_API_KEY"),
                   help="require 'Authorization: Bearer KEY' (default: $TANDEM_API_KEY)")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="allow browser calls from this origin (repeatable; default: none)")
    p.add_argument("--max-body-bytes", type=int, default=None,
                   help=f"request body limit in bytes ({DEFAULT_MAX_BODY_BYTES // 2**20} MiB)")
    add_field_arg(p, SamplingParams, "max_tokens")  # for requests that name none
    p.add_argument("--queue-limit", type=int, default=16,
                   help="requests that may wait behind the running one (16)")
    p.set_defaults(handler=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    """Load the model, print the base URL on stdout, serve until Ctrl-C."""
    from app.api.app import ApiSettings
    from app.api.server import ApiServer, check_address, client_host
    from app.chat.service import ChatService, JobError

    check_model_files(args)
    check_address(args.host, args.api_key)
    mode = drafter_mode(args)
    try:
        [spec] = speculation_configs(args, mode, [args.draft_max])
        config = session_config(args, mode)
        extra = {} if args.max_body_bytes is None else {"max_body_bytes": args.max_body_bytes}
        settings = ApiSettings(sampling=SamplingParams(max_tokens=args.max_tokens),
                               speculation=spec,
                               api_key=args.api_key or None,
                               cors_origins=tuple(args.cors_origin), **extra)
        if args.queue_limit < 0:
            raise ValueError("--queue-limit must be >= 0")
    except ValueError as exc:
        raise TandemError(f"Invalid option: {exc}") from exc

    service = ChatService(queue_limit=args.queue_limit)
    try:
        print(f"Loading {args.model.name}…", file=sys.stderr, flush=True)
        try:
            info = service.load(config, origin="cli").result()
        except JobError as exc:
            raise TandemError(exc.error.message) from None
        for note in info.notes:
            print(f"note: {note}", file=sys.stderr)
        server = ApiServer(service, host=args.host, port=args.port, settings=settings,
                           model=info)
        drafter = spec.mode.words if not spec.speculating \
            else f"{spec.mode.words}, k ≤ {spec.draft_max}"

        def ready(base_url: str) -> None:
            # the first line on stdout is the base URL (tests and scripts read it)
            print(base_url, flush=True)
            print(f"Tandem serves {info.target_path.name} ({drafter}) at {base_url}; "
                  "Ctrl-C stops.", file=sys.stderr, flush=True)
            if client_host(args.host) != args.host.strip("[]"):
                print(f"It listens on every address ({args.host}): other machines use this "
                      "machine's own address with the same port.", file=sys.stderr,
                      flush=True)

        server.serve_forever(ready)
    finally:
        service.shutdown()
    return 0

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
from typing import TYPE_CHECKING

from pydantic import ValidationError

from app.api import DEFAULT_HOST, DEFAULT_MAX_BODY_BYTES, DEFAULT_PORT
from app.cli.options import (
    add_draft_length_arg,
    add_drafting_args,
    add_field_arg,
    add_model_args,
    check_model_files,
    port_arg,
    drafter_mode,
    option_error,
    session_config,
    speculation_configs,
)
from app.errors import TandemError
from app.options import DEFAULT_QUEUE_LIMIT, SamplingParams, SpeculationConfig

if TYPE_CHECKING:
    from app.api.app import ApiSettings



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
                   help=f"request body limit in bytes (≥ 1024; default "
                        f"{DEFAULT_MAX_BODY_BYTES // 2**20} MiB)")
    add_field_arg(p, SamplingParams, "max_tokens",
                  description="reply tokens for requests that name no max_tokens (a "
                              "request may ask for more)")
    p.add_argument("--queue-limit", type=queue_limit_arg, default=DEFAULT_QUEUE_LIMIT,
                   metavar="N",
                   help="requests that may wait behind the running one (≥ 1; default "
                        f"{DEFAULT_QUEUE_LIMIT}); one more is answered 429")
    p.set_defaults(handler=run_serve)


def queue_limit_arg(text: str) -> int:
    """``--queue-limit``'s value (argparse ``type``): a whole number ≥ 1. 0 is refused:
    the service queues every job, the first one too, before it runs, so with no room to
    wait nothing could ever run (not even the model's load).

    Raises:
        argparse.ArgumentTypeError: not a whole number, or below 1.
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"must be at least 1, not {value}: each request waits in the queue, if only "
            "for a moment, before it runs, so 0 would refuse every request")
    return value


#: --cors-origin values that let more than one site's pages call the API, and who
CORS_WIDE = {
    "*": "any web page",
    "null": "sandboxed pages and pages opened from files (file://)",
}


def cors_warnings(origins: list[str], api_key: str | None) -> list[str]:
    """One line for stderr per ``--cors-origin`` that lets more than one site's pages call
    the API from a browser (``*``, ``null``), saying who may, and whether the API key
    still guards it."""
    guard = ("; they still need the API key" if api_key else
             "; no --api-key is set, so nothing else stops them")
    return [f"warning: --cors-origin {origin} lets {CORS_WIDE[origin]} call this API "
            f"from a browser{guard}." for origin in dict.fromkeys(origins)
            if origin in CORS_WIDE]


def _settings(args: argparse.Namespace, spec: SpeculationConfig) -> ApiSettings:
    """The API settings the options ask for (validated: pydantic errors propagate)."""
    from app.api.app import ApiSettings

    extra = {} if args.max_body_bytes is None else {"max_body_bytes": args.max_body_bytes}
    return ApiSettings(sampling=SamplingParams(max_tokens=args.max_tokens),
                       speculation=spec, api_key=args.api_key or None,
                       cors_origins=tuple(args.cors_origin), **extra)


def run_serve(args: argparse.Namespace) -> int:
    """Check every option and bind the port, then load the model, print the base URL on
    stdout and serve until Ctrl-C. Returns 0.

    Raises:
        TandemError: a bad option or model file, an address that cannot be served
            (no key for a network host, the port in use), or a failed load; each before
            the model loads, but the last.
    """
    from app.api.server import ApiServer, bind, check_address, client_host
    from app.chat.service import ChatService, JobError

    check_model_files(args)
    check_address(args.host, args.api_key)
    mode = drafter_mode(args)
    try:
        [spec] = speculation_configs(args, mode, [args.draft_max])
        config = session_config(args, mode)
        settings = _settings(args, spec)
    except ValidationError as exc:
        raise option_error(exc) from None
    except ValueError as exc:
        raise TandemError(f"Invalid option: {exc}") from None
    for warning in cors_warnings(args.cors_origin, args.api_key):
        print(warning, file=sys.stderr)
    # the port is bound (and a port in use said) now, not after the load; the server
    # closes the socket when it stops, this block when the load fails
    with bind(args.host, args.port, listen=False) as sock:
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
                               model=info, sock=sock)
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

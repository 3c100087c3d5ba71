"""Command-line options shared by ``python -m app generate`` and ``python -m app bench``.

Both subcommands choose a target, a drafter and its settings the same way; the options
of config fields take their help, range and default from the fields
(:func:`app.options.field_schema`), the defaults that differ are :data:`CLI_DEFAULTS` and
:data:`BENCH_DEFAULTS` with their reasons, and the options' translation into
:class:`~app.engine.session.SessionConfig` and :class:`~app.options.SpeculationConfig`
live here once. An ``argparse.Namespace`` never
leaves :mod:`app.cli`: the layers below get the configs built here.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from app.catalog.gguf_meta import inspect_gguf
from app.catalog.library import is_assistant_file
from app.catalog.model_file import check_model_file
from app.catalog.pairing import ASSISTANT_TARGETS, is_assistant_arch
from app.engine.drafter_kinds import kinds
from app.engine.session import SessionConfig
from app.errors import TandemError
from app.options import (
    DrafterNeeds,
    N_CTX,
    PROMPT_CACHE_MAX_MIB,
    PROMPT_CACHE_MIB,
    SamplingParams,
    SpecMode,
    SpeculationConfig,
    drafter_infos,
    field_schema,
    parse_draft_lengths,
)


def add_draft_length_arg(p: argparse.ArgumentParser, *, several: bool) -> None:
    """--draft-max: the draft length k (``several``: a list such as ``1,3,5,8`` into
    ``args.k``; else one k into ``args.draft_max``), default None (the drafter's default).
    ``--k`` is the same option under its older name, accepted but not listed."""
    help_text = field_help(SpeculationConfig, "draft_max", default_text=default_ks_text())
    if several:
        help_text = "the draft lengths k to compare with off, e.g. 1,3,5,8; " + help_text
    kind: Any = draft_lengths_arg if several else int
    dest = "k" if several else "draft_max"
    p.add_argument("--draft-max", dest=dest, type=kind, default=None,
                   metavar="K[,K…]" if several else "K", help=help_text)
    p.add_argument("--k", dest=dest, type=kind, default=None, help=argparse.SUPPRESS)


def default_ks_text() -> str:
    """Each drafter's default k in words, from the registry: "16 with prompt lookup or
    suffix lookup, 4 with a draft model, 3 with MTP" (most drafters first)."""
    by_k: dict[int, list[str]] = {}
    for info in drafter_infos():
        by_k.setdefault(info.default_k, []).append(info.words)
    groups = sorted(by_k.items(), key=lambda kv: -len(kv[1]))
    return ", ".join(f"{k} with {' or '.join(words)}" for k, words in groups)


def port_arg(text: str) -> int:
    """A TCP port, 0 … 65535 (0: any free one), as an argparse ``type``."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port: ports are 0 … 65535")
    return port


def draft_lengths_arg(text: str) -> tuple[int, ...]:
    """``--k 1,3,5,8`` as sorted, distinct draft lengths (argparse ``type``)."""
    try:
        return parse_draft_lengths(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def auto_help() -> str:
    """--auto's help: what it chooses among, from the registry ("off, prompt lookup,
    suffix, and --draft if given")."""
    free = [i.words for i in drafter_infos()
            if i.auto_rank is not None and i.needs is not DrafterNeeds.DRAFT_MODEL]
    with_model = [i.cli_flag for i in drafter_infos() if i.auto_rank is not None
                  and i.needs is DrafterNeeds.DRAFT_MODEL and i.cli_flag]
    given = f", and {' or '.join(with_model)} if given" if with_model else ""
    return (f"choose the drafter ({', '.join(['off', *free])}{given}) "
            "and k per conversation from measured rates")


def _cache_mib(text: str) -> int:
    """--cache-ram's value: whole MiB in 0 … :data:`PROMPT_CACHE_MAX_MIB`."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of MiB: {text!r}") from None
    if not 0 <= value <= PROMPT_CACHE_MAX_MIB:
        raise argparse.ArgumentTypeError(f"{value} is not in 0 … {PROMPT_CACHE_MAX_MIB} MiB")
    return value


def add_model_args(p: argparse.ArgumentParser, *, server: bool = False,
                   required: bool = True) -> None:
    """--model, --draft | --prompt-lookup | --suffix, --auto, --n-ctx, --n-gpu-layers,
    --threads, --cache-ram, --exact.

    ``server``: the command also takes ``--server`` (:func:`app.cli.remote.add_server_args`),
    where ``--model`` is the server's model id: it is kept as typed (a ``str``; the
    command makes a local model's a ``Path``). ``required``: whether ``--model`` must be
    given (a command that checks it itself passes False)."""
    if server:
        p.add_argument("--model", required=required, type=str,
                       help="target model GGUF (with --server: the model id to request)")
    else:
        p.add_argument("--model", required=required, type=Path, help="target model GGUF")
    drafter = p.add_mutually_exclusive_group()
    for kind in kinds():  # one switch per registered drafter
        info = kind.info
        if info.cli_flag is None:
            continue
        if info.needs is DrafterNeeds.DRAFT_MODEL:
            drafter.add_argument(info.cli_flag, type=Path,
                                 help=f"{info.words} GGUF (same tokenizer): {info.summary}")
        else:
            drafter.add_argument(info.cli_flag, action="store_true",
                                 help=f"draft by {info.words}: {info.summary}")
    p.add_argument("--auto", action="store_true", help=auto_help())
    p.add_argument("--mtp-assistant", type=Path, default=None, metavar="PATH",
                   help="an MTP assistant GGUF paired with the target (Gemma 4's assistant "
                        "drafter, which reads the target's KV cache); drafts with MTP "
                        "(implies --mtp)")
    p.add_argument("--n-ctx", type=int, default=N_CTX, help=f"context window, tokens ({N_CTX})")
    p.add_argument("--n-gpu-layers", type=int, default=None,
                   help="layers on the GPU (default: all when a GPU backend is built in)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads (default: the cores other processes leave free, followed "
                        "between rounds while the machine's load changes)")
    p.add_argument("--cache-ram", type=_cache_mib, default=PROMPT_CACHE_MIB, metavar="MIB",
                   help="memory for saved prompt states, MiB: a conversation or request "
                        "the context gave up is kept so that returning to it re-reads only "
                        f"what is new (0 keeps none; default {PROMPT_CACHE_MIB}, as "
                        "llama-server's --cache-ram)")
    p.add_argument("--exact", action="store_true",
                   help="exact verification: load so that speculation's output equals plain "
                        "decoding's (CPU: with a GPU build add --n-gpu-layers 0; Q4_1/Q5_1/"
                        "Q5_0/Q8_0 weights, or Q4_K/Q6_K, for which this switches ggml's "
                        "tiled K-quant kernel off; docs/proof.md); a note says why when the "
                        "model does not allow it")


def add_drafting_args(p: argparse.ArgumentParser) -> None:
    """--draft-min, --draft-p-min, --fixed-k, --ngram-min, --ngram-max,
    --suffix-spec-factor, --suffix-min-prob (help, defaults and ranges from
    :class:`~app.options.SpeculationConfig`'s fields)."""
    add_field_arg(p, SpeculationConfig, "draft_min", metavar="N")
    add_field_arg(p, SpeculationConfig, "draft_p_min", metavar="P")
    p.add_argument("--fixed-k", action="store_true",
                   help="always draft up to k (default: adaptive, verify only as many draft "
                        "tokens as this machine's measured costs make worthwhile)")
    add_field_arg(p, SpeculationConfig, "ngram_min")
    add_field_arg(p, SpeculationConfig, "ngram_max")
    p.set_defaults(ngram_max=None)  # not given: the default, raised to --ngram-min
    add_field_arg(p, SpeculationConfig, "suffix_spec_factor", metavar="F")
    add_field_arg(p, SpeculationConfig, "suffix_min_prob", metavar="P")


#: Defaults of ``generate`` that differ from the fields' own (app/options.py), and why:
#: greedy decoding (temperature 0), so that one command line prints the same reply every
#: time and a script can compare it; and 256 tokens, a reply a terminal shows whole.
#: Every other option of ``generate`` defaults to its field's default.
CLI_DEFAULTS: dict[str, Any] = {"temperature": 0.0, "max_tokens": 256}

#: Defaults of ``bench`` that differ from the fields' own, and why: greedy decoding and
#: one fixed seed for every run, so that each "on" run can be compared token for token
#: with its "off" run and a benchmark can be rerun; 128 tokens per run, enough rounds for
#: steady rates while prompts × configurations × repeats stay within minutes on a CPU.
BENCH_DEFAULTS: dict[str, Any] = {"temperature": 0.0, "seed": 1234, "max_tokens": 128}


def field_help(model: type[BaseModel], name: str, default: Any = None, *,
               default_text: str | None = None, description: str | None = None) -> str:
    """A help text from a field of ``model``: its description (``description`` words it
    instead), its range and the default (``default`` when given, else the field's;
    ``default_text`` words it instead)."""
    f = field_schema(model, name)
    shown = default_text if default_text is not None else (
        f.default if default is None else default)
    bounds = f.range_text()
    return (f"{description or f.description} "
            f"({bounds + '; ' if bounds else ''}default {shown})")


def number_arg(text: str) -> float:
    """A real number as an argparse ``type``: what ``float()`` reads, except NaN, which
    no range check can refuse (every comparison with it is false).

    Raises:
        argparse.ArgumentTypeError: not a number, or NaN.
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if math.isnan(value):
        raise argparse.ArgumentTypeError(f"must be a number ({text!r}: NaN is not allowed)")
    return value


def add_field_arg(p: argparse.ArgumentParser, model: type[BaseModel], name: str,
                  defaults: Mapping[str, Any] | None = None, *,
                  description: str | None = None, **kwargs: Any) -> None:
    """Add the option :data:`OPTION_NAMES` gives field ``name`` of ``model``, typed as the
    field (a float field: :func:`number_arg`, which refuses NaN), with its help
    (:func:`field_help`; ``description`` replaces the field's words) and its default
    unless ``defaults`` (one of :data:`CLI_DEFAULTS`, :data:`BENCH_DEFAULTS`) names
    another. The value is checked against the field's range when the config is built
    (:func:`option_error`)."""
    f = field_schema(model, name)
    default = (defaults or {}).get(name, f.default)
    kind: Any = number_arg if isinstance(f.default, float) else type(f.default)
    p.add_argument(OPTION_NAMES[name], type=kind, default=default,
                   help=field_help(model, name, default, description=description), **kwargs)


def add_sampling_args(p: argparse.ArgumentParser, names: Sequence[str],
                      defaults: Mapping[str, Any]) -> None:
    """The options of the :class:`~app.options.SamplingParams` fields ``names``."""
    for name in names:
        add_field_arg(p, SamplingParams, name, defaults)


def drafter_mode(args: argparse.Namespace, *, off: bool = False) -> SpecMode:
    """The drafter the options ask for (``off``: ``--no-spec``, plain decoding;
    --mtp-assistant means MTP).

    Raises:
        TandemError: contradictory choices, each named with its flag
            (:func:`drafter_choices`): ``off`` with a drafter's switch, --auto or
            --mtp-assistant; --auto with a drafter's switch other than the draft model
            it may choose; --mtp-assistant with another drafter's switch.
    """
    switches = drafter_choices(args)
    auto = bool(getattr(args, "auto", False))
    assistant = getattr(args, "mtp_assistant", None) is not None
    given = drafter_flags(args)
    if off and given:
        raise TandemError(f"Invalid option: --no-spec turns speculation off, which "
                          f"contradicts {given[0]}; drop one of them.")
    if off:
        return SpecMode.OFF
    mtp = SpecMode("mtp")
    chosen = [(flag, mode) for flag, mode in switches.items()
              if not (assistant and mode is mtp)]
    if assistant and (chosen or auto):
        other = chosen[0][0] if chosen else "--auto"
        raise TandemError(f"Invalid option: --mtp-assistant drafts with MTP, which "
                          f"contradicts {other}; drop one of them.")
    if assistant:
        return mtp
    fixed = [(flag, mode) for flag, mode in chosen
             if mode.info is None or mode.info.needs is not DrafterNeeds.DRAFT_MODEL]
    if auto and fixed:
        raise TandemError(f"Invalid option: --auto chooses the drafter itself, which "
                          f"contradicts {fixed[0][0]}; drop one of them.")
    if auto:
        return SpecMode.AUTO
    return chosen[0][1] if chosen else SpecMode.OFF


def drafter_flags(args: argparse.Namespace, *, no_spec: bool = False) -> list[str]:
    """Every drafter option given, as its flag: the drafter switches
    (:func:`drafter_choices`), ``--auto``, ``--mtp-assistant`` and (``no_spec``)
    ``--no-spec``."""
    given = [*drafter_choices(args)]
    if getattr(args, "auto", False):
        given.append("--auto")
    if getattr(args, "mtp_assistant", None) is not None:
        given.append("--mtp-assistant")
    if no_spec and getattr(args, "no_spec", False):
        given.append("--no-spec")
    return given


def drafter_choices(args: argparse.Namespace) -> dict[str, SpecMode]:
    """The drafter switches given (``--prompt-lookup``, ``--draft PATH`` …) → their modes,
    in the registry's order (argparse lets at most one through: they are one mutually
    exclusive group)."""
    given: dict[str, SpecMode] = {}
    for kind in kinds():
        flag = kind.info.cli_flag
        value = getattr(args, flag.lstrip("-").replace("-", "_"), None) if flag else None
        if flag and value is not None and value is not False:
            given[flag] = kind.mode
    return given


def library_model(given: str | Path) -> Path:
    """``given`` as a path; a bare name that is no file here names the library's model
    of that name, as ``models list`` shows it: its file name (with or without ``.gguf``)
    or the name another app gives it (an Ollama tag such as ``llama3.2:1b``).

    Raises:
        ModelPathError: the name fits no file here and no model in the library, or
            several models there.
    """
    path = Path(given)
    if path.exists() or path.is_symlink() or len(path.parts) != 1:
        return path  # (a dangling link: check_model_file says so)
    from app.catalog.library import Library
    from app.errors import ModelPathError

    try:
        files = Library().discover()
    except OSError:  # the library cannot be read: the path's own error follows
        return path
    name = str(given).casefold()
    found = [f.path for f in files
             if name in (f.path.name.casefold(), f.path.stem.casefold(), (f.label or "").casefold())]
    if len(found) > 1 and len(_copy_keys(found)) == 1:
        found = found[:1]  # copies of one model: `models list` shows the first
    if len(found) > 1:
        raise ModelPathError(f"{given} names {len(found)} models in the library: "
                             + ", ".join(map(str, found)) + ". Give the path of one.")
    if not found:
        raise ModelPathError(f"Model file not found: {path.absolute()}, and the library has "
                             f"no model named {path.name} (`python -m app models list` shows "
                             "the models it has).")
    return found[0]


def _copy_keys(paths: list[Path]) -> set[object]:
    """The distinct models among ``paths`` (:func:`app.catalog.library.copy_key`; a file
    that cannot be read counts as one of its own)."""
    from app.catalog.library import copy_key

    keys: set[object] = set()
    for p in paths:
        try:
            keys.add(copy_key(p))
        except OSError:
            keys.add(p)
    return keys


def check_model_files(args: argparse.Namespace) -> None:
    """Turns a --model or --draft given by its library name into its path
    (:func:`library_model`). Raises ModelPathError for a --model, --draft or
    --mtp-assistant that is not a readable file (missing, a folder, a pipe, a dangling link; see
    :func:`app.catalog.model_file.check_model_file`), and TandemError for an MTP
    assistant given as --draft or another model given as --mtp-assistant."""
    args.model = library_model(args.model)
    if args.draft is not None:
        args.draft = library_model(args.draft)
    assistant = getattr(args, "mtp_assistant", None)
    for path in (args.model, args.draft, assistant):
        if path is not None:
            check_model_file(path)
            inspect_gguf(Path(path))  # a file that is no GGUF, or cut short, as the window says
    if assistant is not None:
        arch = inspect_gguf(Path(assistant)).architecture  # a broken file: its own error
        if not is_assistant_arch(arch):
            raise TandemError(
                f"{Path(assistant).name} is a {arch} model, not an MTP assistant "
                f"({', '.join(sorted(ASSISTANT_TARGETS))}); a draft model with the same "
                "tokenizer goes with --draft.")
    if args.draft is not None and is_assistant_file(args.draft):
        raise TandemError(f"{Path(args.draft).name} is an MTP assistant; give it with "
                          "--mtp-assistant.")


class PromptOptions(BaseModel):
    """How ``generate`` turns its prompt text into a prompt (validated once, here).

    ``chat``: wrap the text as a user message in the model's chat template; ``system``:
    a system message, which only a chat prompt has.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: str
    chat: bool = False
    system: str | None = None

    @field_validator("system")
    @classmethod
    def _system_needs_chat(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and not info.data.get("chat"):
            raise ValueError("a system prompt needs a chat prompt: add --chat, or drop --system")
        return v


#: config field → the command-line option that sets it, for error messages
OPTION_NAMES = {
    "n_threads": "--threads", "n_ctx": "--n-ctx", "n_gpu_layers": "--n-gpu-layers",
    "prefix_cache_bytes": "--cache-ram",
    "draft_max": "--draft-max", "draft_min": "--draft-min", "draft_p_min": "--draft-p-min",
    "ngram_min": "--ngram-min", "ngram_max": "--ngram-max",
    "suffix_spec_factor": "--suffix-spec-factor", "suffix_min_prob": "--suffix-min-prob",
    "temperature": "--temp",
    "top_k": "--top-k", "top_p": "--top-p", "min_p": "--min-p", "seed": "--seed",
    "repeat_penalty": "--repeat-penalty", "max_tokens": "--max-tokens", "system": "--system",
    "max_body_bytes": "--max-body-bytes",
}


def option_error(exc: ValidationError) -> TandemError:
    """A pydantic error of an options config as one sentence naming the option."""
    try:
        e = exc.errors()[0]
    except (IndexError, TypeError):
        return TandemError(f"Invalid option: {str(exc).splitlines()[0]}")
    field = ".".join(str(x) for x in e.get("loc", ()))
    msg = str(e.get("msg", "")).removeprefix("Value error, ")
    name = OPTION_NAMES.get(field, field)
    return TandemError(f"Invalid option {name}: {msg}." if name else f"Invalid options: {msg}.")


def speculation_configs(args: argparse.Namespace, mode: SpecMode,
                        ks: Sequence[int | None]) -> list[SpeculationConfig]:
    """One SpeculationConfig per draft length k; None: the drafter's default k
    (:func:`app.options.default_draft_max`). ``--ngram-max`` not given is its default,
    raised to ``--ngram-min`` (given both, reversed, they are refused). Pydantic errors
    propagate as ValueError."""
    ngram_max = args.ngram_max
    if ngram_max is None:
        ngram_max = max(args.ngram_min, SpeculationConfig.model_fields["ngram_max"].default)
    return [
        SpeculationConfig(
            mode=mode,
            **({} if k is None else {"draft_max": k}),
            draft_min=args.draft_min,
            draft_p_min=args.draft_p_min,
            ngram_min=args.ngram_min,
            ngram_max=ngram_max,
            suffix_spec_factor=args.suffix_spec_factor,
            suffix_min_prob=args.suffix_min_prob,
            adaptive=not args.fixed_k,
        )
        for k in ks
    ]


def session_config(args: argparse.Namespace, mode: SpecMode) -> SessionConfig:
    """The SessionConfig for these options (the draft is loaded only in draft-model and
    auto mode, the MTP assistant in MTP mode)."""
    draft = args.draft if mode in (SpecMode.DRAFT_MODEL, SpecMode.AUTO) else None
    if mode is SpecMode("mtp"):
        draft = getattr(args, "mtp_assistant", None)
    return SessionConfig(
        target_path=args.model,
        draft_path=draft,
        n_ctx=args.n_ctx,
        n_gpu_layers=args.n_gpu_layers,
        n_threads=args.threads,
        exact_verification=getattr(args, "exact", False),
        prefix_cache_bytes=args.cache_ram * 2**20,
    )

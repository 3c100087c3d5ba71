"""``python -m app models …``: the model library, pairing check and downloads on the command line.

Subcommands (each handler returns the exit status; user errors raise
:class:`app.errors.TandemError`, which :mod:`app.cli.main` prints on one line, exit 2):

* ``models list [--json] [--folder DIR]`` — every model the library finds.
* ``models inspect PATH [--json]`` — one file's metadata (:func:`inspect_gguf`) and
  whether llama.cpp loads it (exit 2 when it does not, as ``generate`` would refuse it).
* ``models pair TARGET DRAFT [--json]`` — llama.cpp's pairing rule, every check with its
  detail; exit 0 when compatible, 1 when not, 2 when a file cannot be read (the same
  output either way, so scripts can test the status). ``TARGET`` and
  ``DRAFT`` may be ``hf:owner/repo/file.gguf`` to check files still on the hub (headers
  only, by HTTP range requests).
* ``models drafts TARGET [--json]`` — the library's models ranked as drafts for a target.
* ``models catalog [--json]`` — the curated target/draft pairs.
* ``models download REPO FILE`` or ``models download --pair ID`` — download into the
  models folder (a curated pair is pair-checked first), with progress on stderr.
* ``models config [--models-dir DIR] [--add-folder DIR] [--endpoint URL]`` — where the
  library looks and which hub it uses.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from app.cli.json_output import print_json
from app.errors import TandemError


#: ``models pair`` exit status: the draft can draft for the target
PAIR_COMPATIBLE = 0
#: ``models pair`` exit status: both files were read and the pair is not compatible
PAIR_NOT_COMPATIBLE = 1


def add_cli_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``models`` command and its subcommands to :mod:`app.cli.main`'s parser."""
    models = sub.add_parser("models", help="list, inspect, pair-check and download GGUF models")
    msub = models.add_subparsers(dest="models_command", metavar="SUBCOMMAND")
    models.set_defaults(handler=lambda _args: _usage(models))

    found = ("models in the models folder, added folders and opened files, and those that "
             "LM Studio, Ollama, llama.cpp and Jan downloaded or the Hugging Face cache holds")
    p = msub.add_parser("list", help=found, description=found[0].upper() + found[1:] + ".")
    p.add_argument("--folder", action="append", type=Path, default=[], help="also scan this folder")
    p.add_argument("--no-load-check", action="store_true",
                   help="read headers only; do not check that llama.cpp loads each model")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_run_list)

    p = msub.add_parser("inspect", help="metadata of one GGUF file, and whether llama.cpp loads it")
    p.add_argument("path", type=Path)
    p.add_argument("--no-load-check", action="store_true",
                   help="read the header only; do not check that llama.cpp loads it")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_run_inspect)

    p = msub.add_parser(
        "pair", help="can DRAFT draft for TARGET? (llama.cpp's rule)",
        epilog="exit status: 0 compatible, 1 not compatible, 2 error (a file cannot be read)")
    p.add_argument("target", help="a GGUF path, or hf:owner/repo/file.gguf")
    p.add_argument("draft", help="a GGUF path, or hf:owner/repo/file.gguf")
    p.add_argument("--endpoint", default=None, help="hub endpoint for hf: files (default: HF_ENDPOINT)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_run_pair)

    p = msub.add_parser("drafts", help="the library's models ranked as drafts for TARGET")
    p.add_argument("target", type=Path)
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_run_drafts)

    p = msub.add_parser("catalog", help="curated target/draft pairs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_run_catalog)

    p = msub.add_parser("download", help="download a model (REPO FILE) or a curated pair (--pair ID)")
    p.add_argument("repo", nargs="?", help="owner/name on the hub")
    p.add_argument("file", nargs="?", help="file in the repository (part 1 of a split model: all parts)")
    p.add_argument("--pair", metavar="ID", help="a curated pair id (see `models catalog`)")
    p.add_argument("--quant", help="with --pair: the target's quantization (default: the pair's)")
    p.add_argument("--draft-quant", help="with --pair: the draft's quantization")
    p.add_argument("--no-check", action="store_true", help="with --pair: skip the pairing check")
    p.add_argument("--dir", type=Path, default=None, help="models folder (default: the library's)")
    p.add_argument("--endpoint", default=None, help="hub endpoint (default: setting, HF_ENDPOINT)")
    p.add_argument("--revision", default="main")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=_run_download)

    p = msub.add_parser("config", help="show or change where the library looks")
    p.add_argument("--models-dir", type=Path, help="where downloads go")
    p.add_argument("--add-folder", type=Path, action="append", default=[], help="scan this folder too")
    p.add_argument("--remove-folder", type=Path, action="append", default=[])
    p.add_argument("--endpoint", help="hub mirror URL ('' to clear)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_run_config)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _print_json(data: dict[str, Any]) -> None:
    print_json(data)


def _run_list(args: argparse.Namespace) -> int:
    from app.catalog.library import Library, load_library_config
    from app.formatting import format_bytes, format_count, format_parameters

    config = load_library_config()
    config.folders = [*config.folders, *[f.expanduser().absolute() for f in args.folder]]
    entries = Library(config).scan(check_loads=not args.no_load_check)
    if args.json:
        _print_json({"models": [e.to_dict() for e in entries]})
        return 0
    if not entries:
        print("No models found. Download one (`models download`) or add a folder (`models config --add-folder`).")
        return 0
    # the window's names (file names), then the metadata's; "trained ctx": the context
    # length the model was trained for (a load may use less: Sampling → Model)
    rows = [["file", "name in metadata", "quant", "size", "params", "trained ctx", "vocab",
             "tokens", "source", "path"]]
    rows += [[e.title[:48], e.info.name[:32], e.info.quantization,
              format_bytes(e.info.file_size), format_parameters(e.info.parameter_count),
              format_count(e.info.context_length), e.info.vocab_type, str(e.info.n_vocab),
              e.file.source, str(e.path)]
             for e in entries if e.info is not None and e.error is None]
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    right = {3, 4, 5, 7}  # size, params, trained ctx, tokens: numbers
    for r in rows:
        print("  ".join(v.rjust(w) if c in right else v.ljust(w)
                        for c, (v, w) in enumerate(zip(r, widths))).rstrip())
    for e in entries:
        if e.info is None or e.error is not None:
            print(f"!  {e.path}  ({e.error})")
    return 0


def _run_inspect(args: argparse.Namespace) -> int:
    from app.catalog.gguf_meta import inspect_gguf
    from app.formatting import format_bytes, format_parameters

    from app.catalog.pairing import ASSISTANT_TARGETS

    info = inspect_gguf(args.path)
    loads: bool | None = None
    load_error: str | None = None
    # an MTP assistant loads only beside its target: `models pair TARGET ASSISTANT` checks it
    drafts_for = ASSISTANT_TARGETS.get(info.architecture)
    if not args.no_load_check and drafts_for is None:
        from app.catalog.loadcheck import check_loads

        verdict = check_loads(Path(info.path))
        loads = verdict.loads
        load_error = verdict.message(Path(info.path).name) or None
    # the exit status says whether the model can be used, as `generate` would find
    status = 2 if loads is False else 0
    if args.json:
        _print_json({**info.to_dict(), "loads": loads, "load_error": load_error})
        if load_error:
            print(f"error: {load_error}", file=sys.stderr)
        return status
    rows = [
        ("name", info.name),
        ("architecture", info.architecture),
        ("type", info.model_type),
        ("parameters", f"{format_parameters(info.parameter_count)} ({info.parameter_count})"),
        ("quantization", info.quantization),
        ("file size", f"{format_bytes(info.file_size)} ({info.file_size} bytes, {info.split_count} part(s))"),
        ("context length", str(info.context_length)),
        ("tokenizer", f"{info.vocab_type} ({info.tokenizer_model}, pre {info.tokenizer_pre}), {info.n_vocab} tokens"),
        ("BOS", f"{info.bos_id} (added: {info.add_bos})"),
        ("EOS", f"{info.eos_id} (added: {info.add_eos})"),
        ("chat template", "yes" if info.has_chat_template else "no"),
        ("MTP layers", f"{info.nextn_layers} (an MTP assistant's)" if drafts_for else
                       f"{info.nextn_layers} (nextn: the MTP drafter can use them)"
                       if info.nextn_layers else "none"),
        ("loads", f"with a {' or '.join(drafts_for)} target only (an MTP assistant: "
                  "models pair TARGET THIS checks the pair)" if drafts_for else
                  "not checked" if loads is None else "yes" if loads else "no"),
    ]
    for k, v in rows:
        print(f"{k:15} {v}")
    if load_error:
        print(f"error: {load_error}", file=sys.stderr)
    return status


def _run_pair(args: argparse.Namespace) -> int:
    from app.catalog.gguf_meta import inspect_gguf, load_vocab
    from app.catalog.library import model_shape
    from app.catalog.pairing import PairResult, check_drafter_pair

    result: PairResult
    extra: dict[str, Any] = {}
    if args.target.startswith("hf:") or args.draft.startswith("hf:"):
        from app.catalog.hub import check_remote_pair

        if not (args.target.startswith("hf:") and args.draft.startswith("hf:")):
            raise TandemError("Give both models as hf:owner/repo/file.gguf, or both as local paths.")
        remote = check_remote_pair(_remote(args.target), _remote(args.draft), endpoint=args.endpoint)
        result = remote.result
        extra = {k: v for k, v in remote.to_dict().items() if k in ("target", "draft")}
    else:
        t, d = Path(args.target), Path(args.draft)
        t_info, d_info = inspect_gguf(t), inspect_gguf(d)
        result = check_drafter_pair(load_vocab(t), load_vocab(d), target_shape=model_shape(t_info),
                                    draft_shape=model_shape(d_info), target_size=t_info.file_size,
                                    draft_size=d_info.file_size)
    status = PAIR_COMPATIBLE if result.compatible else PAIR_NOT_COMPATIBLE
    if args.json:
        _print_json({**result.to_dict(), **extra})
        return status
    for c in result.checks:
        print(f"{'ok  ' if c.ok else 'FAIL'} {c.rule:11} {c.detail}")
    for w in result.warnings:
        print(f"note {w}")
    print("compatible" if result.compatible else "not compatible")
    return status


def _remote(spec: str) -> Any:
    from app.catalog.hub import parse_hub_file

    return parse_hub_file(spec)


def _run_drafts(args: argparse.Namespace) -> int:
    from app.catalog.library import Library, ModelFile, drafts_for, inspect_model_file

    target_path = args.target.expanduser().absolute()
    target = inspect_model_file(ModelFile(target_path, (target_path,), (), "file"))
    if target.info is None:
        raise TandemError(target.error or f"{target_path} cannot be read.")
    ranked = drafts_for(target, [e for e in Library().scan() if e.usable])
    if args.json:
        _print_json({"target": str(target_path), "drafts": [
            {"path": str(c.key.path), "name": c.key.name, "compatible": c.compatible, "useful": c.useful,
             "cost_ratio": c.cost_ratio, "reason": c.reason, "checks": c.result.to_dict()["checks"]}
            for c in ranked
        ]})
        return 0
    for c in ranked:
        mark = "ok " if c.useful else "big" if c.compatible else "no "
        cost = f"c≈{c.cost_ratio:.2f}" if c.cost_ratio is not None else "c=?"
        print(f"{mark} {c.key.name[:40]:40} {cost:8} {c.reason if not c.compatible else ''}")
    return 0


def _run_catalog(args: argparse.Namespace) -> int:
    from app.catalog.curated import load_curated_pairs
    from app.formatting import format_bytes

    pairs = load_curated_pairs()
    if args.json:
        _print_json({"pairs": [p.model_dump(mode="json") for p in pairs]})
        return 0
    for p in pairs:
        t = p.target.file_for()
        print(f"{p.id:28} {p.target.repo}/{t.file} (~{format_bytes(t.size_bytes)})")
        if p.draft is not None:
            d = p.draft.file_for()
            kind = " (MTP assistant)" if p.draft_kind == "mtp-assistant" else ""
            print(f"{'':28} + {p.draft.repo}/{d.file} (~{format_bytes(d.size_bytes)}){kind}")
        if p.drafters:
            print(f"{'':28}   drafters: {', '.join(p.drafters)}")
    return 0


class _TerminalProgress:
    """One updating line on stderr: phase, file, bytes, speed, ETA."""

    def __init__(self) -> None:
        self._last = 0.0
        self._open = False

    def finish(self) -> None:
        """End the progress line (before an error message, for example)."""
        if self._open:
            sys.stderr.write("\n")
            self._open = False

    def __call__(self, p: Any) -> None:
        from app.formatting import format_bytes, format_duration

        now = time.monotonic()
        if p.phase == "checking" or (p.phase == "downloading" and now - self._last < 0.5):
            return
        self._last = now
        self._open = p.phase != "done"
        total = format_bytes(p.total) if p.total else "?"
        pct = f"{p.fraction:6.1%}" if p.fraction is not None else "     ?"
        speed = f"{format_bytes(p.speed)}/s" if p.speed else ""
        eta = f"ETA {format_duration(p.eta)}" if p.eta is not None else ""
        line = f"{p.phase:11} {p.filename[-40:]:40} {pct} {format_bytes(p.downloaded)}/{total} {speed} {eta}"
        sys.stderr.write("\r" + line[:150].ljust(150))
        if p.phase == "done":
            sys.stderr.write("\n")
        sys.stderr.flush()


def _run_download(args: argparse.Namespace) -> int:
    from app.catalog.hub import Download, DownloadStopped, check_curated_pair, curated_downloads

    jobs: list[Download]
    check: dict[str, Any] | None = None
    if args.pair:
        if args.repo or args.file:
            raise TandemError("Give either --pair ID or REPO FILE, not both.")
        from app.catalog.curated import find_pair

        pair = find_pair(args.pair)
        if not args.no_check and pair.draft is None:
            from app.catalog.hub import check_curated_target

            header = check_curated_target(pair, target_quant=args.quant, endpoint=args.endpoint)
            check = {"target": {"file": header.meta.file.display,
                                "size": header.vocab.info.file_size,
                                "bytes_fetched": header.bytes_fetched}}
        elif not args.no_check:
            remote = check_curated_pair(pair, target_quant=args.quant, draft_quant=args.draft_quant,
                                        endpoint=args.endpoint)
            check = remote.to_dict()
            if not args.json:
                print(f"pairing check ({remote.target.bytes_fetched + remote.draft.bytes_fetched} bytes of headers read):",
                      file=sys.stderr)
                for c in remote.result.checks:
                    print(f"  {'ok  ' if c.ok else 'FAIL'} {c.rule:11} {c.detail}", file=sys.stderr)
            if not remote.result.compatible:
                raise TandemError(f"The curated pair {pair.id} failed the pairing check: {remote.result.reason()}")
        jobs = list(curated_downloads(pair, target_quant=args.quant, draft_quant=args.draft_quant,
                                      models_dir=args.dir, endpoint=args.endpoint))
    else:
        if not (args.repo and args.file):
            raise TandemError("Give REPO and FILE (for example: bartowski/Qwen2.5-0.5B-Instruct-GGUF"
                              " Qwen2.5-0.5B-Instruct-Q8_0.gguf), or --pair ID.")
        jobs = [Download(args.repo, args.file, models_dir=args.dir, endpoint=args.endpoint, revision=args.revision)]
    paths = []
    for job in jobs:
        progress = _TerminalProgress()
        try:
            paths.append(job.run(None if args.json else progress))
        except (DownloadStopped, KeyboardInterrupt):
            progress.finish()
            sys.stderr.write(f"Download of {job.repo_id} stopped; run the same command to resume.\n")
            return 130
        except TandemError:
            progress.finish()
            raise
    if args.json:
        _print_json({"paths": [str(p) for p in paths], "check": check})
    else:
        for p in paths:
            print(p)
    return 0


def _run_config(args: argparse.Namespace) -> int:
    from app.catalog.library import (
        Library,
        current_models_dir,
        load_library_config,
        save_library_config,
    )

    config = load_library_config()
    changed = False
    if args.models_dir is not None:
        config.models_dir = args.models_dir.expanduser().absolute()
        changed = True
    lib = Library(config)
    for folder in args.add_folder:
        lib.add_folder(folder)
        changed = True
    for folder in args.remove_folder:
        lib.remove(folder)
        changed = True
    if args.endpoint is not None:
        try:
            config.hf_endpoint = args.endpoint or None
        except ValueError as exc:
            raise TandemError(f"{args.endpoint!r} is not an http(s) URL.") from exc
        changed = True
    if changed:
        save_library_config(config)
    data = config.model_dump(mode="json")
    data["effective_models_dir"] = str(current_models_dir(config))
    if args.json:
        _print_json(data)
    else:
        for k, v in data.items():
            print(f"{k:21} {v}")
    return 0

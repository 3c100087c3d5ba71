"""Launch commands for a serving engine on a bigger machine: llama-server and vLLM.

"Run this on a bigger machine": from the target, the drafter and k that Tandem runs, this
module writes the command that starts the same pair on llama-server or vLLM, so that
Tandem (or anything OpenAI-compatible) can connect to it. It returns the argument vector
and typed notes; the front ends word the notes and show the command.

Models are named as the engine can fetch them: a model the curated catalog
(:mod:`app.catalog.curated`) knows by its file name, or one in the Hugging Face cache, by
its repository (llama-server's ``-hf owner/name:QUANT``; vLLM's original-weights
repository, ``weights_repo``); any other by its local path. vLLM 0.32 loads no GGUF, so
its command needs a Hugging Face repository or folder: a GGUF the catalog does not know
gets :class:`ServeNote.VLLM_NEEDS_WEIGHTS` and the path as a placeholder to replace.

The flags are the engines' own, read from their parsers (``llama-server --help`` of the
llama.cpp that llama-cpp-python 0.3.36 vendors; vLLM 0.32.0's ``vllm serve`` parser and
``SpeculativeConfig``); tests run each command through those parsers where installed.
Drafters map as follows:

============== ===================================== =====================================
drafter        llama-server ``--spec-type``           vLLM ``speculative_config.method``
============== ===================================== =====================================
draft model    ``draft-simple`` + ``-md``/``-hfd``    ``draft_model`` + ``model``
prompt lookup  ``ngram-simple`` (size n, size m = k)  ``ngram`` (prompt_lookup_min/max)
suffix lookup  ``ngram-mod`` (pool shared by requests) ``suffix`` (needs arctic-inference)
MTP            ``draft-mtp`` (heads in the target)    ``mtp``
MTP assistant  ``draft-mtp`` + ``-md``/``-hfd``      ``mtp`` + ``model``
EAGLE-3        ``draft-eagle3`` + ``-md``              ``eagle3`` + ``model``
============== ===================================== =====================================

llama.cpp has no suffix-tree drafter; ``ngram-mod``, whose n-gram pool is shared across
requests as the suffix drafter's index is across replies, is the nearest
(:attr:`ServeNote.SUFFIX_APPROXIMATED`).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from app.catalog.curated import CuratedModel, CuratedPair, load_curated_pairs
from app.errors import TandemError
from app.options import DEFAULT_PORT, SpecMode, SpeculationConfig

#: the environment variable the commands read the API key from
DEFAULT_API_KEY_ENV = "TANDEM_SERVER_KEY"
#: where a generated server listens by default: every interface
EVERY_INTERFACE = "0.0.0.0"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_QUANT = re.compile(r"(?i)[-._](I?Q\d+_[A-Z0-9_]+|Q\d+_\d|BF16|F16|F32)(?=\.gguf$|-\d{5}-of-\d{5}\.gguf$)")


class ServeEngine(str, Enum):
    """The serving engine a command is written for."""

    LLAMA_SERVER = "llama-server"
    VLLM = "vllm"

    def __str__(self) -> str:
        return str(self.value)


class ServeDrafter(str, Enum):
    """The drafter the server runs (Tandem's modes, plus EAGLE-3 heads that only servers run)."""

    OFF = "off"
    DRAFT_MODEL = "draft-model"
    PROMPT_LOOKUP = "prompt-lookup"
    SUFFIX = "suffix"
    MTP = "mtp"
    EAGLE3 = "eagle3"

    def __str__(self) -> str:
        return str(self.value)

    @property
    def needs_draft(self) -> bool:
        """Whether a second model (draft model, EAGLE-3 head) must be given."""
        return self in (ServeDrafter.DRAFT_MODEL, ServeDrafter.EAGLE3)


class ServeNote(str, Enum):
    """Something the user should know about a command (worded by the front ends)."""

    #: vLLM needs Hugging Face weights; the GGUF's original repository is not known
    VLLM_NEEDS_WEIGHTS = "vllm-needs-weights"
    #: the model is named by a path on this machine: copy it to the server or change it
    LOCAL_PATH = "local-path"
    #: llama.cpp has no suffix-tree drafter: ngram-mod stands in
    SUFFIX_APPROXIMATED = "suffix-approximated"
    #: vLLM's suffix decoding needs the arctic-inference package on the server
    SUFFIX_NEEDS_ARCTIC = "suffix-needs-arctic"
    #: MTP needs a target whose weights carry multi-token-prediction heads
    MTP_NEEDS_HEADS = "mtp-needs-heads"
    #: the server listens on every interface; the key is read from an environment variable
    API_KEY_FROM_ENV = "api-key-from-env"


@dataclass(frozen=True, slots=True)
class ModelSource:
    """Where a model comes from, as far as this machine knows.

    Attributes:
        label: a short name for people (the file name, or the repository).
        path: the local GGUF (or Hugging Face folder), if there is one.
        gguf_repo: the Hugging Face repository that holds the GGUF (``owner/name``).
        quant: the quantization tag of the GGUF file (``Q4_K_M``), when known.
        weights_repo: the repository of the original weights (for vLLM), when known.
        gguf_file: the GGUF's file name in ``gguf_repo``, when known (the catalog's):
            named on the command line where ``repo:quant`` would not tell two files apart.
        mtp_layers: the multi-token-prediction (nextn) layers the catalog records for the
            model (0: none), None when the catalog does not know it.
    """

    label: str
    path: Path | None = None
    gguf_repo: str | None = None
    quant: str | None = None
    weights_repo: str | None = None
    gguf_file: str | None = None
    mtp_layers: int | None = None

    @property
    def is_hf_folder(self) -> bool:
        """A local Hugging Face model folder (``config.json`` inside), which vLLM serves."""
        return self.path is not None and (self.path / "config.json").is_file()


@dataclass(frozen=True, slots=True)
class ServePlan:
    """What to launch: the engine, the target, the drafter and its settings.

    Attributes:
        engine: llama-server or vLLM.
        target: the target model.
        drafter: the drafter; ``draft`` is required for the draft model and EAGLE-3.
        draft: the draft model or EAGLE-3 head; with MTP, the MTP assistant (a separate
            GGUF such as Gemma 4's, which llama-server loads as its draft model and runs
            on the target's cache), None for heads inside the target.
        k: draft length, tokens proposed per round (1 … 1024).
        draft_min: a shorter draft is dropped (llama-server's ``--spec-draft-n-min``,
            ``--spec-ngram-mod-n-min``; vLLM has none).
        draft_p_min: the draft model stops below this probability (llama-server only).
        ngram_min / ngram_max: prompt lookup's n-gram sizes, in tokens.
        host / port: where the server listens.
        api_key_env: the environment variable holding the API key (None: no key; then
            the server listens on 127.0.0.1 only, whatever ``host`` says).
        gpus: GPUs to spread the target over (vLLM ``--tensor-parallel-size``; llama-server
            splits over every visible GPU itself).
        ctx_size: context length in tokens (None: the model's own).

    Raises:
        TandemError: a value out of range, or a drafter that needs a draft without one.
    """

    engine: ServeEngine
    target: ModelSource
    drafter: ServeDrafter = ServeDrafter.OFF
    draft: ModelSource | None = None
    k: int = 4
    draft_min: int = 0
    draft_p_min: float = 0.0
    ngram_min: int = 2
    ngram_max: int = 4
    host: str = EVERY_INTERFACE
    port: int = DEFAULT_PORT
    api_key_env: str | None = DEFAULT_API_KEY_ENV
    gpus: int = 1
    ctx_size: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.k <= 1024:
            raise TandemError(f"The draft length k must be within 1 … 1024, not {self.k}.")
        if not 0 <= self.draft_min <= self.k:
            raise TandemError(f"draft_min must be within 0 … k ({self.k}), not {self.draft_min}.")
        if not 0.0 <= self.draft_p_min <= 1.0:
            raise TandemError(f"draft_p_min must be within 0 … 1, not {self.draft_p_min}.")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise TandemError(f"The n-gram sizes must satisfy 1 ≤ min ≤ max, not "
                              f"{self.ngram_min} … {self.ngram_max}.")
        if not 1 <= self.port <= 65535:
            raise TandemError(f"The port must be within 1 … 65535, not {self.port}.")
        if not 1 <= self.gpus <= 1024:
            raise TandemError(f"The GPU count must be within 1 … 1024, not {self.gpus}.")
        if self.ctx_size is not None and self.ctx_size < 1:
            raise TandemError(f"The context length must be positive, not {self.ctx_size}.")
        if self.api_key_env is not None and not _ENV_NAME.match(self.api_key_env):
            raise TandemError(f"{self.api_key_env!r} is not an environment variable name.")
        if self.drafter.needs_draft and self.draft is None:
            raise TandemError(f"The drafter {self.drafter} needs a draft model; none was given.")
        if self.draft is not None and _same_file(self.draft, self.target):
            raise TandemError(f"The {self.drafter} drafter's model {self.draft.label} is the "
                              "target's own file; name a separate draft (an MTP assistant).")


@dataclass(frozen=True, slots=True)
class ServeCommand:
    """A launch command: the argument vector and what the user should know about it.

    ``argv[0]`` is the program (``llama-server``, ``vllm``). An argument ``$NAME`` stands
    for an environment variable's value; :meth:`shell` writes it as ``"$NAME"`` so the
    shell expands it.
    """

    engine: ServeEngine
    argv: tuple[str, ...]
    notes: tuple[ServeNote, ...]
    speculative_config: dict[str, object] | None = None

    def shell(self, *, width: int = 100) -> str:
        """The command for a POSIX shell: one option and its value per line, joined with
        backslash continuations when the one-line form is longer than ``width`` characters."""
        words = [_quote(a) for a in self.argv]
        one_line = " ".join(words)
        if len(one_line) <= width:
            return one_line
        lines: list[str] = []
        for word, raw in zip(words, self.argv):
            if raw.startswith("-") or not lines:
                lines.append(word)
            else:
                lines[-1] += " " + word
        return " \\\n  ".join(lines)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: engine, argv, the shell line, notes and the speculative config."""
        return {"engine": self.engine.value, "argv": list(self.argv), "shell": self.shell(),
                "notes": [n.value for n in self.notes],
                "speculative_config": self.speculative_config}


def _same_file(a: ModelSource, b: ModelSource) -> bool:
    """Whether two sources name the same file (the same path, or repository and file)."""
    if a.path is not None and a.path == b.path:
        return True
    return (a.gguf_file is not None and a.gguf_file == b.gguf_file
            and (a.gguf_repo or "").lower() == (b.gguf_repo or "").lower())


def _quote(arg: str) -> str:
    if arg.startswith("$") and _ENV_NAME.match(arg[1:]):
        return f'"{arg}"'
    return shlex.quote(arg)


def quant_of(file_name: str) -> str | None:
    """The quantization tag in a GGUF file name (``…-Q4_K_M.gguf`` → ``Q4_K_M``), or None."""
    m = _QUANT.search(file_name)
    return m.group(1).upper() if m else None


def _catalog_models(pairs: Sequence[CuratedPair]) -> list[CuratedModel]:
    return [m for p in pairs for m in p.models]


def source_for_path(path: Path, *, pairs: Sequence[CuratedPair] | None = None) -> ModelSource:
    """What is known about a local model file or folder.

    A GGUF whose file name the curated catalog offers gets that repository, quantization
    and original-weights repository; a file in the Hugging Face cache
    (``…/models--owner--name/snapshots/…``) gets its repository; any other is named by its
    path only.

    Args:
        path: a ``.gguf`` file or a Hugging Face model folder.
        pairs: the curated pairs (default: the app's catalog).
    """
    pairs = load_curated_pairs() if pairs is None else pairs
    name = path.name
    for model in _catalog_models(pairs):
        for f in model.files:
            if name in (f.file, Path(f.file).name):
                return ModelSource(label=name, path=path, gguf_repo=model.repo, quant=f.quant,
                                   weights_repo=model.weights_repo, gguf_file=f.file,
                                   mtp_layers=model.mtp_layers)
    for part in path.parts:
        if part.startswith("models--") and part.count("--") >= 2:
            owner, _, repo = part[len("models--"):].partition("--")
            if name.lower().endswith(".gguf"):
                return ModelSource(label=name, path=path, gguf_repo=f"{owner}/{repo}",
                                   quant=quant_of(name))
            return ModelSource(label=name, path=path, weights_repo=f"{owner}/{repo}")
    return ModelSource(label=name, path=path)


def resolve_model(ref: str, *, pairs: Sequence[CuratedPair] | None = None) -> ModelSource:
    """A model named on the command line: a local path, ``owner/name[:QUANT]``, the
    name of a model in the curated catalog (``SmolLM2-135M-Instruct``), or the id of a
    catalog pair (``nemotron-3-nano-4b``, as ``models catalog`` lists it: its target).

    A repository the catalog knows as a GGUF repository gets its original-weights
    repository too; another repository is taken as both (llama-server picks the GGUF
    by ``:QUANT``, vLLM loads the weights).

    Raises:
        TandemError: ``ref`` is none of these (a path that does not exist, say).
    """
    pairs = load_curated_pairs() if pairs is None else pairs
    local = Path(ref).expanduser()
    if local.exists():
        return source_for_path(local.resolve(), pairs=pairs)
    models = _catalog_models(pairs)
    for model in models:
        if ref.lower() == model.name.lower():
            return _catalog_source(model)
    for pair in pairs:
        if ref.lower() == pair.id.lower():
            return _catalog_source(pair.target)
    repo, _, quant = ref.partition(":")
    if _REPO_ID.match(repo) and ":" not in quant:
        for model in models:
            if repo.lower() == model.repo.lower() or (
                    model.weights_repo and repo.lower() == model.weights_repo.lower()):
                return _catalog_source(model, quant.upper() or None)
        return ModelSource(label=ref, gguf_repo=repo, quant=quant.upper() or None,
                           weights_repo=repo)
    raise TandemError(f"{ref!r} is neither a file or folder here, nor a Hugging Face repository "
                      "(owner/name[:QUANT]), nor a model of the curated catalog.")


def _catalog_source(model: CuratedModel, quant: str | None = None) -> ModelSource:
    """A catalog model at ``quant`` (default: its default quantization); a quantization
    the catalog does not list keeps the tag and no file name.
    """
    quant = quant or model.default_quant
    file = next((f.file for f in model.files if f.quant.upper() == quant.upper()), None)
    return ModelSource(label=model.name, gguf_repo=model.repo, quant=quant,
                       weights_repo=model.weights_repo, gguf_file=file,
                       mtp_layers=model.mtp_layers)


def _assistant_pairs(pairs: Sequence[CuratedPair]) -> list[tuple[CuratedPair, CuratedModel]]:
    return [(p, p.draft) for p in pairs
            if p.draft is not None and p.draft_kind == "mtp-assistant"]


def catalog_assistant(target: ModelSource, *,
                      pairs: Sequence[CuratedPair] | None = None) -> ModelSource | None:
    """The MTP assistant the catalog pairs with ``target`` (matched by model name, or by
    repository and file), at the target's quantization where the assistant offers it;
    None when the catalog pairs no assistant with it."""
    pairs = load_curated_pairs() if pairs is None else pairs
    for pair, assistant in _assistant_pairs(pairs):
        t = pair.target
        by_file = (target.gguf_repo is not None and target.gguf_repo.lower() == t.repo.lower()
                   and any(target.gguf_file == f.file for f in t.files))
        if target.label.lower() == t.name.lower() or by_file:
            offered = {f.quant.upper() for f in assistant.files}
            quant = target.quant.upper() if target.quant and target.quant.upper() in offered else None
            return _catalog_source(assistant, quant)
    return None


def resolve_mtp_assistant(ref: str, *,
                          pairs: Sequence[CuratedPair] | None = None) -> ModelSource:
    """An MTP assistant named on the command line: the catalog's assistant for a pair id
    (``gemma-4-e2b-it``), a model name (the assistant's or its target's), or the
    repository holding it (``owner/name[:QUANT]``, where the target's file may live too);
    else a local path or another repository, as :func:`resolve_model` reads them.

    Raises:
        TandemError: ``ref`` names nothing (see :func:`resolve_model`), or a catalog model
            that is no MTP assistant (a target's file, say: it cannot draft for itself).
    """
    pairs = load_curated_pairs() if pairs is None else pairs
    repo, _, quant = ref.partition(":")
    for pair, assistant in _assistant_pairs(pairs):
        names = {pair.id.lower(), assistant.name.lower(), pair.target.name.lower()}
        if ref.lower() in names:
            return _catalog_source(assistant)
        if repo.lower() == assistant.repo.lower() and ":" not in quant and not Path(ref).exists():
            return _catalog_source(assistant, quant.upper() or None)
    source = resolve_model(ref, pairs=pairs)
    assistants = {(a.repo.lower(), f.file) for _, a in _assistant_pairs(pairs) for f in a.files}
    known = (source.gguf_file is not None
             and any(f.file == source.gguf_file for m in _catalog_models(pairs) for f in m.files))
    if known and ((source.gguf_repo or "").lower(), source.gguf_file) not in assistants:
        ids = ", ".join(p.id for p, _ in _assistant_pairs(pairs)) or "none"
        raise TandemError(f"{ref!r} is {source.gguf_file} in the curated catalog, which is no "
                          f"MTP assistant; name one (the catalog's pairs with one: {ids}) or "
                          "leave --mtp-assistant out.")
    return source


def drafter_for(mode: SpecMode) -> ServeDrafter:
    """The server drafter for one of Tandem's modes. Auto becomes suffix lookup, which
    Auto itself runs when it has nothing measured (:mod:`app.engine.auto`); a mode no
    server runs raises.

    Raises:
        TandemError: the mode has no server equivalent.
    """
    if mode is SpecMode.AUTO:
        return ServeDrafter.SUFFIX
    try:
        return ServeDrafter(mode.value)
    except ValueError:
        raise TandemError(f"The drafter {mode.words} has no server equivalent.") from None


def plan_for(engine: ServeEngine, target: Path, speculation: SpeculationConfig, *,
             draft: Path | None = None, assistant: Path | None = None,
             pairs: Sequence[CuratedPair] | None = None, **listen: object) -> ServePlan:
    """The plan for what Tandem runs: ``target`` (and ``draft``, or with MTP the MTP
    ``assistant``) with ``speculation``'s drafter, k, draft_min, draft_p_min and n-gram
    sizes. ``listen`` passes ``host``, ``port``, ``api_key_env``, ``gpus``, ``ctx_size``
    on to :class:`ServePlan`.

    Raises:
        TandemError: the drafter needs a draft model and ``draft`` is None, or a mode no
            server runs.
    """
    drafter = drafter_for(speculation.mode)
    second = (draft if drafter.needs_draft
              else assistant if drafter is ServeDrafter.MTP else None)
    return ServePlan(
        engine=engine, target=source_for_path(target, pairs=pairs), drafter=drafter,
        draft=source_for_path(second, pairs=pairs) if second is not None else None,
        k=speculation.draft_max, draft_min=speculation.draft_min,
        draft_p_min=speculation.draft_p_min, ngram_min=speculation.ngram_min,
        ngram_max=speculation.ngram_max, **listen)  # type: ignore[arg-type]


def build_command(plan: ServePlan) -> ServeCommand:
    """The launch command for ``plan`` (see the module docstring for the mapping)."""
    if plan.engine is ServeEngine.LLAMA_SERVER:
        return _llama_server(plan)
    return _vllm(plan)


def _listen(plan: ServePlan) -> tuple[list[str], list[ServeNote]]:
    if plan.api_key_env is None:
        return ["--host", "127.0.0.1", "--port", str(plan.port)], []
    return (["--host", plan.host, "--port", str(plan.port), "--api-key", f"${plan.api_key_env}"],
            [ServeNote.API_KEY_FROM_ENV])


def _llama_model(flags: tuple[str, str], source: ModelSource,
                 notes: list[ServeNote], *, pin_file: bool = False) -> list[str]:
    """llama-server's flags for one model: a local path, ``repo:quant`` from the hub, or
    with ``pin_file`` the repository and its file by name (``-hf R -hff F`` for the
    target, ``-hfd R -md F`` for the draft, which llama.cpp takes as the draft's file
    in R): where target and draft share a repository and a quantization tag."""
    local_flag, hub_flag = flags
    if source.gguf_repo is not None:
        if pin_file and source.gguf_file is not None:
            return [hub_flag, source.gguf_repo, "-hff" if hub_flag == "-hf" else local_flag,
                    source.gguf_file]
        return [hub_flag, f"{source.gguf_repo}:{source.quant}" if source.quant else source.gguf_repo]
    if source.path is None:
        raise TandemError(f"{source.label} has neither a local GGUF nor a GGUF repository: "
                          "llama-server cannot load it.")
    notes.append(ServeNote.LOCAL_PATH)
    return [local_flag, str(source.path)]


def _llama_server(plan: ServePlan) -> ServeCommand:
    notes: list[ServeNote] = []
    # one repository holding both files (Gemma 4 and its MTP assistant): name the files
    pin = (plan.draft is not None and plan.draft.gguf_repo is not None
           and plan.draft.gguf_repo == plan.target.gguf_repo)
    argv = ["llama-server", *_llama_model(("-m", "-hf"), plan.target, notes, pin_file=pin),
            "-ngl", "all"]
    if plan.ctx_size is not None:
        argv += ["-c", str(plan.ctx_size)]
    k = str(plan.k)
    d = plan.drafter
    if d is ServeDrafter.DRAFT_MODEL or d is ServeDrafter.EAGLE3:
        assert plan.draft is not None  # ServePlan checks it
        argv += ["--spec-type", "draft-simple" if d is ServeDrafter.DRAFT_MODEL else "draft-eagle3",
                 *_llama_model(("-md", "-hfd"), plan.draft, notes, pin_file=pin), "-ngld", "all",
                 "--spec-draft-n-max", k, "--spec-draft-n-min", str(plan.draft_min)]
        if plan.draft_p_min > 0.0:
            argv += ["--spec-draft-p-min", f"{plan.draft_p_min:g}"]
    elif d is ServeDrafter.PROMPT_LOOKUP:
        argv += ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(plan.ngram_min),
                 "--spec-ngram-simple-size-m", k]
    elif d is ServeDrafter.SUFFIX:
        argv += ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-max", k,
                 "--spec-ngram-mod-n-min", str(plan.draft_min)]
        notes.append(ServeNote.SUFFIX_APPROXIMATED)
    elif d is ServeDrafter.MTP:
        argv += ["--spec-type", "draft-mtp", "--spec-draft-n-max", k]
        if plan.draft is not None:  # the assistant, loaded as the draft model
            argv += [*_llama_model(("-md", "-hfd"), plan.draft, notes, pin_file=pin),
                     "-ngld", "all"]
        elif not plan.target.mtp_layers:
            notes.append(ServeNote.MTP_NEEDS_HEADS)
    listen, listen_notes = _listen(plan)
    argv += ["--metrics", *listen]
    return ServeCommand(ServeEngine.LLAMA_SERVER, tuple(argv),
                        tuple(dict.fromkeys(notes + listen_notes)))


def _vllm_model(source: ModelSource, notes: list[ServeNote]) -> str:
    if source.weights_repo is not None:
        return source.weights_repo
    if source.is_hf_folder:
        assert source.path is not None
        notes.append(ServeNote.LOCAL_PATH)
        return str(source.path)
    notes.append(ServeNote.VLLM_NEEDS_WEIGHTS)
    return str(source.path) if source.path is not None else source.label


def speculative_config(plan: ServePlan, notes: list[ServeNote] | None = None) -> dict[str, object] | None:
    """vLLM's ``--speculative-config`` for ``plan`` (None: no drafter)."""
    notes = [] if notes is None else notes
    d = plan.drafter
    if d is ServeDrafter.OFF:
        return None
    if d is ServeDrafter.PROMPT_LOOKUP:
        return {"method": "ngram", "num_speculative_tokens": plan.k,
                "prompt_lookup_max": plan.ngram_max, "prompt_lookup_min": plan.ngram_min}
    if d is ServeDrafter.SUFFIX:
        notes.append(ServeNote.SUFFIX_NEEDS_ARCTIC)
        return {"method": "suffix", "num_speculative_tokens": plan.k}
    if d is ServeDrafter.MTP:
        if plan.draft is not None:  # the MTP assistant
            return {"method": "mtp", "model": _vllm_model(plan.draft, notes),
                    "num_speculative_tokens": plan.k}
        if not plan.target.mtp_layers:
            notes.append(ServeNote.MTP_NEEDS_HEADS)
        return {"method": "mtp", "num_speculative_tokens": plan.k}
    assert plan.draft is not None  # ServePlan checks it
    method = "draft_model" if d is ServeDrafter.DRAFT_MODEL else "eagle3"
    return {"method": method, "model": _vllm_model(plan.draft, notes),
            "num_speculative_tokens": plan.k}


def _vllm(plan: ServePlan) -> ServeCommand:
    notes: list[ServeNote] = []
    argv = ["vllm", "serve", _vllm_model(plan.target, notes)]
    if plan.gpus > 1:
        argv += ["--tensor-parallel-size", str(plan.gpus)]
    if plan.ctx_size is not None:
        argv += ["--max-model-len", str(plan.ctx_size)]
    config = speculative_config(plan, notes)
    if config is not None:
        argv += ["--speculative-config", json.dumps(config, separators=(",", ":")),
                 "--per-request-spec-decode-metrics", "summary"]
    listen, listen_notes = _listen(plan)
    argv += listen
    unique = tuple(dict.fromkeys(notes + listen_notes))
    return ServeCommand(ServeEngine.VLLM, tuple(argv), unique, config)

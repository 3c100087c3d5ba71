"""The curated catalog: target/draft pairs people run, as data in ``resources/catalog``.

``resources/catalog/pairs.json`` lists pairs (SmolLM2 1.7B + 135M and Qwen2.5 1.5B + 0.5B for a
CPU, Qwen2.5 7B + 0.5B, Qwen3 8B + 0.6B, Gemma 3 with 270M and 1B, …), each
side with its GGUF repository on the Hugging Face Hub and the file for every offered
quantization. Sizes in the file are approximate; :mod:`app.catalog.hub` reads the real
size and sha256 from the hub before a download and verifies the file against them.
Each model also names the repository of its original weights (``weights_repo``), for
engines that serve no GGUF.

Entries for the models people run now say what kind of model each side is and what
Tandem can do with it: ``architecture`` (the GGUF's ``general.architecture``),
``memory`` (``hybrid``: recurrent state beside attention, rolled back through
recurrent-state snapshots), ``mtp_layers`` (multi-token-prediction heads in the file) and
the pair's ``drafters`` (the drafter modes that apply). A pair's draft may be a
multi-token-prediction assistant (``draft_kind``, Gemma 4's separate drafter) instead of
a draft model, and a model that needs no second file (it drafts with its own MTP heads or
with lookup) has no draft at all. This module only loads and validates the data
(pydantic, ``extra="forbid"``).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from app.catalog.gguf_meta import split_part_names
from app.errors import TandemError
from app.formatting import loads_json


#: a Hugging Face repository id, ``owner/name``
_REPO_PATTERN = r"^[A-Za-z0-9][\w.-]*/[\w.-]+$"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CuratedFile(_Frozen):
    """One quantization of a model: its file in the repository.

    ``file`` is part 1 (``…-00001-of-0000N.gguf``) when ``parts`` > 1. ``size_bytes`` is
    the size of all parts together, approximate when ``size_approx``. ``name_confirmed``
    records whether the repository and file name were confirmed when the catalog was
    written, and ``confirmed_by`` how (the public material that names them); the pairing
    check before a download reads the real file either way.
    """

    quant: str = Field(min_length=1)
    file: str = Field(min_length=1, pattern=r"\.gguf$")
    size_bytes: int = Field(gt=0)
    size_approx: bool = True
    parts: int = Field(1, ge=1, le=999)
    name_confirmed: bool = False
    confirmed_by: str | None = None

    @model_validator(mode="after")
    def _confirmation_says_how(self) -> CuratedFile:
        if self.name_confirmed and not (self.confirmed_by or "").strip():
            raise ValueError("name_confirmed needs confirmed_by: how and against what")
        return self

    @property
    def filenames(self) -> list[str]:
        """Every file to download, part 1 first."""
        return split_part_names(self.file, self.parts) if self.parts > 1 else [self.file]


#: the model's memory: ``attention`` (a KV cache that llama.cpp cuts back exactly) or
#: ``hybrid`` (recurrent state — Gated DeltaNet, Mamba, short convolutions — beside
#: attention, rolled back through recurrent-state snapshots, ``n_rs_seq``)
Memory = Literal["attention", "hybrid"]
#: the drafter modes (:class:`app.options.SpecMode` values) a catalog entry can name
CatalogDrafter = Literal["draft-model", "prompt-lookup", "suffix", "mtp"]
#: what a pair's second file is: a draft model (its own forward passes, the target's
#: tokenizer) or a multi-token-prediction assistant that reads the target's hidden states
DraftKind = Literal["draft-model", "mtp-assistant"]


class CuratedModel(_Frozen):
    """One side of a pair: a model, its GGUF repository and the offered files.

    ``weights_repo`` is the repository of the original weights the GGUF was converted
    from (safetensors), for serving engines that do not read GGUF (vLLM 0.32 loads no
    GGUF); :mod:`app.catalog.server_command` writes it into a vLLM launch command.
    ``architecture`` is the GGUF's ``general.architecture`` as the public material that
    confirmed the file reports it (None: not recorded); ``memory`` the kind of state the
    model keeps (:data:`Memory`); ``mtp_layers`` the multi-token-prediction (nextn)
    layers the file carries (``<arch>.nextn_predict_layers``; 0: none or not recorded).
    The library reads all of these again from the downloaded file.
    """

    name: str = Field(min_length=1)
    repo: str = Field(pattern=_REPO_PATTERN)
    weights_repo: str | None = Field(None, pattern=_REPO_PATTERN)
    license: str | None = None
    architecture: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    memory: Memory = "attention"
    mtp_layers: int = Field(0, ge=0, le=64)
    default_quant: str
    files: tuple[CuratedFile, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _default_is_offered(self) -> CuratedModel:
        if self.default_quant not in {f.quant for f in self.files}:
            raise ValueError(f"default_quant {self.default_quant!r} is not among the files")
        return self

    def file_for(self, quant: str | None = None) -> CuratedFile:
        """The file for ``quant`` (default: :attr:`default_quant`; case-insensitive).

        Raises:
            TandemError: the quantization is not offered (the message lists those that are).
        """
        want = (quant or self.default_quant).upper()
        for f in self.files:
            if f.quant.upper() == want:
                return f
        offered = ", ".join(f.quant for f in self.files)
        raise TandemError(f"{self.name} is not offered as {quant}; choose one of: {offered}.")


class CuratedPair(_Frozen):
    """A target and the draft that goes with it, or a target alone.

    ``draft`` is None for a model that drafts without a second file (its own MTP heads,
    prompt or suffix lookup). ``draft_kind`` says what the draft is (:data:`DraftKind`).
    ``drafters`` lists the drafter modes that apply to the entry (empty: the classic
    target + draft-model pair, for which every drafter applies); each must be backed by
    the entry (``draft-model`` by a draft model, ``mtp`` by MTP layers in the target or
    an MTP assistant).
    """

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    title: str
    use: str = ""
    note: str = ""
    target: CuratedModel
    draft: CuratedModel | None = None
    draft_kind: DraftKind = "draft-model"
    drafters: tuple[CatalogDrafter, ...] = ()

    @model_validator(mode="after")
    def _drafters_are_backed(self) -> CuratedPair:
        if len(set(self.drafters)) != len(self.drafters):
            raise ValueError("drafters must not repeat")
        if self.draft is None and not self.drafters:
            raise ValueError("an entry without a draft must list its drafters")
        if "draft-model" in self.drafters and (self.draft is None
                                               or self.draft_kind != "draft-model"):
            raise ValueError("draft-model needs a draft of draft_kind draft-model")
        if "mtp" in self.drafters and not (self.target.mtp_layers > 0 or (
                self.draft is not None and self.draft_kind == "mtp-assistant")):
            raise ValueError("mtp needs mtp_layers in the target or an mtp-assistant draft")
        return self

    @property
    def models(self) -> tuple[CuratedModel, ...]:
        """The target, then the draft when there is one."""
        return (self.target,) if self.draft is None else (self.target, self.draft)

    @property
    def label(self) -> str:
        """"Target + Draft", or the target's name alone."""
        return self.target.name if self.draft is None else f"{self.target.name} + {self.draft.name}"


class _CatalogFile(_Frozen):
    schema_version: Literal[1]
    about: str = ""
    pairs: tuple[CuratedPair, ...]

    @model_validator(mode="after")
    def _unique_ids(self) -> _CatalogFile:
        ids = [p.id for p in self.pairs]
        if len(ids) != len(set(ids)):
            raise ValueError("pair ids must be unique")
        return self


def default_pairs_path() -> Path:
    """``resources/catalog/pairs.json`` (inside a PyInstaller bundle too)."""
    from app.store.paths import resources_dir

    return resources_dir() / "catalog" / "pairs.json"


def load_curated_pairs(path: Path | None = None) -> tuple[CuratedPair, ...]:
    """Read and validate the curated pairs.

    Args:
        path: a pairs file; default :func:`default_pairs_path` (read once, then cached).

    Raises:
        TandemError: the file is missing, not JSON, or does not validate (the message
            names the first problem).
    """
    if path is None:
        return _load_default()
    return _load(path)


@lru_cache(maxsize=1)
def _load_default() -> tuple[CuratedPair, ...]:
    return _load(default_pairs_path())


def _load(path: Path) -> tuple[CuratedPair, ...]:
    try:
        raw = loads_json(path.read_text(encoding="utf-8"))
        return _CatalogFile.model_validate(raw).pairs
    except OSError as exc:
        raise TandemError(f"The model catalog {path} cannot be read: {exc.strerror or exc}.") from exc
    except json.JSONDecodeError as exc:
        raise TandemError(f"The model catalog {path} is not valid JSON ({exc.msg}, line {exc.lineno}).") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ()))
        raise TandemError(f"The model catalog {path} is invalid at {where}: {first.get('msg')}.") from exc


def find_pair(pair_id: str, path: Path | None = None) -> CuratedPair:
    """The pair with this id.

    Raises:
        TandemError: no such pair (the message lists the ids).
    """
    pairs = load_curated_pairs(path)
    for p in pairs:
        if p.id == pair_id:
            return p
    raise TandemError(f"No curated pair {pair_id!r}; known pairs: {', '.join(p.id for p in pairs)}.")

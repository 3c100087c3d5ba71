"""The user's settings: a pydantic model saved as JSON in the config folder.

The file carries a ``schema_version``. Loading never fails: a file that is not JSON, does
not validate, or was written by a newer Tandem is renamed aside
(``settings.json.corrupt-<timestamp>``), defaults are used, and
:attr:`LoadedSettings.problem` says so in a sentence the window shows. Saving writes a
temporary file and renames it over the old one, so a crash mid-save leaves either the
old or the new file, never half of one.

Sampling and speculation are stored as the very objects the engine takes
(:class:`app.options.SamplingParams`, :class:`app.options.SpeculationConfig`), so a
loaded file always gives valid engine parameters and no layer keeps a translated copy.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from app.formatting import loads_json
from app.options import (
    DEFAULT_PORT,
    FREE_DRAFTER_K,
    GGML_MAX_N_THREADS,
    N_CTX,
    N_CTX_MAX,
    N_CTX_MIN,
    PROMPT_CACHE_MAX_MIB,
    PROMPT_CACHE_MIB,
    SamplingParams,
    SpecMode,
    SpeculationConfig,
    max_threads,
)
from app.store import paths
from app.store.files import write_json_atomic

log = logging.getLogger(__name__)

#: 2: a model-free drafter's stored k of 4 (version 1's default for every drafter)
#: becomes its own default, :data:`app.options.FREE_DRAFTER_K` (see :func:`_migrate`).
#: 3: fields an older Tandem does not know (``model.n_threads``,
#: ``model.prompt_cache_mib``); nothing to migrate, but an older Tandem then says the
#: file was written by a newer one (and sets it aside) instead of calling it invalid.
SCHEMA_VERSION = 3

#: The k every drafter got by default in settings version 1.
_V1_DEFAULT_K = 4


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


#: targets remembered for "Open recent" (:attr:`ModelSettings.recent_targets`)
RECENT_TARGETS = 8


class ModelSettings(_Section):
    """What to load. ``n_gpu_layers`` None: all layers on the GPU when the build can; 0: CPU.

    ``n_ctx`` is the context length in tokens; it applies when the target is (re)loaded.
    ``exact_verification``: load the target in the configuration whose verification
    batches compute like one-token passes (:mod:`app.engine.exact`; CPU, Q4_1/Q5_1/Q5_0/
    Q8_0 weights, or Q4_K/Q6_K when the process started with it on: :mod:`app.entry`),
    so speculation's output equals plain decoding's; applies on reload.
    """

    target_path: Path | None = None
    draft_path: Path | None = None
    n_ctx: int = Field(N_CTX, ge=N_CTX_MIN, le=N_CTX_MAX, description=(
        "context window in tokens: the conversation must fit in it"))
    n_gpu_layers: Annotated[int | None, Field(ge=0)] = None
    exact_verification: bool = False
    #: (:mod:`app.engine.cpu`; the window shows None as 0, "Auto")
    n_threads: int | None = Field(None, ge=1, le=GGML_MAX_N_THREADS, description=(
        "CPU threads for decoding. Auto: as many as the cores other programs leave free, "
        "changed while a reply runs when the machine gets busy or quiet (a thread that "
        "waits for a busy core stalls the others at every step)"))
    #: the targets loaded last, most recent first (File → Open recent)
    recent_targets: list[Path] = []
    prompt_cache_mib: int = Field(PROMPT_CACHE_MIB, ge=0, le=PROMPT_CACHE_MAX_MIB, description=(
        "Memory for saved prompt states: a conversation or API request the model's "
        "context gave up is kept, so that returning to it re-reads only what is new "
        f"instead of the whole prompt. Off: none are kept. Default {PROMPT_CACHE_MIB} MiB."))

    @field_validator("recent_targets")
    @classmethod
    def _latest_only(cls, v: list[Path]) -> list[Path]:
        return v[:RECENT_TARGETS]

    def opened(self, target: Path) -> None:
        """``target`` loaded: first in :attr:`recent_targets` (once)."""
        self.recent_targets = [target, *(p for p in self.recent_targets if p != target)]

    @field_validator("n_threads")
    @classmethod
    def _threads_of_this_computer(cls, v: int | None) -> int | None:
        # a file written on a bigger computer: more than this one may use is Auto here
        # (a load would refuse it: SessionConfig)
        if v is not None and v > max_threads():
            log.info("the settings' %d threads are more than this computer may use: Auto", v)
            return None
        return v


class RemoteSettings(_Section):
    """The remote server last connected to: its address and the model used. Never its
    API key: that is kept in the OS keyring (:mod:`app.store.credentials`)."""

    base_url: str | None = None
    model: str | None = None


#: load notes remembered as shown (:attr:`UiSettings.seen_notes`)
SEEN_NOTES = 20


class UiSettings(_Section):
    """Window state. ``window_geometry`` / ``splitter_state`` are Qt's saveGeometry and
    saveState bytes, base64-encoded; ``last_conversation_id`` is reopened at start-up."""

    tint_drafts: bool = True
    #: the API tab's port
    api_port: int = Field(DEFAULT_PORT, ge=1024, le=65535)
    #: the API tab's "Serve API" switch as the user left it: serving starts with the
    #: window (a start that fails, a port in use, says why and is tried at the next)
    api_serving: bool = False
    window_geometry: str | None = None
    splitter_state: str | None = None
    last_conversation_id: int | None = None
    #: text typed and not sent, by conversation id ("new": a chat not stored yet)
    unsent: dict[str, str] = {}
    #: where the last conversation was exported (the next export's dialog opens there)
    export_folder: str | None = None
    #: notes a model load gave that were shown already, as "<model file name>\t<note>"
    #: (the latest :data:`SEEN_NOTES`): the same note for that model at the next start is
    #: logged, not shown again
    seen_notes: list[str] = []
    #: ask before quitting while a reply, an API request, a race or a download runs
    confirm_quit: bool = True


#: The drafter a new user starts with: prompt lookup needs no second model.
DEFAULT_SPECULATION = SpeculationConfig(mode=SpecMode.PROMPT_LOOKUP)


class Settings(_Section):
    """Everything the app remembers between runs (except the chat history).

    ``speculation`` and ``sampling`` are frozen: replace them whole (their
    ``with_changes`` validates), which this model validates again on assignment.
    """

    schema_version: int = SCHEMA_VERSION
    model: ModelSettings = ModelSettings()
    speculation: SpeculationConfig = DEFAULT_SPECULATION
    sampling: SamplingParams = SamplingParams()
    ui: UiSettings = UiSettings()
    remote: RemoteSettings = RemoteSettings()


@dataclass(frozen=True, slots=True)
class LoadedSettings:
    """The result of :func:`load_settings`.

    ``problem``: None, or a sentence for the user saying the file was unreadable, where the
    old file was moved, and that defaults are in use. ``set_aside``: that file's path.
    """

    settings: Settings
    problem: str | None = None
    set_aside: Path | None = None


def _migrate(raw: dict[str, Any]) -> dict[str, Any]:
    """Bring an older schema up to :data:`SCHEMA_VERSION` (version 1 is the first)."""
    version = raw.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValueError("it has no schema_version")
    if version > SCHEMA_VERSION:
        raise ValueError(f"it was written by a newer Tandem (settings version {version})")
    if version < 1:
        raise ValueError(f"unknown settings version {version}")
    if version == 1:
        raw = _raise_v1_default_k(raw)
    return _ngram_order(raw)


def _ngram_order(raw: dict[str, Any]) -> dict[str, Any]:
    """A file edited by hand with ``ngram_min`` above ``ngram_max`` (which the options
    refuse) gets them swapped, as prompt lookup used them, instead of the whole file being
    set aside."""
    spec = raw.get("speculation")
    if isinstance(spec, dict):
        low, high = spec.get("ngram_min"), spec.get("ngram_max")
        if isinstance(low, int) and isinstance(high, int) and low > high:
            raw = {**raw, "speculation": {**spec, "ngram_min": high, "ngram_max": low}}
    return raw


def _raise_v1_default_k(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 1 stored k = 4 for every drafter, chosen or not; since version 2 a drafter
    without a model defaults to k = 16, a ceiling that the cost-aware draft length cuts
    each round (:data:`app.options.FREE_DRAFTER_K` gives the measurements). A version-1
    file with such a drafter at 4 and the cost-aware length on gets 16; a draft model, a
    fixed k or any other k is kept (only 4 could be the old default). "off" and "auto"
    are raised too: their default is 16, and a later switch to another drafter keeps a k
    at the old drafter's default (:meth:`app.options.SpeculationConfig.k_for`). A file
    written by this version is set aside by an older Tandem ("written by a newer Tandem").
    """
    spec = raw.get("speculation")
    if not isinstance(spec, dict):
        return raw
    if (spec.get("draft_max") == _V1_DEFAULT_K
            and spec.get("mode") != SpecMode.DRAFT_MODEL.value
            and spec.get("adaptive", True) is True):
        raw = {**raw, "speculation": {**spec, "draft_max": FREE_DRAFTER_K}}
    return raw


def load_settings(path: Path | None = None) -> LoadedSettings:
    """Read the settings file, or defaults when there is none.

    Args:
        path: the file; default :func:`app.store.paths.settings_path`.

    Returns:
        The settings, with ``problem`` set when the file was unusable and set aside.
        Never raises for a bad file; OS errors other than "missing" while reading are
        treated the same way as a corrupt file.
    """
    path = path or paths.settings_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return LoadedSettings(Settings())
    except (OSError, UnicodeDecodeError) as exc:
        return _set_aside(path, f"it could not be read ({exc})")
    try:
        raw = loads_json(text)
        if not isinstance(raw, dict):
            raise ValueError("it is not a JSON object")
        settings = Settings.model_validate(_migrate(raw))
    except json.JSONDecodeError as exc:
        return _set_aside(path, f"it is not valid JSON ({exc.msg}, line {exc.lineno})")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ()))
        return _set_aside(path, f"{where}: {first.get('msg')}")
    except ValueError as exc:
        return _set_aside(path, str(exc))
    return LoadedSettings(settings)


def saved_exact_verification(path: Path | None = None) -> bool:
    """Whether the settings file asks for exact verification, read without side effects.

    For the start of the process, before llama.cpp loads (:func:`app.entry.main` switches
    ggml's tiled K-quant kernel off then, :mod:`app.engine.exact`): unlike
    :func:`load_settings` it never sets a bad file aside (the window reports that later)
    and never raises; anything unreadable reads as False. It writes no file (finding the
    path creates the config folder when missing, as every settings access does).
    """
    try:
        raw = loads_json((path or paths.settings_path()).read_text(encoding="utf-8"))
        return bool(isinstance(raw, dict) and isinstance(raw.get("model"), dict)
                    and raw["model"].get("exact_verification") is True)
    except Exception:  # missing, unreadable, not JSON: the default
        return False


def _set_aside(path: Path, why: str) -> LoadedSettings:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while aside.exists():
        aside = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        n += 1
    moved: Path | None = aside
    try:
        path.replace(aside)
        where = f"It was moved to {aside}."
    except OSError as exc:
        moved = None
        where = f"It could not be moved aside ({exc})."
    log.warning("settings file %s unusable: %s", path, why)
    return LoadedSettings(
        Settings(),
        problem=f"Your settings file could not be used because {why}. {where} "
        "Default settings are in use.",
        set_aside=moved,
    )


def save_settings(settings: Settings, path: Path | None = None) -> Path:
    """Write the settings atomically (temporary file, fsync, rename).

    Returns:
        The path written.

    Raises:
        OSError: the folder is not writable or the disk is full (the old file is kept).
    """
    data = settings.model_dump(mode="json")
    data["schema_version"] = SCHEMA_VERSION
    return write_json_atomic(path or paths.settings_path(), data)

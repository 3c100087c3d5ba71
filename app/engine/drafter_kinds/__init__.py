"""The drafter registry: one module in this package per drafter.

Each module declares its drafter once — a :class:`~app.options.DrafterInfo` (mode, label,
what it needs, its options, whether Auto may pick it, its command-line switch, its words
in the model picker), a ``create`` function and, for a drafter Auto may price by
replaying earlier replies, a ``replay`` function — with :func:`register`, and leaves the
result as a module-level ``KIND`` (a :class:`DrafterKind`). Importing this package
imports every module in it, so a drafter added as a new module is in every list at once:
:class:`~app.options.SpecMode`, the pickers, the command-line switches, the API's
accepted modes, Auto's candidates and the docs table come from the declarations, and :meth:`app.engine.session.Session` finds its drafter with
:func:`kind_for`. Adding a drafter touches one file here plus its tests.

A ``create`` function gets the session as a :class:`DrafterHost` (the target, its
context, the suffix index, the loaded draft model or MTP assistant, a per-session cache for drafters that
own native resources) and the reply's :class:`~app.options.SpeculationConfig`, and
returns the drafter or an :class:`Unavailable` whose ``reason`` is one sentence for the
user (no draft model loaded, the build lacks a function, the model lacks a head).

A ``predict`` function (optional) gets a target GGUF's path and the GPU layers it is
(to be) loaded with (None: the build's default) and returns a :class:`DrafterPrediction` (the speedup it expects and the figures behind it)
or None when nothing is known; the model picker shows it and preselects a drafter that
predicts a gain.

A ``replay`` function (optional) gets the reply's :class:`~app.options.SpeculationConfig`
and a :class:`~app.engine.suffix.SuffixIndex` of the conversation's replies replayed so
far, and returns a fresh drafter that needs no model (Auto replays the conversation's
earlier replies through it, :func:`app.engine.auto.estimate_drafters`); a drafter
without one is priced by Auto only if it is the draft model.

:func:`register` may also be called from outside this package (a plug-in, a test);
:func:`unregister` takes such a drafter out again.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from app.engine.stats import predicted_speedup
from app.options import (
    DrafterInfo,
    SpecMode,
    SpeculationConfig,
    declare_drafter,
    withdraw_drafter,
)

if TYPE_CHECKING:
    from app.engine.drafters import Drafter, DraftModelDrafter
    from app.engine.llama import LlamaContext, LlamaModel
    from app.engine.suffix import SuffixIndex


@dataclass(frozen=True, slots=True)
class Unavailable:
    """Why a drafter cannot draft in this session: one sentence for the user."""

    reason: str


class DrafterHost(Protocol):
    """What a drafter's ``create`` may use of the session (:class:`~app.engine.session.Session`)."""

    @property
    def target(self) -> LlamaModel: ...

    @property
    def ctx(self) -> LlamaContext: ...

    @property
    def suffix_index(self) -> SuffixIndex: ...

    @property
    def loaded_draft(self) -> DraftModelDrafter | None:
        """The draft model's drafter when one is loaded."""

    @property
    def loaded_assistant(self) -> LlamaModel | None:
        """The MTP assistant model (Gemma 4's assistant GGUF) when one is loaded in the
        drafter model's place."""

    def kept_drafter(self, mode: SpecMode, make: Callable[[], Drafter | Unavailable]
                     ) -> Drafter | Unavailable:
        """The drafter this session keeps for ``mode`` (made on first use with ``make``
        and closed with the session), or why it cannot be made (remembered too)."""

    def drop_target_cache(self) -> None:
        """Empty the target's KV cache before this reply's prefill, so that it evaluates
        the whole prompt (a drafter that must see every position the target holds)."""


@dataclass(frozen=True, slots=True)
class DrafterPrediction:
    """What a drafter expects of a target before it is loaded.

    Attributes:
        acceptance_rate: the α assumed (a published prior; see the drafter's module).
        cost_ratio: the draft cost ratio c (one draft step / one plain target step).
        k: the draft length priced.
        cost_source: where c comes from, in a few words ("measured by the load check").
    """

    acceptance_rate: float
    cost_ratio: float
    k: int
    cost_source: str = ""

    @property
    def speedup(self) -> float:
        """E(α, k) / (1 + c·k) (:func:`app.engine.stats.predicted_speedup`)."""
        return predicted_speedup(self.acceptance_rate, self.k, self.cost_ratio)

    @property
    def helps(self) -> bool:
        """A predicted speedup above 1 (faster than plain decoding)."""
        return self.speedup > 1.0


Create = Callable[[DrafterHost, SpeculationConfig], "Drafter | Unavailable"]
Replay = Callable[[SpeculationConfig, "SuffixIndex"], "Drafter"]


class Predict(Protocol):
    """``predict(target_path, n_gpu_layers, assistant=None)``: the drafter's
    :class:`DrafterPrediction` for a target (drafting with the MTP ``assistant`` GGUF
    paired with it, where given), or None."""

    def __call__(self, target: Path, n_gpu_layers: int | None, /,
                 assistant: Path | None = None) -> DrafterPrediction | None: ...


@dataclass(frozen=True, slots=True)
class DrafterKind:
    """One registered drafter: its declaration and how a session makes it.

    ``create(host, spec)`` returns the drafter for one reply (it may return the same
    object reply after reply) or :class:`Unavailable`. ``replay(spec, index)``: a fresh
    model-free drafter for Auto's replays (None: Auto cannot replay it).
    ``predict(target_path, n_gpu_layers, assistant=None)``: its :class:`DrafterPrediction`
    for a target (with a paired MTP assistant) from what is known without running it
    (None: it predicts nothing).
    """

    info: DrafterInfo
    create: Create
    replay: Replay | None = None
    predict: Predict | None = None

    @property
    def mode(self) -> SpecMode:
        return SpecMode(self.info.mode)


_KINDS: dict[SpecMode, DrafterKind] = {}
_loaded = False


def register(info: DrafterInfo, create: Create, *, replay: Replay | None = None,
             predict: Predict | None = None) -> DrafterKind:
    """Declare ``info`` in the vocabulary (:func:`app.options.declare_drafter`), add the
    drafter to the registry and return its kind (a drafter module leaves it as ``KIND``).
    From then on it is in every list: :class:`~app.options.SpecMode`, the pickers built
    afterwards, the command-line switches, Auto's candidates (when ``info.auto_rank`` is
    set) and the docs table.

    Registering the same declaration again (a module imported twice) changes nothing
    and returns the drafter registered first.

    Raises:
        ValueError: the mode is taken by off, auto or another declaration, or the
            declaration is malformed.
    """
    mode = declare_drafter(info)
    return _KINDS.setdefault(mode, DrafterKind(info, create, replay, predict))


def unregister(mode: SpecMode | str) -> None:
    """Take a drafter registered from outside this package out of the registry and the
    vocabulary again (a test's drafter, a plug-in being unloaded).

    Raises:
        ValueError: ``mode`` is unknown, or is one of the drafters declared by
            :mod:`app.options` (the settings' defaults use them).
    """
    mode = SpecMode(mode)
    withdraw_drafter(mode)
    _KINDS.pop(mode, None)


def _load() -> dict[SpecMode, DrafterKind]:
    """Import every module of this package once (each registers its drafter)."""
    global _loaded
    if not _loaded:
        _loaded = True
        for mod in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            importlib.import_module(f"{__name__}.{mod.name}")
    return _KINDS


def kinds() -> tuple[DrafterKind, ...]:
    """Every registered drafter, in the vocabulary's order (:class:`SpecMode`)."""
    table = _load()
    return tuple(table[m] for m in SpecMode if m in table)


def kind_for(mode: SpecMode | str) -> DrafterKind | None:
    """The registered drafter of ``mode``; None for off and auto.

    Raises:
        ValueError: ``mode`` is no known mode.
    """
    return _load().get(SpecMode(mode))


_load()

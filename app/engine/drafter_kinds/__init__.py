"""The drafter registry: one module in this package per drafter.

Each module declares its drafter once — a :class:`~app.options.DrafterInfo` (mode, label,
what it needs, its options, whether Auto may pick it, its command-line switch) and a
``create`` function — and leaves it here as a module-level ``KIND`` (a
:class:`DrafterKind`). Importing this package imports every module in it, so a drafter
added as a new module is in every list at once: :class:`~app.options.SpecMode`, the
pickers, the command-line switches, Auto's candidates and the docs table come from the
declarations, and :meth:`app.engine.session.Session` finds its drafter with
:func:`kind_for`. Adding a drafter touches one file here plus its tests.

A ``create`` function gets the session as a :class:`DrafterHost` (the target, its
context, the suffix index, the loaded draft model, a per-session cache for drafters that
own native resources) and the reply's :class:`~app.options.SpeculationConfig`, and
returns the drafter or an :class:`Unavailable` whose ``reason`` is one sentence for the
user (no draft model loaded, the build lacks a function, the model lacks a head).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from app.options import DrafterInfo, SpecMode, SpeculationConfig, declare_drafter

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

    def kept_drafter(self, mode: SpecMode, make: Callable[[], Drafter | Unavailable]
                     ) -> Drafter | Unavailable:
        """The drafter this session keeps for ``mode`` (made on first use with ``make``
        and closed with the session), or why it cannot be made (remembered too)."""

    def drop_target_cache(self) -> None:
        """Empty the target's KV cache before this reply's prefill, so that it evaluates
        the whole prompt (a drafter that must see every position the target holds)."""


Create = Callable[[DrafterHost, SpeculationConfig], "Drafter | Unavailable"]


@dataclass(frozen=True, slots=True)
class DrafterKind:
    """One registered drafter: its declaration and how a session makes it.

    ``create(host, spec)`` returns the drafter for one reply (it may return the same
    object reply after reply) or :class:`Unavailable`.
    """

    info: DrafterInfo
    create: Create

    @property
    def mode(self) -> SpecMode:
        return SpecMode(self.info.mode)


def register(info: DrafterInfo, create: Create) -> DrafterKind:
    """Declare ``info`` in the vocabulary (:func:`app.options.declare_drafter`) and make
    the kind a drafter module leaves as ``KIND``.

    Raises:
        ValueError: the mode is taken by another declaration.
    """
    declare_drafter(info)
    return DrafterKind(info, create)


_KINDS: dict[SpecMode, DrafterKind] = {}


def _load() -> dict[SpecMode, DrafterKind]:
    if not _KINDS:
        found: dict[SpecMode, DrafterKind] = {}
        for mod in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            kind = getattr(importlib.import_module(f"{__name__}.{mod.name}"), "KIND", None)
            if isinstance(kind, DrafterKind):
                if kind.mode in found:
                    raise ValueError(f"two drafter modules register {kind.mode.value!r}")
                found[kind.mode] = kind
        _KINDS.update(found)
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
